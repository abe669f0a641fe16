/* conv1: the 1x1 output Conv3d, forward and backward (with the fused ReLU backward of the
 * layer before it), fp32 or bf16, as GEMMs over voxel rows. */
#include "nn/conv_int.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- Conv3d k1 (output layer) ----------------------------------------------------------- */

#define C1_ROW 256 /* voxels per work item in the 1x1 convolution */

size_t nn_conv1_ws_floats_p(long P, int cin, int cout, nn_prec prec) {
    size_t pf = packed_floats(cout, cin, 1), pb = packed_floats(cin, cout, 1);
    size_t pw = (size_t)NN_SLICES * cin * cout, bias = (size_t)NN_SLICES * cout;
    size_t m = pf > pb ? pf : pb;
    if (pw > m)
        m = pw;
    if (bias > m)
        m = bias;
    /* bf16: each thread's rows of the input, rounded (the forward pass's A operand) */
    const size_t rin = prec == NN_BF16 ? (size_t)NN_MAX_THREADS * C1_ROW * cin + 16 : 0;
    (void)P; /* the same for any volume */
    const size_t wr = (size_t)cin * cout + 16; /* the rounded weights beside the dw tiles */
    return rin + wr + m + (size_t)nn_gemm_ncol_max(cout) + 64;
}

/* out (P, ncol) (op)= in (P, K) x packed B, items of C1_ROW voxels per column block. With rt
 * (bf16), each item's rows of in are first rounded into the thread's C1_ROW * K floats of rt
 * (a pass over the item in cache, not a rounded copy of the whole input). */
static void gemm_rows(float *out, int ncol, const float *in, int K, const float *Bp,
                      const float *bias, long P, int mode, float *rt) {
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr), nkb = kblocks(K, 1, nr, 2);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = K, .aoff = aoff, .nr = nr};
    const long items = (P + C1_ROW - 1) / C1_ROW;
    /* at most NN_MAX_THREADS threads: rt has that many slots */
#pragma omp parallel for collapse(2) schedule(dynamic, 4) num_threads(nn_threads())
    for (int ob = 0; ob < nb; ob++)
        for (long it = 0; it < items; it++) {
            const long p0 = it * C1_ROW, M = P - p0 < C1_ROW ? P - p0 : C1_ROW;
            const int n0 = ob * nr, nvalid = ncol - n0 < nr ? ncol - n0 : nr;
            const float *a = in + p0 * K;
            if (rt) {
                float *r = rt + (size_t)omp_get_thread_num() * C1_ROW * K;
                nn_round_bf16_span(r, a, (size_t)M * K);
                a = r;
            }
            const conv_walk wk = {.a0 = a, .a_row = 0, .a_col = K,
                                  .c0 = out + p0 * ncol + n0, .c_row = 0, .c_col = ncol, .Wr = 0};
            conv_walk_kblocks(g, wk, M, Bp + (size_t)ob * K * nr, K, nkb, bias ? bias + n0 : NULL,
                              nvalid, mode & 3, mode & ~3);
        }
}

void nn_conv1_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, long P, nn_prec prec, float *ws) {
    const int nr = nn_gemm_nr(cout);
    float *rt = prec == NN_BF16 ? ws : NULL;
    float *Bp = ws + (rt ? (size_t)NN_MAX_THREADS * C1_ROW * cin + 16 : 0);
    float *bias = conv_bias_padded(Bp + packed_floats(cout, cin, 1), b, cout, nr, prec);
    conv_pack_b(Bp, w, cout, cin, 1, cin, 1, 0, nr, kblocks(cin, 1, nr, 2), prec);
    gemm_rows(out, cout, in, cin, Bp, bias, P, NN_TG_BIAS | store_mode(prec), rt);
}

typedef float c1_vf __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t c1_vi __attribute__((vector_size(64), aligned(4), may_alias));

/* nn_conv1_dx_voxel, inlined into its wide callers: each 64 channels' sums over the classes in
 * four vector registers (summed in memory, and through a call per voxel, the 1x1 conv's
 * backward took 0.74 instead of 0.58 ms at 32^3 x 64 -> 6), the rest in memory; each channel
 * sums its classes in order either way. */
