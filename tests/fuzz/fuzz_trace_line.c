/* Fuzz harness: the trace reader's JSON-line parser (one dftracer event line). */
#include "analyze/trace.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The parser reads [p, end); give it a copy without a terminator past the end, so reads
     * beyond the line are caught. */
    char *line = malloc(size ? size : 1);
    if (!line)
        return 0;
    memcpy(line, data, size);
    an_rawev ev;
    an_parse_line(line, line + size, &ev);
    free(line);
    err_clear();
    return 0;
}
