/* layers: forward and backward passes of every layer of the 3D U-Net, on float32 tensors in
 * channels-last layout (N, D, H, W, C): the C values of one voxel are contiguous.
 *
 * RATIONALE: channels-last turns every convolution into GEMMs whose rows are voxels and whose
 * columns are channels (gemm.h), the skip-connection concatenation into a strided copy that is
 * fused with the zero padding of the next convolution, and GroupNorm/softmax into contiguous
 * per-voxel loops. Weights keep PyTorch's layout (so checkpoints are PyTorch state_dicts) and
 * are repacked on every call, which costs one pass over the weights, a small fraction of a
 * convolution's work.
 *
 * Contracts common to all functions here:
 *  - Shapes are trusted (the model builder validates them); pointers must not alias unless
 *    stated. Kernels never allocate: scratch comes from a caller-provided workspace `ws` whose
 *    size in floats is given by the matching *_ws_floats() function.
 *  - Weight and bias gradients ACCUMULATE (+=) into dw/db (zero them first, as llm.c does);
 *    input gradients are OVERWRITTEN unless the function says "accumulates".
 *  - All loops are OpenMP-parallel and results are bitwise identical whatever the number of
 *    threads and however they are scheduled: every reduction is split into NN_SLICES fixed
 *    slices (or fixed chunk-to-copy assignments) whose partial sums are combined in a fixed order.
 *  - NN_MAX_THREADS bounds the per-thread scratch; more OpenMP threads than that are not used. */
#ifndef SCAFFOLD_NN_LAYERS_H
#define SCAFFOLD_NN_LAYERS_H

#include "nn/base.h"

#include <stddef.h>
#include <stdint.h>


/* ---- Spatial sharding hooks --------------------------------------------------------------
 * When the volume is split into blocks over several ranks (DistConv, src/parallel), each rank runs
 * the layers on its block and three things need other ranks; the model reaches them through
 * these callbacks, so this module stays free of MPI. NULL everywhere means one shard.
 *  - Conv3d k3 p1 reads one voxel beyond its block: after the zero-padded copy of its input,
 *    halo_start() begins filling the border of the padded buffer P (N, D+2, H+2, W+2, C) from
 *    the neighbours (per sharded dim, in order, so later dims carry the earlier halos) and
 *    halo_finish() completes it; rows that do not read a received border are computed in
 *    between. The input gradient needs the output gradient of the neighbours' edge voxels:
 *    the same exchange on the padded output gradient, so every boundary voxel sums exactly the
 *    terms of the unsharded kernel (the sum that upstream forms by sending the grad-input
 *    halo back and adding it).
 *  - GroupNorm with gn_global: per-group sums (and voxel counts) summed over the group of
 *    shards, so statistics are those of the whole volume; otherwise per shard (upstream).
 *  - Loss and Dice sums (CE numerator/denominator, soft and hard Dice terms) summed over the
 *    group of shards (upstream's SpatialAllReduce).
 * Callbacks must be called by every rank of the group in the same order (they are collective).
 * recv[a][s] is 1 when side s (0 low, 1 high) of spatial axis a (0 D, 1 H, 2 W) has a neighbour,
 * i.e. when the border there comes from the halo instead of the zero padding. */
typedef struct nn_shard {
    void *ctx;
    int recv[3][2];
    int gn_global;
    void (*halo_start)(void *ctx, float *P, int N, int D, int H, int W, int C);
    void (*halo_finish)(void *ctx, float *P, int N, int D, int H, int W, int C);
    void (*sum)(void *ctx, double *buf, int n);
} nn_shard;

/* ---- Conv3d, kernel 3, stride 1, padding 1, no bias ----------------------------------------
 * out (N,D,H,W,cout) = conv(cat(inA (N,D,H,W,ca), inB (N,D,H,W,cb))) with w (cout, ca+cb, 3,3,3)
 * in PyTorch layout. inB may be NULL (cb = 0): the concatenation (skip first) is fused with the
 * zero padding, so the UNet never materialises cat().
 * The full form (_p) takes the precision and the optional shard (sh, NULL: one shard; in bf16
 * a sharded call uses the fp32 kernels on bf16 values, since the halo carries floats). Its
 * workspace: nn_conv3d_ws_floats unsharded (the padded input is made a few planes at a time),
 * nn_conv3d_ws_floats_sh with a shard (the halo exchange fills a whole block's border). The
 * short forms are fp32; the _sh forms fp32 with a shard. */
