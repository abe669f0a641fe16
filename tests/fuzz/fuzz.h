/* fuzz.h: what the libFuzzer harnesses (tests/fuzz/fuzz_*.c) share. Each harness defines
 * LLVMFuzzerTestOneInput; `make fuzz` links it with libFuzzer (clang, ASan+UBSan) and
 * tests/fuzz/replay.c links it with the normal build to replay the committed corpora in
 * `make test`. Readers that take a path get the input through fuzz_file(). */
#ifndef SCAFFOLD_TESTS_FUZZ_H
#define SCAFFOLD_TESTS_FUZZ_H

#include "core/err.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the input to a file of this process (in a private temporary directory, created once
 * and reused) whose name ends with `suffix`, and returns its path (static storage). */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    static char dir[256];
    static char path[512];
    if (!dir[0]) {
        /* Memory-backed when possible: a write per input dominates small inputs on a disk. */
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/scaffold-fuzz-XXXXXX", t);
        if (!mkdtemp(dir))
            abort();
    }
    snprintf(path, sizeof path, "%s/input%s", dir, suffix);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    return path;
}

/* A sink for report writers. */
static inline FILE *fuzz_null(void) {
    static FILE *f;
    if (!f)
        f = fopen("/dev/null", "w");
    return f;
}

#endif
