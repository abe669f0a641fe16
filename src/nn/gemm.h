/* gemm: the register-blocked microkernels every convolution in src/nn is built from, and the
 * run-time choice of instruction set they are compiled for.
 *
 * Activations are channels-last (N, D, H, W, C), so for a fixed tap of a convolution the input
 * values an output voxel needs are C contiguous floats: a convolution is a sum over taps of
 * small GEMMs whose rows are voxels and whose columns are channels ("implicit GEMM", no im2col
 * copy). Two kernels cover forward, input-gradient and weight-gradient passes:
 *
 *  - nn_tg_block ("tap GEMM"): for a block of m output positions, each with its own A and C
 *    pointer (so a block may span rows of a volume, and a layer may scatter its outputs):
 *        C_i[j] (op)= sum_t sum_k a_i[aoff[t] + k] * Bp[(t*K + k)*nr + j]
 *    Bp is packed [T][K][nr] (zero-padded past the valid columns). The m x nr accumulators stay
 *    in registers for the whole T*K reduction; A values are broadcast, B rows are vectors.
 *  - nn_tw_tile ("weight-gradient tile"): Wt[k, j] += sum_rows sum_x A_r[x*lda + k] * G_r[x*ldg + j]
 *    for mk input channels and nr output channels, reducing over voxels.
 *
 * Dispatch: the kernels are compiled once per instruction set (AVX-512, AVX2+FMA, portable C:
 * SSE2 on x86-64, whatever the compiler targets elsewhere) and one set is chosen at first use
 * from what the CPU reports. SCAFFOLD_ISA=avx512|avx2|portable forces a path (a path the CPU
 * lacks is refused with a message and the best supported one is used). The block shapes (nr,
 * largest m) depend on the path: query them, never assume them. */
#ifndef SCAFFOLD_NN_GEMM_H
#define SCAFFOLD_NN_GEMM_H

#include <stddef.h>
#include <stdint.h>

/* ---- instruction-set paths ---------------------------------------------------------------- */

enum { NN_ISA_PORTABLE = 0, NN_ISA_AVX2 = 1, NN_ISA_AVX512 = 2, NN_ISA_COUNT = 3 };

/* Path in use (chosen on first call: SCAFFOLD_ISA, else the best this CPU supports). */
int nn_isa(void);
/* "portable", "avx2", "avx512"; NULL for an unknown index. */
const char *nn_isa_name(int isa);
/* 1 when the path is compiled in and this CPU (and OS) can execute it. */
int nn_isa_supported(int isa);
/* Switches path (tests, benchmarks). 0, or ERR_CONFIG when the CPU cannot run it. Not
 * thread-safe: call between layers, never while a layer runs. */
int nn_isa_set(int isa);
/* Chooses the path again from the settings, if it was chosen already (nn_settings_reload calls
 * it; same thread-safety as nn_isa_set). */
void nn_isa_reload(void);
/* 1 when the bf16 layers use the pair kernels (nn_tg_block_bf16): the path in use has
 * AVX512_BF16 (vdpbf16ps). SCAFFOLD_BF16DP=0 turns them off (the bf16 layers then use the fp32
 * kernels on bf16-rounded values); SCAFFOLD_BF16DP=emulate turns them on on any path with a
 * plain C stand-in for vdpbf16ps, so the pair packing is tested where the instruction is
 * missing (slow: tests only). */
int nn_isa_bf16dp(void);
/* 1 when, on top of that, the Conv3d bf16 passes run on AMX tiles (nn_tg_amx): the CPU reports
 * AMX-BF16 and the OS granted the tile state. SCAFFOLD_AMX=0 turns it off (vdpbf16ps only). */
int nn_isa_amx(void);
/* CPU model name as the OS reports it ("unknown" when it cannot be read). */
const char *nn_cpu_name(void);

/* FP32 FMA peak of the path in use on every OpenMP thread (GFLOP/s): 12 independent chains of
 * vector FMAs per thread in registers, for about `seconds`. The ceiling the kernels are
 * reported against. */
double nn_fma_peak_gflops(double seconds);
/* The AMX tiles' bf16 peak on every OpenMP thread (GFLOP/s, 2 per product): four independent
 * TDPBF16PS in registers per round, for about `seconds`; 0 where the run has no AMX
 * (nn_isa_amx). On a host whose cores are shared, this is the number that moves when another
 * tenant uses the tile unit. */
double nn_amx_peak_gflops(double seconds);

/* ---- block shapes --------------------------------------------------------------------------- */

/* Floats per SIMD vector of the path in use (16, 8 or 4). */
int nn_gemm_vw(void);

/* Column-block width (floats, a multiple of the vector width) the kernels use for a matrix
 * with n output columns. */
int nn_gemm_nr(int n);

