/* Fuzz harness: `scaffold compare` inputs: the input is split at its first NUL byte into a
 * baseline and a candidate trace file (gzip or plain, as fuzz_trace_file), each loaded as a run,
 * then compared with the guards and printed as text and JSON. */
#include "analyze/compare.h"
#include "fuzz.h"

static const char *write_side(const uint8_t *d, size_t n, const char *name) {
    int gz = n >= 2 && d[0] == 0x1f && d[1] == 0x8b;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-%s%s", name, gz ? ".pfw.gz" : ".pfw");
    static char keep[2][512];
    const char *p = fuzz_file(d, n, suffix);
    char *dst = keep[name[0] == 'c'];
    snprintf(dst, sizeof keep[0], "%s", p);
    return dst;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *sep = memchr(data, 0, size);
    size_t nb = sep ? (size_t)(sep - data) : size;
    const char *pb = write_side(data, nb, "base");
    const char *pc = sep ? write_side(sep + 1, size - nb - 1, "cand") : write_side(data, nb, "cand");
    an_read_opts ro = {0};
    ro.threads = 1;
    an_run runs[2];
    memset(runs, 0, sizeof runs);
    if (an_run_load(pb, &ro, &runs[0]) == 0 && an_run_load(pc, &ro, &runs[1]) == 0) {
        an_compare_result r;
        an_compare(&runs[0], 1, &runs[1], 1, 0.01, &r);
        an_compare_text(&runs[0], 1, &runs[1], 1, &r, fuzz_null());
        an_compare_json(&runs[0], 1, &runs[1], 1, &r, fuzz_null());
    }
    err_clear();
    return 0;
}
