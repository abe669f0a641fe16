/* gemm: the two register-blocked microkernels every convolution in src/nn is built from.
 *
 * Activations are channels-last (N, D, H, W, C), so for a fixed tap of a convolution the input
 * values of consecutive output voxels along x are rows of a matrix with leading dimension C:
 * a convolution is a sum over taps of small GEMMs on shifted views ("implicit GEMM"), with no
 * im2col copy. Two kernels cover forward, input-gradient and weight-gradient passes:
 *
 *  - nn_tg_row ("tap GEMM"): C[x, j] (op)= sum_t sum_k A[aoff[t] + x*lda + k] * Bp[t][k][j]
 *    for one output row of X positions and one block of nr output columns. Bp is packed
 *    [T][K][nr] (zero-padded past the valid columns). The accumulators (MR rows x nr columns)
 *    stay in registers for the whole T*K reduction; A values are broadcast, B rows are vectors.
 *  - nn_tw_tile ("weight-gradient tile"): Wt[k, j] += sum_rows sum_x A_r[x*lda + k] * G_r[x*ldg + j]
 *    for mk input channels and nr output channels, reducing over voxels.
 *
 * The SIMD width comes from the compiler target (GCC vector extensions): 16 floats with
 * AVX-512, 8 with AVX/AVX2 (FMA contracted where the target has it), 4 otherwise (SSE2, NEON,
 * or scalar code the compiler lowers), so the same source is the fast and the portable path. */
#ifndef SCAFFOLD_NN_GEMM_H
#define SCAFFOLD_NN_GEMM_H

#include <stddef.h>

/* Floats per SIMD vector in this build (16, 8 or 4). */
int nn_gemm_vw(void);

/* Column-block width (floats, a multiple of the vector width, at most 4 vectors) the kernels
 * use for a matrix with n output columns. */
int nn_gemm_nr(int n);

/* Largest row block (output positions) nn_tg_row keeps in registers for block width nr. */
int nn_tg_mr(int nr);

/* Largest k block nn_tw_tile keeps in registers for block width nr. */
int nn_tw_mr(int nr);

typedef struct nn_tg {
    int T, K;         /* taps, reduction length per tap */
    const long *aoff; /* T offsets (floats) into A, one per tap */
    long lda;         /* A stride (floats) between consecutive output positions */
    long ldc;         /* C stride (floats) between consecutive output positions */
    int nr;           /* column-block width, from nn_gemm_nr() */
} nn_tg;

enum { NN_TG_ZERO = 0, NN_TG_ACCUM = 1, NN_TG_BIAS = 2 };

/* One output row of X positions for one column block (nvalid <= nr valid columns):
 *   C[x*ldc + j] = init + sum_t sum_k A[aoff[t] + x*lda + k] * Bp[(t*K + k)*nr + j]
 * init: NN_TG_ZERO (0), NN_TG_ACCUM (the current C), NN_TG_BIAS (bias[j], nr floats readable).
 * Only the nvalid first columns of C are written. */
void nn_tg_row(const nn_tg *g, int X, const float *A, const float *Bp, float *C, const float *bias,
               int nvalid, int mode);

/* Weight-gradient tile over `nrows` rows of X positions each:
 *   Wt[k*ldw + j] += sum_r sum_x arows[r][x*lda + k] * grows[r][x*ldg + j]
 * for k < mk (mk <= nn_tw_mr(nr)) and j < nvalid (<= nr). When nvalid < nr the G rows are read
 * only up to nvalid columns. */
void nn_tw_tile(int nrows, const float *const *arows, const float *const *grows, int X, long lda,
                long ldg, int mk, int nr, int nvalid, float *Wt, long ldw);

#endif
