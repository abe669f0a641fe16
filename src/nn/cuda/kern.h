/* kern: launchers of the CUDA backend's own kernels (kernels.cu, loss.cu), with C linkage so the
 * C side (conv.c, device.c) calls them. Internal to src/nn/cuda: no MPI, no cuDNN here, so nvcc
 * compiles the kernels without the MPI wrapper's flags.
 *
 * Every launcher enqueues on `st` and returns cudaGetLastError() (the launch status). Element
 * counts are 64-bit; tensors are channels-last as in cu.h. "bf16" arguments select the element
 * type of a void pointer (1: bfloat16, 0: float32). Reductions write per-block or per-slice
 * partial sums in double that a second kernel combines in a fixed order (deterministic). */
#ifndef SCAFFOLD_NN_CUDA_KERN_H
#define SCAFFOLD_NN_CUDA_KERN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every kernel, and the fixed block count of grid-wide reductions. */
#define CUK_THREADS 256
#define CUK_RED_BLOCKS 1024

/* dst (P, ca+cb) = [a row p (stride lda), first ca values | b row p (stride ldb), cb values],
 * stored as float or bf16 (round to nearest even). b may be NULL (cb = 0). Concatenation,
 * splitting (a = dout + offset), conversion to bf16 and packing of a strided tensor. */
cudaError_t cuk_gather(cudaStream_t st, void *dst, int dst_bf16, const float *a, long long lda,
                       int ca, const float *b, long long ldb, int cb, long long P);

/* dst[i] = (accumulate ? dst[i] : 0) + src[i] (+ bias[i % C]), optionally rounded to a bf16
 * value (then the bias is rounded first, as autocast's bf16 bias); src is float or bf16 and may
 * equal dst. */
cudaError_t cuk_convert(cudaStream_t st, float *dst, const void *src, int src_bf16,
                        const float *bias, int C, long long n, int accumulate, int round_bf16);

/* The reverse of a concatenation: src (P, ca+cb), float or bf16, into da (P, ca) and db (P, cb)
 * as float; either destination may be NULL (then its channels are dropped). */
cudaError_t cuk_split(cudaStream_t st, float *da, int ca, float *db, int cb, const void *src,
                      int src_bf16, long long P);

/* Weights: dst (K, S, C) in float or bf16 from channels [0, C) of src (K, ctot, S) float
 * (PyTorch -> cuDNN NHWC filter layout; src offset by c0 * S packs channels [c0, c0 + C)), and
 * the gradient's way back: that part of dst (K, ctot, S) float += src (K, S, C). */
cudaError_t cuk_pack(cudaStream_t st, void *dst, int bf16, const float *src, int K, int C, int S,
                     int ctot);
cudaError_t cuk_unpack_add(cudaStream_t st, float *dst, const void *src, int bf16, int K, int C,
                           int S, int ctot);

/* bf16 storage of values that are bf16 already (nn_bf16_narrow, nn_bf16_widen): the upper 16
 * bits of each float, and back. */
cudaError_t cuk_bf16_narrow(cudaStream_t st, uint16_t *dst, const float *src, long long n);
cudaError_t cuk_bf16_widen(cudaStream_t st, float *dst, const uint16_t *src, long long n);

/* Per-channel sums over the S voxels of each sample, in `slices` fixed slices per sample:
 * part[((n * slices + sl) * 3 + j) * C + c] for sums j = 0..2. x has row stride ldx.
 *  mode 0: s0 = sum x
 *  mode 1: s0 = sum (x - mean[n, c/(C/G)])^2
 *  mode 2: with dy = x2 zeroed where x3 (the ReLU output, may be NULL) <= 0 and
 *          xhat = (x - mean) * rstd of the channel's group: s0 = sum dy, s1 = sum dy * xhat
 *  mode 3: with t = (lab[v] == c): s0 = sum x, s1 = sum x * t, s2 = sum t
 * then sums[(n * 3 + j) * C + c] = the slices added in order. */
enum { CUK_SUM = 0, CUK_SUM_SQDEV = 1, CUK_SUM_GN_BWD = 2, CUK_SUM_CLASS = 3 };
cudaError_t cuk_chan_sums(cudaStream_t st, double *sums, double *part, int mode, const float *x,
                          long long ldx, const float *x2, const float *x3, const uint16_t *lab,
                          const float *mean, const float *rstd, int G, int N, long long S, int C,
                          int slices);

/* dst[c] += (float)sums[c] for c < C, rounded to a bf16 value first when round_bf16 (bias
 * gradients from mode-0 sums). */
cudaError_t cuk_add_sums(cudaStream_t st, float *dst, const double *sums, int C, int round_bf16);

/* GroupNorm statistics from channel sums (mode 0 then mode 1): pass 0 writes mean[n*G+g],
 * pass 1 writes rstd[n*G+g] = 1/sqrt(var + eps). */