size_t nn_conv3d_ws_floats(int N, int D, int H, int W, int cin, int cout);
size_t nn_conv3d_ws_floats_sh(int N, int D, int H, int W, int cin, int cout);
void nn_conv3d_forward_p(float *out, const float *inA, int ca, const float *inB, int cb,
                         const float *w, int cout, int N, int D, int H, int W, nn_prec prec,
                         const nn_shard *sh, float *ws);
/* dw (cout, cin, 3,3,3) accumulates (skipped when NULL). The input gradient is overwritten:
 * with dinB NULL, din (N,D,H,W,ca+cb) receives all of it (skipped when din is NULL); with dinB
 * given (and cb > 0), the concatenation's two gradients are written apart, din (N,D,H,W,ca)
 * and dinB (N,D,H,W,cb). */
void nn_conv3d_backward_p(float *din, float *dinB, float *dw, const float *dout,
                          const float *inA, int ca, const float *inB, int cb, const float *w,
                          int cout, int N, int D, int H, int W, nn_prec prec, const nn_shard *sh,
                          float *ws);
void nn_conv3d_forward(float *out, const float *inA, int ca, const float *inB, int cb,
                       const float *w, int cout, int N, int D, int H, int W, float *ws);
void nn_conv3d_backward(float *din, float *dw, const float *dout, const float *inA, int ca,
                        const float *inB, int cb, const float *w, int cout, int N, int D, int H,
                        int W, float *ws);
/* The same on one block of a sharded volume (sh may be NULL; ws from nn_conv3d_ws_floats_sh). */
void nn_conv3d_forward_sh(float *out, const float *inA, int ca, const float *inB, int cb,
                          const float *w, int cout, int N, int D, int H, int W, float *ws,
                          const nn_shard *sh);
void nn_conv3d_backward_sh(float *din, float *dw, const float *dout, const float *inA, int ca,
                           const float *inB, int cb, const float *w, int cout, int N, int D,
                           int H, int W, float *ws, const nn_shard *sh);

/* ---- ConvTranspose3d, kernel 2, stride 2, bias -----------------------------------------------
 * in (N,D,H,W,cin) -> out (N,2D,2H,2W,cout); w (cin, cout, 2,2,2), b (cout). The _p forms take
 * the precision (bf16 needs the larger workspace of nn_convt3d_ws_floats_p); the short forms
 * are fp32. */
size_t nn_convt3d_ws_floats_p(int N, int D, int H, int W, int cin, int cout, nn_prec prec);
void nn_convt3d_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                          int cout, int N, int D, int H, int W, nn_prec prec, float *ws);
/* dout has `ldo` floats per voxel (ldo >= cout; e.g. one half of a concatenation gradient).
 * dw, db accumulate; din (N,D,H,W,cin) overwritten unless NULL. */
void nn_convt3d_backward_p(float *din, float *dw, float *db, const float *dout, long ldo,
                           const float *in, const float *w, int cin, int cout, int N, int D,
                           int H, int W, nn_prec prec, float *ws);
/* The algorithm (algo.h nn_algo) the ConvTranspose3d passes run: AMX tiles for bf16 on an AMX
 * CPU with channels multiples of 32; the vdpbf16ps pair kernels (direct-bf16) for bf16 on a CPU
 * with them and even channel counts (the weight gradient where W is even); else the direct
 * fp32 kernels (on bf16 operands in bf16). */
int nn_convt3d_algo(int cin, int cout, nn_prec prec);
size_t nn_convt3d_ws_floats(int N, int D, int H, int W, int cin, int cout);
void nn_convt3d_forward(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, int N, int D, int H, int W, float *ws);
void nn_convt3d_backward(float *din, float *dw, float *db, const float *dout, long ldo,
                         const float *in, const float *w, int cin, int cout, int N, int D, int H,
                         int W, float *ws);

/* ---- Conv3d, kernel 1, bias (the output layer) ----------------------------------------------
 * in (P, cin) -> out (P, cout) where P = N*D*H*W voxels; w (cout, cin, 1,1,1), b (cout). _p
 * forms as for ConvTranspose3d. */