/* Columns of a packed matrix with n columns, padded to whole blocks, for the widest blocks of
 * every supported path (so workspace sized with it fits whatever path runs). */
int nn_gemm_ncol_max(int n);

/* Winograd F(4x4x2, 3x3x3) transforms of one tile on the path in use, channels-last (conv_wino.c).
 * nn_wino_input: V[xi*ldv + k] (xi = 36a + 6b + c, k < C) = B^T d B of the 4x6x6 input block
 * whose point (a, b, c) is at P + a*plane + b*row + c*vox (channels k < C of each point: a
 * slice of a wider tensor when C < vox). nn_wino_output: the 2x4x4 outputs A^T M A of
 * M[xi*ldm + j] (rows readable to whole vectors past ncol) into out + a*oplane + b*orow +
 * c*ovox, columns j < ncol. Both take the transformed planes a0 <= a < a0 + na only ((a0, na)
 * one of (0, 4), (0, 2), (2, 2), (a0, 1)), V's and M's rows numbered from plane a0: the output
 * stores a plane of the tile at its first contribution (out0 = m0 + m1 + m2 at a = 0, out1 =
 * m1 - m2 - m3 at a = 1) and adds the later ones, so the passes over the groups in order leave
 * the whole result (conv_wino_slab's plane groups). */
void nn_wino_input(float *V, long ldv, const float *P, long plane, long row, long vox, int C,
                   int a0, int na);
void nn_wino_output(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                    long ldm, int a0, int na);
/* Weight transforms of nn_gemm_vw() columns side by side (lane v = column v), one input
 * channel: nn_wino_weights: u[xi*su + v] = (G g G^T)[xi] (whole vectors) of column v's kernel
 * g(t) = w[v*sc + t] (or w[v*sc + 26 - t] when flip; zero for v >= nc), taps t = 9z + 3y + x,
 * each rounded to bf16 first when round (as nn_bf16_round but for NaN payloads);
 * nn_wino_weights_grad, its adjoint for the weight gradient: d[t*vw +
 * v] = (G^T dU G)[t] of u[xi*su + v] (whole vectors readable), rounded to bf16 when round. */
void nn_wino_weights(float *u, long su, const float *w, long sc, int flip, int nc, int round);
void nn_wino_weights_grad(float *d, const float *u, long su, int round);
/* The weight gradient's output-gradient transform: dM[xi*ldm + j] = (A dY A^T)[xi] of the 2x4x4
 * block whose point (a, b, c) is at dy + a*plane + b*row + c*ldy, for j < ncol, and 0 for
 * ncol <= j < ncp (ncp a multiple of the vector width); the planes a0 <= a < a0 + na of dM only,
 * its rows numbered from plane a0 (as nn_wino_input). */
void nn_wino_grad_output(float *Mo, long ldm, const float *dy, long plane, long row, long ldy,
                         int ncol, int ncp, int a0, int na);

/* winograd-bf16's transforms (kern_wino16.h): the tiles of nn_wino_* with F(4,3) on the points
 * 0, +-3/2, +-2/3 (a smaller error once the transformed operands are rounded to bf16).
 * nn_wino16_input writes V rounded to bf16; nn_wino16_weights writes the columns of two
 * consecutive k (w, w1; w1 NULL: zero high halves) as vdpbf16ps's pairs, u[xi * su + v] (32-bit
 * words); nn_wino16_weights_grad and nn_wino16_output are fp32 as their nn_wino_* counterparts. The weight gradient's operands go
 * in tile pairs (the reduction over tiles is vdpbf16ps's pair): nn_wino16_input_pair and
 * nn_wino16_grad_output write one tile's values as the low (even tile) or high (odd) halves of
 * 32-bit words V[xi*ldv + k], Mo[xi*ldm + j]; the even tile writes whole words (zero high
 * halves) and must come first. Mo: j < ncp (a multiple of the vector width), zero past ncol. */
void nn_wino16_input(uint16_t *V, long ldv, const float *P, long plane, long row, long vox,
                     int C);
void nn_wino16_output(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                      long ldm);
void nn_wino16_weights(uint32_t *u, long su, const float *w, const float *w1, long sc, int flip,
                       int nc, int round);
void nn_wino16_weights_grad(float *d, const float *u, long su, int round);
void nn_wino16_input_pair(uint32_t *V, long ldv, const float *P, long plane, long row, long vox,
                          int C, int odd);
void nn_wino16_grad_output(uint32_t *Mo, long ldm, const float *dy, long plane, long row,
                           long ldy, int ncol, int ncp, int odd);

/* The weight-gradient tile on bf16 pairs (vdpbf16ps; emulated under SCAFFOLD_BF16DP=emulate):
 *   Wt[k*ldw + j] += sum_x sum_h A[(x*lda + k)*2 + h] * G[(x*ldg + j)*2 + h]
 * over X pairs of rows, k < mk (<= nn_tw_mr(nr)), j < nr (whole block; G zero past the valid
 * columns). lda, ldg: words (pairs) between pair rows. */