static inline __attribute__((always_inline)) void c1_dx(float *restrict d,
                                                        const float *restrict dout,
                                                        const float *restrict wr, int cin,
                                                        int cout, int c0, int nc, nn_prec prec) {
    int c = 0;
    for (; c + 64 <= nc; c += 64) {
        c1_vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (int k = 0; k < cout; k++) {
            const float gk = dout[k], *wk = wr + (size_t)k * cin + c0 + c;
            s0 += gk * *(const c1_vf *)wk;
            s1 += gk * *(const c1_vf *)(wk + 16);
            s2 += gk * *(const c1_vf *)(wk + 32);
            s3 += gk * *(const c1_vf *)(wk + 48);
        }
        *(c1_vf *)(d + c) = s0, *(c1_vf *)(d + c + 16) = s1;
        *(c1_vf *)(d + c + 32) = s2, *(c1_vf *)(d + c + 48) = s3;
        if (prec == NN_BF16) /* over a fixed count: vectorized whole */
            for (int j = 0; j < 64; j++)
                d[c + j] = nn_bf16_round(d[c + j]);
    }
    const int r = c;
    for (c = r; c < nc; c++)
        d[c] = 0.0f;
    for (int k = 0; k < cout && r < nc; k++) {
        const float gk = dout[k], *wk = wr + (size_t)k * cin + c0;
        for (c = r; c < nc; c++)
            d[c] += gk * wk[c];
    }
    if (prec == NN_BF16)
        for (c = r; c < nc; c++)
            d[c] = nn_bf16_round(d[c]);
}

/* Voxels [lo, hi) of c1_grads into the slice's tile acc (built wide: NN_WIDE), C1_VB voxels at a
 * time: each (output channel, block of 64 input channels) row of acc stays in four vector
 * registers over the block's voxels, where per voxel it was loaded and stored (24 loads and 24
 * stores a voxel at 6 classes: the pass ran at 12 GB/s, bound by its stores); the input
 * gradient is summed by c1_dx and masked in whole vectors. The sums keep their order (voxel by
 * voxel, class by class), so the bits are the same. 32^3 x 64 -> 6 with the ReLU, 2 threads:
 * 1.11 -> 0.58-0.63 ms fp32, 1.36 -> 0.63-0.70 ms bf16 (Intel Xeon with AMX, CPU model 167). */
enum { C1_CB = 64, C1_VB = 16 };
static NN_WIDE void c1_slice(float *acc, const float *x, float *dxr, const float *dout,
                             const float *wr, int cin, int cout, long lo, long hi, int dw,
                             nn_prec prec) {
    for (long p0 = lo; p0 < hi; p0 += C1_VB) {
        const int nv = hi - p0 < C1_VB ? (int)(hi - p0) : C1_VB;
        for (int c0 = 0; c0 < cin; c0 += C1_CB) {
            const int nc = cin - c0 < C1_CB ? cin - c0 : C1_CB;
            /* the block's inputs, rounded in bf16 (the ReLU mask reads x itself, each voxel's
             * before its gradient is stored over it: dxr may be x) */
            float av[C1_VB][C1_CB] __attribute__((aligned(64)));
            for (int v = 0; v < nv; v++) {
                const float *xv = x + (size_t)(p0 + v) * cin + c0;
                for (int c = 0; c < nc; c++)
                    av[v][c] = prec == NN_BF16 ? nn_bf16_round(xv[c]) : xv[c];
            }
            for (int oc = 0; oc < cout && dw; oc++) {
                float *accr = acc + (size_t)oc * cin + c0;
                if (nc == C1_CB) {
                    c1_vf a0 = *(c1_vf *)accr, a1 = *(c1_vf *)(accr + 16),
                          a2 = *(c1_vf *)(accr + 32), a3 = *(c1_vf *)(accr + 48);
                    for (int v = 0; v < nv; v++) {
                        const float go = dout[(p0 + v) * cout + oc];
                        a0 += *(const c1_vf *)av[v] * go;
                        a1 += *(const c1_vf *)(av[v] + 16) * go;
                        a2 += *(const c1_vf *)(av[v] + 32) * go;
                        a3 += *(const c1_vf *)(av[v] + 48) * go;
                    }
                    *(c1_vf *)accr = a0, *(c1_vf *)(accr + 16) = a1;
                    *(c1_vf *)(accr + 32) = a2, *(c1_vf *)(accr + 48) = a3;
                    continue;
                }
                for (int v = 0; v < nv; v++) {
                    const float go = dout[(p0 + v) * cout + oc];
                    for (int c = 0; c < nc; c++)
                        accr[c] += av[v][c] * go;
                }
            }
            for (int v = 0; v < nv && dxr; v++) {
                float s[C1_CB] __attribute__((aligned(64)));
                const long p = p0 + v;
                c1_dx(s, dout + p * cout, wr, cin, cout, c0, nc, prec);
                float *d = dxr + (size_t)p * cin + c0;
                const float *xv = x + (size_t)p * cin + c0;
                int c = 0;
                for (; c + 16 <= nc; c += 16) { /* whole vectors: loaded, then stored */
                    const c1_vi on = *(const c1_vf *)(xv + c) > 0.0f;
                    *(c1_vf *)(d + c) = (c1_vf)(on & *(const c1_vi *)(s + c));
                }
                for (; c < nc; c++)
                    d[c] = xv[c] > 0.0f ? s[c] : 0.0f;
            }
        }
    }
}