size_t nn_conv1_ws_floats_p(long P, int cin, int cout, nn_prec prec);
void nn_conv1_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, long P, nn_prec prec, float *ws);
void nn_conv1_backward_p(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int cin, int cout, long P, nn_prec prec, float *ws);
/* The same for an input x that is a ReLU's output, with the ReLU's backward folded in: the
 * weight and bias gradients as above, then the input gradient masked by x > 0 written over x
 * (each voxel's mask is read before its gradient replaces it), so the layer in front needs no
 * buffer for it. Same workspace as nn_conv1_backward_p. */
void nn_conv1_backward_relu_p(float *x, float *dw, float *db, const float *dout, const float *w,
                              int cin, int cout, long P, nn_prec prec, float *ws);
/* The input gradient of one voxel, channels [c0, c0 + nc): d[c] = Σ_k dout[k]·wr[k][c0 + c] in
 * k order (bf16-rounded in bf16), wr the weights as the layer used them. The one sum behind
 * nn_conv1_backward_relu_p and nn_groupnorm_backward_x, which must agree bit for bit. */
void nn_conv1_dx_voxel(float *restrict d, const float *restrict dout, const float *restrict wr,
                       int cin, int cout, int c0, int nc, nn_prec prec);
size_t nn_conv1_ws_floats(long P, int cin, int cout);
void nn_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                      int cout, long P, float *ws);
void nn_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int cin, int cout, long P, float *ws);

/* ---- GroupNorm (eps 1e-5, affine), optionally fused with the ReLU that follows it ----------
 * x (N, S, C) with S voxels per sample, G groups of C/G channels. y = relu?(gn(x)); mean and
 * rstd (N, G) are saved for the backward pass. Statistics are accumulated in double.
 * `relu` is a set of bits: 1 the ReLU; NN_GN_RBF16 rounds what the pass writes (y, or dx in
 * the backward pass) to bf16, as autocast's bf16 tensors (saves a pass over the tensor). */
#define NN_GN_EPS 1e-5
#define NN_GN_RBF16 2
size_t nn_groupnorm_ws_floats(int C);
void nn_groupnorm_forward(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int N, long S, int C, int G, int relu, float *ws);
/* Recomputes y = relu?(gn(x)) from saved mean and rstd (no statistics pass). */
void nn_groupnorm_apply(float *y, const float *x, const float *mean, const float *rstd,
                        const float *gamma, const float *beta, int N, long S, int C, int G,
                        int relu, float *ws);
/* dy: gradient w.r.t. y; y is the forward output (used for the ReLU mask when relu & 1).
 * dx may equal dy (in place). dgamma, dbeta (C) accumulate. */
void nn_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                           const float *x, const float *y, const float *mean, const float *rstd,
                           const float *gamma, int N, long S, int C, int G, int relu, float *ws);

/* The same on one block of a sharded volume: statistics of the whole volume when sh->gn_global
 * (sh may be NULL). */
void nn_groupnorm_forward_sh(float *y, float *mean, float *rstd, const float *x,
                             const float *gamma, const float *beta, int N, long S, int C, int G,
                             int relu, float *ws, const nn_shard *sh);
/* nn_groupnorm_forward over (N, D, H, W, C) fused with the MaxPool3d(2) of y (pool and idx as
 * nn_maxpool3d_forward's out and idx): the same values, one pass over y fewer. */
void nn_groupnorm_forward_pool(float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int N, int D, int H, int W,
                               int C, int G, int relu, float *ws, float *pool, uint8_t *idx);
void nn_groupnorm_backward_sh(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *y, const float *mean,
                              const float *rstd, const float *gamma, int N, long S, int C, int G,
                              int relu, float *ws, const nn_shard *sh);