void nn_tw_tile_bf16(int X, const uint16_t *A, long lda, const uint16_t *G, long ldg, int mk,
                     int nr, float *Wt, long ldw);

/* The Adam update of n parameters p with moments m and v from gradients g (optim.c holds the
 * algorithm; this is its vector loop): m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g^2,
 * p -= step_size*m / (sqrt(v)/bc2s + eps). */
typedef struct {
    float b1, b2, eps, step_size, bc2s;
} nn_adam_coef;
void nn_adam_span(float *p, float *m, float *v, const float *g, long n, const nn_adam_coef *c);

/* Largest block of positions nn_tg_block takes for block width nr. */
int nn_tg_mr(int nr);

/* Largest k block nn_tw_tile keeps in registers for block width nr. */
int nn_tw_mr(int nr);

/* Largest value nn_tg_mr can return on any path (sizes pointer arrays). */
#define NN_TG_MR_MAX 16

/* ---- kernels -------------------------------------------------------------------------------- */

typedef struct nn_tg {
    int T, K;         /* taps, reduction length per tap */
    const long *aoff; /* T offsets (elements) added to each position's A pointer, one per tap */
    int nr;           /* column-block width, from nn_gemm_nr() */
    long a16;         /* nn_tg_amx: position 16's A row from position 0's (0: 16 rows on) */
} nn_tg;

enum { NN_TG_ZERO = 0, NN_TG_ACCUM = 1, NN_TG_BIAS = 2 };
/* Mode bit: round the results to bf16 (nearest, ties to even) before storing them. */
#define NN_TG_RBF16 4
/* Mode bit: store whole blocks (nvalid == nr) with non-temporal stores, bypassing the caches
 * (AVX2 and AVX-512 paths; plain stores elsewhere). Each c[i] must be 64-byte aligned, and
 * nn_stream_fence() must run before another thread reads the results. For outputs far larger
 * than the last-level cache: they skip the read a cached store makes of every line. */
#define NN_TG_STREAM 8

/* Orders this thread's non-temporal stores before its later stores (sfence on x86-64). */
void nn_stream_fence(void);

/* One block of m <= nn_tg_mr(nr) positions for one column block (nvalid <= nr valid columns):
 *   c[i][j] = init + sum_t sum_k a[i][aoff[t] + k] * Bp[(t*K + k)*nr + j]
 * init: NN_TG_ZERO (0), NN_TG_ACCUM (the current c[i][j]), NN_TG_BIAS (bias[j], nr floats
 * readable), optionally | NN_TG_RBF16. Only the nvalid first columns of each c[i] are written. */
void nn_tg_block(const nn_tg *g, int m, const float *const *a, const float *Bp, float *const *c,
                 const float *bias, int nvalid, int mode);

/* The kernel nn_tg_block runs for blocks of m positions at width nr on the path in use, for
 * callers that run many blocks: nn_tg_block's lookup (first-use check, a division) cost a
 * fifth of a 64-channel Winograd GEMM's block. Valid until the next nn_isa_set. */
typedef void (*nn_tg_fn)(const nn_tg *g, const float *const *a, const float *Bp, float *const *c,
                         const float *bias, int nvalid, int mode);
nn_tg_fn nn_tg_kernel(int nr, int m);

/* dst[i] = the bf16 bits of src[i], nearest, ties to even (vcvtneps2bf16 where the path has
 * AVX512_BF16: it reads denormal inputs as zero, as the bf16 kernels do in their products). */
void nn_bf16_pack(uint16_t *dst, const float *src, long n);
/* The bf16 pair rows of packed weights: dst[2j] = bf16(src[j*sj]), dst[2j + 1] =
 * bf16(src[j*sj + sk]) (0 unless two), j < n. */
void nn_bf16_pack_pairs(uint16_t *dst, const float *src, long sj, long sk, int two, int n);
/* nn_bf16_pack_pairs of T taps at once, the taps contiguous in src: the pairs of tap t (src + t)
 * to dst + t*ldt, t < T. The same values; it reads each column's run of taps in one piece
 * instead of one element of 16 columns at a time. */
void nn_bf16_pack_taps(uint16_t *dst, long ldt, const float *src, long sj, long sk, int two, int n,
                       int T);

/* nn_tg_block on bf16 data (AVX512_BF16 paths only, see nn_isa_bf16dp): a[i] point to bf16 values
 * (K even, aoff in bf16 elements), Bp is packed [T][K/2][nr][2] (pairs of consecutive k), and
 * products accumulate in fp32 (vdpbf16ps). */
void nn_tg_block_bf16(const nn_tg *g, int m, const uint16_t *const *a, const uint16_t *Bp,
                      float *const *c, const float *bias, int nvalid, int mode);

