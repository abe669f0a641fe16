/* ref: plain, obviously correct implementations of every engine op, for the tests and the
 * per-op check-and-time driver (bench/nn/ops.c). Same layouts and contracts as the fast paths
 * (layers.h, loss.h, optim.h): channels-last tensors, PyTorch weight layouts, weight and bias
 * gradients accumulate, input gradients are overwritten. Plain loops over the definitions, sums
 * in double, no workspace, no blocking: slow, and meant to be read against the formula. */
#ifndef SCAFFOLD_NN_REF_H
#define SCAFFOLD_NN_REF_H

#include <stddef.h>

/* Conv3d k3 p1 (w: [cout][cin][27], taps z-major), no bias: out (N,D,H,W,cout). */
void nn_ref_conv3d_forward(float *out, const float *in, const float *w, int cin, int cout, int N,
                           int D, int H, int W);
/* Its input gradient (din overwritten, when given) and weight gradient (dw += , when given). */
void nn_ref_conv3d_backward(float *din, float *dw, const float *dout, const float *in,
                            const float *w, int cin, int cout, int N, int D, int H, int W);

#endif