/* The backward of a GroupNorm fused with ReLU whose output y was not kept: the mask is
 * recomputed from x, mean, rstd, gamma and beta exactly as the forward computed y (in bf16, y
 * rounded). The output gradient is dy, or when dy is NULL the input gradient of the 1x1
 * convolution that followed (dz (N, S, K) times wz (K, C), PyTorch's (cout=K, cin=C) layout,
 * summed as nn_conv1_backward_relu_p does). dx may equal dy or x. The results equal, bit for
 * bit, nn_groupnorm_backward_sh given y (relu 1, and in bf16 NN_GN_RBF16: dx is rounded to
 * bf16) and, for dz, the gradient that nn_conv1_backward_relu_p writes. Given dy it reads one
 * array fewer than nn_groupnorm_backward_sh (x rather than x and y). Workspace:
 * nn_groupnorm_x_ws_floats(C, K). */
size_t nn_groupnorm_x_ws_floats(int C, int K);
void nn_groupnorm_backward_x(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *dz, const float *wz, int K, const float *x,
                             const float *mean, const float *rstd, const float *gamma,
                             const float *beta, int N, long S, int C, int G, nn_prec prec,
                             float *ws, const nn_shard *sh);

/* ---- ReLU ------------------------------------------------------------------------------------
 * y = max(x, 0); dx = dy * (y > 0) (y is the forward output; dx may equal dy). */
void nn_relu_forward(float *y, const float *x, size_t n);
void nn_relu_backward(float *dx, const float *dy, const float *y, size_t n);

/* ---- MaxPool3d(2) ----------------------------------------------------------------------------
 * in (N,D,H,W,C) -> out (N,D/2,H/2,W/2,C); idx (same shape as out) records which of the 8 inputs
 * won (first maximum in (dz,dy,dx) order, as PyTorch). Backward ACCUMULATES into din. */
void nn_maxpool3d_forward(float *out, uint8_t *idx, const float *in, int N, int D, int H, int W,
                          int C);
void nn_maxpool3d_backward(float *din, const float *dout, const uint8_t *idx, int N, int D, int H,
                           int W, int C);
/* nn_maxpool3d_backward with each sum it makes rounded to bf16 (the elements it adds to; the
 * others keep their bits): for a din that holds bf16 values, the backward and a rounding pass
 * over din in one pass. */
void nn_maxpool3d_backward_rbf16(float *din, const float *dout, const uint8_t *idx, int N, int D,
                                 int H, int W, int C);

/* ---- Channel concatenation (skip first) ------------------------------------------------------
 * out (P, ca+cb) = [a (P, ca) | b (P, cb)]; backward splits dout into da, db (overwritten). */
void nn_concat_forward(float *out, const float *a, int ca, const float *b, int cb, long P);
void nn_concat_backward(float *da, float *db, const float *dout, int ca, int cb, long P);

/* ---- log-softmax over channels ---------------------------------------------------------------
 * x (P, C) -> y (P, C); backward: dx = dy - exp(y) * sum_c dy (dx may equal dy). */
void nn_log_softmax_forward(float *y, const float *x, long P, int C);
void nn_log_softmax_backward(float *dx, const float *dy, const float *y, long P, int C);

/* ---- Layout conversion -----------------------------------------------------------------------
 * (N, C, S) <-> (N, S, C): PyTorch's NCDHW to channels-last and back. */
void nn_to_channels_last(float *dst, const float *src, int N, int C, long S);
void nn_to_channels_first(float *dst, const float *src, int N, int C, long S);

/* ---- Conv3d algorithm queries (naive references: ref.h) ---------------------------------- */
/* The algorithm (algo.h nn_algo) pass (NN_PASS_FWD, NN_PASS_BWD_DATA, NN_PASS_BWD_WEIGHT) of
 * a Conv3d k3 of this shape runs, as far as it is known without measuring: the choice made or
 * forced, pinned or cached, else the rule (split: an input gradient written as ca | cb). */
int nn_conv3d_algo(int pass, int N, int D, int H, int W, int ca, int cb, int cout, int split,
                   nn_prec prec);
/* 1 when the forward pass of this shape runs Winograd F(4x4x2, 3x3x3) (winograd or
 * winograd-bf16 by nn_conv3d_algo): unsharded, even depth, height and width multiples of 4, 8+
 * channels, and either at least 4096 voxels and cin * cout <= 1024 * 1024, or 16 to 32 tiles of
 * 2x4x4 voxels per group of samples; SCAFFOLD_NN_WINOGRAD=0 turns it off. */
int nn_conv3d_winograd(int N, int D, int H, int W, int cin, int cout, nn_prec prec);

#endif
