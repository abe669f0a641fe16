/* wino_bf16: see wino_bf16.h. */
#include "nn/wino_bf16.h"

#include "nn/layers.h"

#include <string.h>

/* The bf16 bits of x, nearest (ties to even). */
static inline uint16_t wb_bits(float x) {
    uint32_t u;
    x = nn_bf16_round(x);
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

void nn_wb_pack_u(uint16_t *restrict dst, const float *restrict src, int nk, int nr) {
    for (int k = 0; k < nk; k += 2) {
        const float *s0 = src + (size_t)k * nr, *s1 = k + 1 < nk ? s0 + nr : NULL;
        uint16_t *d = dst + (size_t)k * nr;
        for (int j = 0; j < nr; j++) {
            d[2 * j] = wb_bits(s0[j]);
            d[2 * j + 1] = s1 ? wb_bits(s1[j]) : 0;
        }
    }
}
