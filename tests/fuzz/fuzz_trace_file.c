/* Fuzz harness: `scaffold analyze` on one trace file, whole pipeline (gzip members or plain
 * JSON lines, reader, metrics, rules, text report). Inputs starting with the gzip magic are
 * read as .pfw.gz, others as .pfw. */
#include "analyze/analyze.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    const char *p = fuzz_file(data, size, gz ? ".pfw.gz" : ".pfw");
    an_opts o = {.top = 5};
    o.read.threads = 1;
    const char *paths[1] = {p};
    an_analyze(paths, 1, &o, fuzz_null(), fuzz_null());
    err_clear();
    return 0;
}
