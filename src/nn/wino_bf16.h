/* wino_bf16: the pieces of winograd-bf16 (algo.h) that the fp32 Winograd drivers of conv.c call
 * when their GEMMs run on vdpbf16ps: the transformed operands rounded to bf16 in the pair
 * layouts the kernels read. Internal to src/nn. */
#ifndef SCAFFOLD_NN_WINO_BF16_H
#define SCAFFOLD_NN_WINO_BF16_H

#include <stdint.h>

/* dst[(k/2)*nr*2 + 2j + k%2] = bf16(src[k*nr + j]) for k < nk, j < nr; an odd nk's last pair
 * gets a zero second half (the zero channel of an odd K). */
void nn_wb_pack_u(uint16_t *dst, const float *src, int nk, int nr);

#endif