cudaError_t cuk_gn_stats(cudaStream_t st, float *mean, float *rstd, const double *sums, int N,
                         long long S, int C, int G, int pass);
cudaError_t cuk_gn_apply(cudaStream_t st, float *y, const float *x, const float *mean,
                         const float *rstd, const float *gamma, const float *beta, int N,
                         long long S, int C, int G, int relu);
/* Backward from mode-2 sums: dgamma/dbeta accumulate, then dx (may equal dy). coef: 2*N*G
 * floats of scratch. */
cudaError_t cuk_gn_backward(cudaStream_t st, float *dx, float *dgamma, float *dbeta,
                            const float *dy, const float *x, const float *y, const float *mean,
                            const float *rstd, const float *gamma, const double *sums,
                            float *coef, int N, long long S, int C, int G, int relu);

cudaError_t cuk_relu(cudaStream_t st, float *y, const float *x, long long n);
cudaError_t cuk_relu_backward(cudaStream_t st, float *dx, const float *dy, const float *y,
                              long long n);
cudaError_t cuk_maxpool(cudaStream_t st, float *out, uint8_t *idx, const float *in, int N, int D,
                        int H, int W, int C);
cudaError_t cuk_maxpool_backward(cudaStream_t st, float *din, const float *dout,
                                 const uint8_t *idx, int N, int D, int H, int W, int C);
/* (N, C, S) -> (N, S, C) when to_last, else the reverse. */
cudaError_t cuk_layout(cudaStream_t st, float *dst, const float *src, int N, int C, long long S,
                       int to_last);

/* ---- loss.cu ---------------------------------------------------------------------------- */
/* p[v, :] = softmax(z[v, :]); per block (CUK_RED_BLOCKS blocks): ce[2b] = sum w[y] * -log p_y,
 * ce[2b+1] = sum w[y], bad[b] = the largest label >= K seen (-1 if none). */
cudaError_t cuk_softmax_ce(cudaStream_t st, float *p, double *ce, int *bad, const float *z,
                           const uint16_t *lab, const float *w, long long P, int K);
/* One thread: res = {loss, ce, dice, 1/den, largest bad label or -1}; coef (N, K, 2) the Dice
 * gradient's alpha, beta per class (loss.c). sums: the mode-3 class sums (N, 3, K). */
cudaError_t cuk_loss_finalize(cudaStream_t st, double *res, double *coef, const double *ce,
                              const int *bad, const double *sums, int N, int K);
/* dl (N, S, K) holds p on entry and dloss/dlogits on exit. */
cudaError_t cuk_loss_grad(cudaStream_t st, float *dl, const uint16_t *lab, const float *w,
                          const double *coef, const double *res, int N, long long S, int K);
/* cnt (N, 3, K) += predicted, label, both counts (argmax, first maximum, NaN wins); *bad = the
 * largest label >= K (must start at -1). */
cudaError_t cuk_dice_counts(cudaStream_t st, unsigned long long *cnt, int *bad, const float *z,
                            const uint16_t *lab, int N, long long S, int K);
cudaError_t cuk_argmax(cudaStream_t st, uint16_t *out, const float *z, long long P, int K);

/* Optimizer updates (optim.h formulas, float arithmetic as on the CPU). */
cudaError_t cuk_sgd(cudaStream_t st, float *p, const float *g, long long n, float lr);
cudaError_t cuk_rmsprop(cudaStream_t st, float *p, const float *g, float *v, long long n,
                        float alpha, float lr, float eps);
cudaError_t cuk_adam(cudaStream_t st, float *p, const float *g, float *m, float *v, long long n,
                     float b1, float b2, float step_size, float bc2s, float eps);
/* res[0] = ||g||_2 (double), ((float *)(res + 1))[0] = clip coefficient max_norm/(norm+1e-6);
 * part: CUK_RED_BLOCKS doubles. */
cudaError_t cuk_grad_norm(cudaStream_t st, double *res, double *part, const float *g,
                          long long n, double max_norm);
/* x *= *coef when *coef < 1 (coef on the device: no host round trip). */
cudaError_t cuk_scale_by(cudaStream_t st, float *x, long long n, const float *coef);
cudaError_t cuk_scale(cudaStream_t st, float *x, long long n, float s);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* For the kernel files: blocks for n elements with grid-stride loops (capped: the loops cover
 * the rest), and the loop itself. */
static inline unsigned cuk_grid(long long n) {
    long long b = (n + CUK_THREADS - 1) / CUK_THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > (1LL << 20) ? (1LL << 20) : b);
}
#define GRID_LOOP(i, n)                                                                            \
    for (long long i = (long long)blockIdx.x * CUK_THREADS + threadIdx.x; i < (n);                \
         i += (long long)gridDim.x * CUK_THREADS)
#endif

#endif
