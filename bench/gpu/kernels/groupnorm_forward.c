/* groupnorm_forward: GroupNorm + ReLU forward (kernels.cu: k_chan_partial/k_chan_reduce modes
 * 0 and 1, k_gn_stats, k_gn_apply), the op the U-Net runs after every convolution.
 *   CPU reference: nn_groupnorm_forward (src/nn); checked against the definition in double
 *                  (two-pass mean and variance per (sample, group), eps 1e-5).
 *   v1: cu_groupnorm_forward (the product: channel sums in double per fixed slice, variance as
 *       a second pass around the mean, one apply pass).
 * Tolerances: the reference against double: y within 1e-5 + 1e-5 |y|, statistics 1e-6
 * relative (float storage of double sums). GPU against the reference: y 1e-5 + 1e-4 |y|, mean
 * and rstd 1e-6 + 1e-5 relative (both sum in double, in other orders; y is one float FMA of
 * those, so 1e-4 is a wide margin that still catches a wrong group or channel).
 * Shape: one sample, 64^3 voxels, 128 channels, 8 groups (level 1 of the scale-7 U-Net);
 * --quick: 2 samples, 8^3 voxels, 32 channels. The input has mean 3 (so that a one-pass
 * variance would lose digits). Bytes: the product's four passes over x and one write of y. */
#include "kh.h"
#include "nn/layers.h"

typedef struct gn {
    float *y, *mean, *rstd;
    const float *x, *gamma, *beta;
    int N, C, G;
    long S;
} gn;

static void naive(double *y, double *mean, double *rstd, const float *x, const float *gamma,
                  const float *beta, int N, long S, int C, int G) {
    const int cg = C / G;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            double s = 0, q = 0;
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++)
                    s += x[((size_t)n * S + v) * C + c];
            const double mu = s / ((double)S * cg);
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const double d = x[((size_t)n * S + v) * C + c] - mu;
                    q += d * d;
                }
            const double rs = 1.0 / sqrt(q / ((double)S * cg) + 1e-5);
            mean[n * G + g] = mu;
            rstd[n * G + g] = rs;
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double t = (x[i] - mu) * rs * gamma[c] + beta[c];
                    y[i] = t > 0 ? t : 0;
                }
        }
}

#if KH_GPU
static int v1(kh *h, void *arg) {
    gn *a = arg;
    return cu_groupnorm_forward(h->ctx, a->y, a->mean, a->rstd, a->x, a->gamma, a->beta, a->N,
                                a->S, a->C, a->G, 1);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "groupnorm_forward", 1, argc, argv);
    const int quick = h.quick;
    const int N = quick ? 2 : 1, C = quick ? 32 : 128, G = 8;
    const long S = quick ? 512 : 64L * 64 * 64;
    const size_t n = (size_t)N * S * C, ng = (size_t)N * G;
    size_t ws = 0;
#if KH_GPU
    cu_ws_plan pl;
    cu_groupnorm_ws_plan(&pl, N, S, C);
    ws = pl.total;
#endif
    kh_start(&h, ws, 0);
    kh_seed(1);
    float *x = kh_rand(n, 2, 3), *gamma = kh_rand(C, 1, 0), *beta = kh_rand(C, 0.5f, 0);
    float *y = kh_alloc(n * sizeof *y), *mean = kh_alloc(ng * 4), *rstd = kh_alloc(ng * 4);
    float *w = kh_alloc(nn_groupnorm_ws_floats(C) * sizeof *w);
    double ms;
    KH_CPU_MS(&h, ms, nn_groupnorm_forward(y, mean, rstd, x, gamma, beta, N, S, C, G, 1, w));
    double *yd = kh_alloc(n * sizeof *yd), *md = kh_alloc(ng * 8), *rd = kh_alloc(ng * 8);
    naive(yd, md, rd, x, gamma, beta, N, S, C, G);
    float *yf = kh_to_float(yd, n), *mf = kh_to_float(md, ng), *rf = kh_to_float(rd, ng);
    const double bytes = 5.0 * n * 4;
    kh_check(&h, "cpu", "y", y, yf, n, 1e-5, 1e-5, ms, bytes);
    kh_check(&h, "cpu", "mean", mean, mf, ng, 0, 1e-6, 0, 0);
    kh_check(&h, "cpu", "rstd", rstd, rf, ng, 0, 1e-6, 0, 0);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        gn a = {kh_dev(&h, NULL, n * 4), kh_dev(&h, NULL, ng * 4), kh_dev(&h, NULL, ng * 4),
                kh_dev(&h, x, n * 4), kh_dev(&h, gamma, C * 4), kh_dev(&h, beta, C * 4),
                N, C, G, S};
        kh_run(&h, v1, &a, "v1");
        float *gy = kh_host(&h, a.y, n * 4), *gm = kh_host(&h, a.mean, ng * 4);
        float *gr = kh_host(&h, a.rstd, ng * 4);
        const double t = kh_bench(&h, v1, &a);
        kh_check(&h, "v1", "y", gy, y, n, 1e-5, 1e-4, t, bytes);
        kh_check(&h, "v1", "mean", gm, mean, ng, 1e-6, 1e-5, 0, 0);
        kh_check(&h, "v1", "rstd", gr, rstd, ng, 1e-6, 1e-5, 0, 0);
        free(gy), free(gm), free(gr);
    }
#endif
    free(x), free(gamma), free(beta), free(y), free(mean), free(rstd), free(w), free(yd);
    free(md), free(rd), free(yf), free(mf), free(rf);
    return kh_finish(&h);
}
