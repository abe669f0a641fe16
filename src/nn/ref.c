/* ref: the naive references (ref.h): each op written as its formula, loop by loop. */
#include "nn/ref.h"

#include "nn/layers.h"
#include "nn/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void nn_ref_conv3d_forward(float *out, const float *in, const float *w, int cin, int cout, int N,
                           int D, int H, int W) {
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int oc = 0; oc < cout; oc++) {
                        double s = 0;
                        for (int t = 0; t < 27; t++) {
                            int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                            if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                                continue;
                            const float *a = in + ((((size_t)n * D + zz) * H + yy) * W + xx) * cin;
                            for (int ic = 0; ic < cin; ic++)
                                s += (double)a[ic] * w[((size_t)oc * cin + ic) * 27 + t];
                        }
                        out[((((size_t)n * D + z) * H + y) * W + x) * cout + oc] = (float)s;
                    }
}

void nn_ref_conv3d_backward(float *din, float *dw, const float *dout, const float *in,
                            const float *w, int cin, int cout, int N, int D, int H, int W) {
    const size_t nin = (size_t)N * D * H * W * cin;
    if (din)
        memset(din, 0, sizeof(float) * nin);
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int t = 0; t < 27; t++) {
                        int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                        if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                            continue;
                        const size_t ia = (((size_t)n * D + zz) * H + yy) * W + xx;
                        const float *g = dout + ((((size_t)n * D + z) * H + y) * W + x) * cout;
                        for (int oc = 0; oc < cout; oc++)
                            for (int ic = 0; ic < cin; ic++) {
                                const size_t iw = ((size_t)oc * cin + ic) * 27 + t;
                                if (dw)
                                    dw[iw] += in[ia * cin + ic] * g[oc];
                                if (din)
                                    din[ia * cin + ic] += w[iw] * g[oc];
                            }
                    }
}

/* Input voxel of tap t (z-major) of output voxel (n, z, y, x) of a 2x2x2 window. */
static size_t pool_in(int n, int z, int y, int x, int t, int D, int H, int W) {
    return (((size_t)n * D + 2 * z + t / 4) * H + 2 * y + (t / 2) % 2) * W + 2 * x + t % 2;
}

/* Output voxel of tap t (z-major over (dz, dy, dx)) of input voxel (n, z, y, x) of a k2 s2
 * transposed convolution: (n, 2z + dz, 2y + dy, 2x + dx) in the (N, 2D, 2H, 2W) output, the
 * same index as a 2x2x2 window's input in that output. */
static size_t convt_out(int n, int z, int y, int x, int t, int D, int H, int W) {
    return pool_in(n, z, y, x, t, 2 * D, 2 * H, 2 * W);
}

/* The loops of both directions: y (when given) from x, w and b; with dy (ldo floats per voxel)
 * the gradients' sums in double. */
static void convt_loops(float *y, double *dxd, double *dwd, double *dbd, const float *x,
                        const float *w, const float *b, const float *dy, long ldo, int cin,
                        int cout, int N, int D, int H, int W) {
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++)
                    for (int t = 0; t < 8; t++) {
                        const size_t v = (((size_t)n * D + z) * H + yy) * W + xx;
                        const size_t o = convt_out(n, z, yy, xx, t, D, H, W);
                        for (int oc = 0; oc < cout; oc++) {
                            const double g = dy ? dy[o * ldo + oc] : 0.0;
                            double acc = y ? b[oc] : 0.0;
                            for (int ic = 0; ic < cin; ic++) {
                                const size_t wi = ((size_t)ic * cout + oc) * 8 + t;
                                acc += (double)x[v * cin + ic] * w[wi];
                                if (dy) {
                                    dxd[v * cin + ic] += g * w[wi];
                                    dwd[wi] += (double)x[v * cin + ic] * g;
                                }
                            }
                            if (y)
                                y[o * cout + oc] = (float)acc;
                            if (dy)
                                dbd[oc] += g;
                        }
                    }
}

void nn_ref_convt3d_forward(float *y, const float *x, const float *w, const float *b, int cin,
                            int cout, int N, int D, int H, int W) {
    convt_loops(y, NULL, NULL, NULL, x, w, b, NULL, 0, cin, cout, N, D, H, W);
}