/* The gradients of the 1x1 convolution in one pass over x: where dw is not NULL its weight
 * gradient, where dxr is not NULL (it is x) its input gradient masked by the ReLU of x, written
 * over x. Few output channels, so each of NN_SLICES fixed voxel slices reduces into its own
 * (cout, cin) tile (vectors over the input channels), then the tiles are summed in order. The
 * input is rounded to bf16 on the fly in bf16 mode. */
static void c1_grads(float *dw, const float *x, float *dxr, const float *dout, const float *wr,
                     int cin, int cout, long P, nn_prec prec, float *acc0) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (int sl = 0; sl < NN_SLICES; sl++) {
        float *acc = acc0 + (size_t)sl * cin * cout;
        if (dw)
            memset(acc, 0, sizeof(float) * cin * cout);
        c1_slice(acc, x, dxr, dout, wr, cin, cout, P * sl / NN_SLICES, P * (sl + 1) / NN_SLICES,
                 dw != NULL, prec);
    }
    for (int oc = 0; oc < cout && dw; oc++)
        for (int ic = 0; ic < cin; ic++) {
            float s = 0;
            for (int sl = 0; sl < NN_SLICES; sl++)
                s += acc0[((size_t)sl * cout + oc) * cin + ic];
            dw[(size_t)oc * cin + ic] += prec == NN_BF16 ? nn_bf16_round(s) : s;
        }
}

void nn_conv1_backward_p(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int cin, int cout, long P, nn_prec prec, float *ws) {
    if (db)
        conv_bias_grad(db, dout, cout, P, cout, prec, ws);
    if (dw)
        c1_grads(dw, in, NULL, dout, NULL, cin, cout, P, prec, ws);
    if (!din)
        return;
    const int nr = nn_gemm_nr(cin);
    float *Bp = ws;
    conv_pack_b(Bp, w, cin, cout, 1, 1, cin, 0, nr, kblocks(cout, 1, nr, 2), prec);
    gemm_rows(din, cin, dout, cout, Bp, NULL, P, NN_TG_ZERO | store_mode(prec), NULL);
}

void nn_conv1_backward_relu_p(float *x, float *dw, float *db, const float *dout, const float *w,
                              int cin, int cout, long P, nn_prec prec, float *ws) {
    if (db)
        conv_bias_grad(db, dout, cout, P, cout, prec, ws);
    /* The input gradient per voxel, into registers: its few output channels make it a pass
     * over x bound by memory, not by FMAs, so it shares the weight gradient's pass. */
    float *wr = ws; /* the weights as the layer used them (bf16-rounded in bf16) */
    conv_copy_prec(wr, w, (size_t)cin * cout, prec);
    c1_grads(dw, x, x, dout, wr, cin, cout, P, prec,
             ws + (((size_t)cin * cout + 15) & ~(size_t)15));
}

NN_WIDE void nn_conv1_dx_voxel(float *restrict d, const float *restrict dout,
                               const float *restrict wr, int cin, int cout, int c0, int nc,
                               nn_prec prec) {
    c1_dx(d, dout, wr, cin, cout, c0, nc, prec);
}

size_t nn_conv1_ws_floats(long P, int cin, int cout) {
    return nn_conv1_ws_floats_p(P, cin, cout, NN_FP32);
}

void nn_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                      int cout, long P, float *ws) {
    nn_conv1_forward_p(out, in, w, b, cin, cout, P, NN_FP32, ws);
}

void nn_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int cin, int cout, long P, float *ws) {
    nn_conv1_backward_p(din, dw, db, dout, in, w, cin, cout, P, NN_FP32, ws);
}