/* The pair kernel nn_tg_block_bf16 runs for m positions at width nr, for callers that run
 * many blocks (as nn_tg_kernel); NULL under SCAFFOLD_BF16DP=emulate (call nn_tg_block_bf16). */
typedef void (*nn_tgb_fn)(const nn_tg *g, const uint16_t *const *a, const uint16_t *Bp,
                          float *const *c, const float *bias, int nvalid, int mode);
nn_tgb_fn nn_tgb_kernel(int nr, int m);

/* AMX (nn_isa_amx() only): 32 positions whose A rows are a + r*sa (uint16 elements, r < 32; from
 * r = 16 on a + g->a16 + (r - 16)*sa where g->a16 is set: two rows of 16 voxels),
 * the taps g->aoff, g->K a multiple of 32, Bp in the pair layout [t][K/2][g->nr][2]:
 *   c[r][j] = init + sum_t sum_k a[r*sa + aoff[t] + k] * B[t][k][j], j < nvalid,
 * init and rounding as nn_tg_block; rows with c[r] NULL are computed and dropped (the padding
 * columns of a padded row). Reads all 32 rows' A whatever c says. */
void nn_tg_amx(const nn_tg *g, const uint16_t *a, long sa, const uint16_t *Bp, float *const *c,
               const float *bias, int nvalid, int mode);

/* AMX weight-gradient pieces (nn_isa_amx() only; conv_amx.c):
 * nn_amx_pack_t: dst[c*ldd + v] = bf16(src[v*lds + c]), v < nv, c < nc (the transposed
 *   operand: one row of positions per channel);
 * nn_amx_pack_t32: the same for 32 positions, each from its own row (src[i], NULL = zeros),
 *   dst and ldd on whole 64-byte lines;
 * nn_amx_pack_pair: dst[2j + i] = bf16(s_i[j]), j < nc (a multiple of 16), s_i NULL = zeros
 *   (two positions' channels interleaved: the pair layout of a B tile);
 * nn_amx_dw: the 16 or 32 (nit = 1, 2 tiles) rows x 16 or 32 (not_ tiles) columns of acc (fp32,
 *   row stride ldacc) = (init ? 0 : acc) + sum over the positions q of span sp of
 *   xT[i*ldx + q] * dyP[(q/2)*2*cout + 2j + q%2];
 * nn_amx_dw_finish: dw[oc*soc + ic*sic + t] += nn_bf16_round(acc[(t*ldt + ic)*lda + oc]) for
 *   ic < nic, oc < noc (a multiple of 16), t < T (at most 32): the accumulators (rows of
 *   output channels lda floats apart, taps ldt rows apart) added to a weight gradient whose
 *   taps are consecutive. */
void nn_amx_pack_t(uint16_t *dst, long ldd, const float *src, long lds, int nv, int nc);
void nn_amx_pack_t32(uint16_t *dst, long ldd, const float *const *src, int nc);
void nn_amx_pack_pair(uint16_t *dst, const float *s0, const float *s1, int nc);
/* The positions a weight-gradient product sums over: for i2 < n2, i < n, the len positions from
 * i2*stride2 + i*stride (len a multiple of 32, every start even: the pair layout). One run of
 * nq positions: nn_amx_run(nq). */
typedef struct nn_amx_span {
    long len, n, stride, n2, stride2;
} nn_amx_span;
static inline nn_amx_span nn_amx_run(long nq) {
    return (nn_amx_span){.len = nq, .n = 1, .stride = 0, .n2 = 1, .stride2 = 0};
}
void nn_amx_dw(const uint16_t *xT, long ldx, const uint16_t *dyP, int cout, nn_amx_span sp,
               int nit, int not_, float *acc, long ldacc, int init);
void nn_amx_dw_finish(float *dw, long soc, long sic, const float *acc, long lda, long ldt,
                      int nic, int noc, int T);

/* Number of position blocks nn_tg_block needs for M positions at width nr. Callers split M
 * into that many near-equal blocks (block b starts at floor(M * b / nblocks)), so no slow
 * remainder runs (M = 32 at most 6 -> 5,5,5,5,6,6). */
int nn_tg_nblocks(long M, int nr);

/* Weight-gradient tile over `nrows` rows of X positions each:
 *   Wt[k*ldw + j] += sum_r sum_x arows[r][x*lda + k] * grows[r][x*ldg + j]
 * for k < mk (mk <= nn_tw_mr(nr)) and j < nvalid (<= nr); init: = instead of += (the tile is
 * not read: no zeroing pass before a first chunk). When nvalid < nr the G rows are read only
 * up to nvalid columns. */
void nn_tw_tile(int nrows, const float *const *arows, const float *const *grows, int X, long lda,
                long ldg, int mk, int nr, int nvalid, float *Wt, long ldw, int init);

#endif
