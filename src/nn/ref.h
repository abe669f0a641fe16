/* ref: plain, obviously correct implementations of every engine op, for the tests and the
 * per-op check-and-time driver (bench/nn/ops.c). Same layouts and contracts as the fast paths
 * (layers.h, loss.h, optim.h): channels-last tensors, PyTorch weight layouts, weight and bias
 * gradients accumulate, input gradients are overwritten. Plain loops over the definitions, sums
 * in double (except the Conv3d backward reference, which sums in float as it always did), no
 * workspace, no blocking: slow, and meant to be read against the formula. */
#ifndef SCAFFOLD_NN_REF_H
#define SCAFFOLD_NN_REF_H

#include <stddef.h>
#include <stdint.h>

/* Conv3d k3 p1 (w: [cout][cin][27], taps z-major), no bias: out (N,D,H,W,cout). */
void nn_ref_conv3d_forward(float *out, const float *in, const float *w, int cin, int cout, int N,
                           int D, int H, int W);
/* Its input gradient (din overwritten, when given) and weight gradient (dw += , when given). */
void nn_ref_conv3d_backward(float *din, float *dw, const float *dout, const float *in,
                            const float *w, int cin, int cout, int N, int D, int H, int W);

/* ConvTranspose3d k2 s2 (w: [cin][cout][8], b: [cout]): y (N,2D,2H,2W,cout); backward from dy
 * with ldo floats per voxel: dx (overwritten, when given), dw and db (accumulate). */
void nn_ref_convt3d_forward(float *y, const float *x, const float *w, const float *b, int cin,
                            int cout, int N, int D, int H, int W);
void nn_ref_convt3d_backward(float *dx, float *dw, float *db, const float *dy, long ldo,
                             const float *x, const float *w, int cin, int cout, int N, int D,
                             int H, int W);

/* The 1x1 Conv3d (w: [cout][cin], b: [cout]) over P voxels; backward: din overwritten (when
 * given), dw and db accumulate. */
void nn_ref_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                          int cout, long P);
void nn_ref_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int cin, int cout, long P);

/* GroupNorm (eps NN_GN_EPS, biased variance) of x (N, S, C) in G groups, then a ReLU when relu;
 * mean and rstd (N, G) saved. Backward from them (and y for the ReLU's mask): dx overwritten,
 * dgamma and dbeta accumulate. */
void nn_ref_groupnorm_forward(float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int N, long S, int C, int G,
                              int relu);
void nn_ref_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                               const float *x, const float *y, const float *mean,
                               const float *rstd, const float *gamma, int N, long S, int C, int G,
                               int relu);

/* ReLU: y = max(x, 0); dx = dy where y > 0, else 0. */
void nn_ref_relu_forward(float *y, const float *x, size_t n);
void nn_ref_relu_backward(float *dx, const float *dy, const float *y, size_t n);

/* MaxPool3d(2) of in (N,D,H,W,C): the first maximum of each window (NaN wins); the backward
 * pass finds the winners again from in and adds dout to them (din accumulates). */
void nn_ref_maxpool3d_forward(float *out, const float *in, int N, int D, int H, int W, int C);
void nn_ref_maxpool3d_backward(float *din, const float *dout, const float *in, int N, int D, int H,
                               int W, int C);

/* The training loss of loss.h (weighted CE + 1 - soft foreground Dice), labels all < K: the
 * softmax, the sums and the gradient (dlogits overwritten, when given) by the chain rule through
 * dloss/dp, not the fused form of nn_loss. */
void nn_ref_loss(float *dlogits, const float *logits, const uint16_t *labels,
                 const float *ce_weight, int N, long S, int K, double *loss, double *ce,
                 double *dice);

/* One optimizer step with PyTorch's defaults (optim.h's formulas, in double): Adam (m, v: its
 * state; step: t after this step, from 1), SGD, RMSprop (v: its state). */
void nn_ref_adam(float *p, float *m, float *v, const float *g, size_t n, double lr, long step);
void nn_ref_sgd(float *p, const float *g, size_t n, double lr);
void nn_ref_rmsprop(float *p, float *v, const float *g, size_t n, double lr);

#endif
