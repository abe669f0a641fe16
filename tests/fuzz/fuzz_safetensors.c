/* Fuzz harness: the safetensors reader behind checkpoints and predict (header, tensor table,
 * metadata, byte ranges, dtype conversion). */
#include "fuzz.h"
#include "nn/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file(data, size, ".safetensors");
    nn_st_file st;
    if (nn_st_open(&st, p) == 0) {
        nn_st_meta(&st, "epoch");
        for (int i = 0; i < st.nt; i++) {
            size_t n = nn_st_numel(&st.t[i]);
            if (n > (1u << 20))
                continue;
            float *dst = malloc((n ? n : 1) * sizeof *dst);
            if (dst)
                nn_st_read_f32(&st, &st.t[i], dst);
            free(dst);
            nn_st_find(&st, st.t[i].name);
        }
    }
    nn_st_close(&st);
    err_clear();
    return 0;
}
