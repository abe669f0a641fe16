/* Fuzz harness: the .npy reader (header parsing, shape and size validation, whole-array loads
 * and loads into a caller's buffer of an expected shape). */
#include "core/npy.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file(data, size, ".npy");
    npy_header h;
    void *buf = NULL;
    if (npy_load(p, &h, &buf) == 0)
        free(buf);
    /* The dataset reader's path: a fixed expected dtype and shape. */
    static float into[4 * 4 * 4 * 3];
    const int64_t shape[4] = {3, 4, 4, 4};
    npy_read_into(p, NPY_F32, 4, shape, into);
    err_clear();
    return 0;
}