void nn_ref_convt3d_backward(float *dx, float *dw, float *db, const float *dy, long ldo,
                             const float *x, const float *w, int cin, int cout, int N, int D,
                             int H, int W) {
    const size_t P = (size_t)N * D * H * W, nw = 8 * (size_t)cin * cout;
    double *dxd = calloc(P * cin, sizeof(double)), *dwd = calloc(nw, sizeof(double));
    double *dbd = calloc((size_t)cout, sizeof(double));
    convt_loops(NULL, dxd, dwd, dbd, x, w, NULL, dy, ldo, cin, cout, N, D, H, W);
    if (dx)
        for (size_t i = 0; i < P * cin; i++)
            dx[i] = (float)dxd[i];
    for (size_t i = 0; i < nw; i++)
        dw[i] += (float)dwd[i];
    for (int oc = 0; oc < cout; oc++)
        db[oc] += (float)dbd[oc];
    free(dxd), free(dwd), free(dbd);
}

void nn_ref_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                          int cout, long P) {
    for (long p = 0; p < P; p++)
        for (int oc = 0; oc < cout; oc++) {
            double s = b[oc];
            for (int ic = 0; ic < cin; ic++)
                s += (double)in[p * cin + ic] * w[(size_t)oc * cin + ic];
            out[p * cout + oc] = (float)s;
        }
}

void nn_ref_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int cin, int cout, long P) {
    for (long p = 0; p < P && din; p++)
        for (int ic = 0; ic < cin; ic++) {
            double s = 0;
            for (int oc = 0; oc < cout; oc++)
                s += (double)dout[p * cout + oc] * w[(size_t)oc * cin + ic];
            din[p * cin + ic] = (float)s;
        }
    for (int oc = 0; oc < cout; oc++) {
        double sb = 0;
        for (long p = 0; p < P; p++)
            sb += dout[p * cout + oc];
        db[oc] += (float)sb;
        for (int ic = 0; ic < cin; ic++) {
            double s = 0;
            for (long p = 0; p < P; p++)
                s += (double)dout[p * cout + oc] * in[p * cin + ic];
            dw[(size_t)oc * cin + ic] += (float)s;
        }
    }
}

void nn_ref_groupnorm_forward(float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int N, long S, int C, int G,
                              int relu) {
    const int cg = C / G;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            double s = 0, ss = 0;
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++)
                    s += x[((size_t)n * S + v) * C + c];
            const double mu = s / ((double)S * cg);
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const double d = x[((size_t)n * S + v) * C + c] - mu;
                    ss += d * d;
                }
            const double r = 1.0 / sqrt(ss / ((double)S * cg) + NN_GN_EPS);
            mean[n * G + g] = (float)mu;
            rstd[n * G + g] = (float)r;
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double o = (x[i] - mu) * r * gamma[c] + beta[c];
                    y[i] = (float)(relu && o < 0 ? 0 : o);
                }
        }
}

void nn_ref_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                               const float *x, const float *y, const float *mean,
                               const float *rstd, const float *gamma, int N, long S, int C, int G,
                               int relu) {
    const int cg = C / G;
    const double m = (double)S * cg; /* elements per group */
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const double mu = mean[n * G + g], r = rstd[n * G + g];
            double sd = 0, sdx = 0; /* sums over the group of dxhat and dxhat * xhat */
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double d = relu && !(y[i] > 0) ? 0 : dy[i], xh = (x[i] - mu) * r;
                    sd += d * gamma[c];
                    sdx += d * gamma[c] * xh;
                }
            for (int c = g * cg; c < (g + 1) * cg; c++) {
                double dg = 0, db = 0;
                for (long v = 0; v < S; v++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double d = relu && !(y[i] > 0) ? 0 : dy[i], xh = (x[i] - mu) * r;
                    dg += d * xh;
                    db += d;
                    dx[i] = (float)(r * (d * gamma[c] - sd / m - xh * sdx / m));
                }
                dgamma[c] += (float)dg;
                dbeta[c] += (float)db;
            }
        }
}

void nn_ref_relu_forward(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void nn_ref_relu_backward(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

/* The winning tap of a window: the first maximum, NaN winning (as PyTorch). */
static int pool_arg(const float *in, int n, int z, int y, int x, int c, int D, int H, int W,
                    int C) {
    int k = 0;
    for (int t = 1; t < 8; t++) {
        const float v = in[pool_in(n, z, y, x, t, D, H, W) * C + c];
        const float m = in[pool_in(n, z, y, x, k, D, H, W) * C + c];
        if (v > m || (isnan(v) && !isnan(m)))
            k = t;
    }
    return k;
}

/* Every window: out (when given) = its winner, din (when given) += dout at its winner. */
static void pool_loops(float *out, float *din, const float *dout, const float *in, int N, int D,
                       int H, int W, int C) {
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D / 2; z++)
            for (int y = 0; y < H / 2; y++)
                for (int x = 0; x < W / 2; x++)
                    for (int c = 0; c < C; c++) {
                        const int k = pool_arg(in, n, z, y, x, c, D, H, W, C);
                        const size_t o = (((size_t)n * (D / 2) + z) * (H / 2) + y) * (W / 2) + x;
                        const size_t i = pool_in(n, z, y, x, k, D, H, W) * C + c;
                        if (out)
                            out[o * C + c] = in[i];
                        if (din)
                            din[i] += dout[o * C + c];
                    }
}

void nn_ref_maxpool3d_forward(float *out, const float *in, int N, int D, int H, int W, int C) {
    pool_loops(out, NULL, NULL, in, N, D, H, W, C);
}

void nn_ref_maxpool3d_backward(float *din, const float *dout, const float *in, int N, int D, int H,
                               int W, int C) {
    pool_loops(NULL, din, dout, in, N, D, H, W, C);
}

void nn_ref_loss(float *dlogits, const float *logits, const uint16_t *labels,
                 const float *ce_weight, int N, long S, int K, double *loss, double *ce,
                 double *dice) {
    const size_t P = (size_t)N * S;
    double *p = malloc(sizeof(double) * P * K);
    double *I = calloc((size_t)N * K, sizeof(double)), *Sm = calloc((size_t)N * K, sizeof(double));
    double num = 0, den = 0;
    for (size_t v = 0; v < P; v++) { /* softmax, CE, and the Dice sums per (sample, class) */
        const float *z = logits + v * K;
        const int y = labels[v], n = (int)(v / S);
        double mx = z[0], s = 0;
        for (int c = 1; c < K; c++)
            mx = z[c] > mx ? z[c] : mx;
        for (int c = 0; c < K; c++)
            s += exp(z[c] - mx);
        for (int c = 0; c < K; c++) {
            p[v * K + c] = exp(z[c] - mx) / s;
            I[n * K + c] += 2 * p[v * K + c] * (c == y);
            Sm[n * K + c] += p[v * K + c] + (c == y);
        }
        num += ce_weight[y] * -(z[y] - mx - log(s));
        den += ce_weight[y];
    }
    const double scale = K > 1 ? 1.0 / ((double)N * (K - 1)) : 0.0;
    double dsum = 0;
    for (int n = 0; n < N; n++)
        for (int c = 1; c < K; c++)
            dsum += Sm[n * K + c] == 0 ? 1.0
                                       : (I[n * K + c] + NN_DICE_EPS) /
                                             (Sm[n * K + c] + NN_DICE_EPS);
    *ce = num / (den > 1e-12 ? den : 1e-12);
    *dice = K > 1 ? dsum * scale : 1.0;
    *loss = *ce + (1.0 - *dice);
    for (size_t v = 0; v < P && dlogits; v++) {
        /* dloss/dp per class, then through the softmax: dz_k = p_k (g_k - sum_c g_c p_c) */
        const int y = labels[v], n = (int)(v / S);
        double g[256], gp = 0;
        for (int c = 0; c < K; c++) {
            const double i = I[n * K + c] + NN_DICE_EPS, s = Sm[n * K + c] + NN_DICE_EPS;
            g[c] = c >= 1 && Sm[n * K + c] != 0 ? -scale * (2.0 * (c == y) * s - i) / (s * s) : 0;
            if (c == y)
                g[c] -= ce_weight[y] / (den > 1e-12 ? den : 1e-12) / p[v * K + c];
            gp += g[c] * p[v * K + c];
        }
        for (int c = 0; c < K; c++)
            dlogits[v * K + c] = (float)(p[v * K + c] * (g[c] - gp));
    }
    free(p), free(I), free(Sm);
}

void nn_ref_adam(float *p, float *m, float *v, const float *g, size_t n, double lr, long step) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    for (size_t i = 0; i < n; i++) {
        const double mi = b1 * m[i] + (1 - b1) * g[i], vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(p[i] - lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps));
    }
}

void nn_ref_sgd(float *p, const float *g, size_t n, double lr) {
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(p[i] - lr * g[i]);
}

void nn_ref_rmsprop(float *p, float *v, const float *g, size_t n, double lr) {
    const double a = 0.99, eps = 1e-8;
    for (size_t i = 0; i < n; i++) {
        const double vi = a * v[i] + (1 - a) * g[i] * g[i];
        v[i] = (float)vi;
        p[i] = (float)(p[i] - lr * g[i] / (sqrt(vi) + eps));
    }
}
