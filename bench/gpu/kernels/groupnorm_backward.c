/* groupnorm_backward: GroupNorm + ReLU backward (kernels.cu: k_chan_partial mode 2,
 * k_gn_bwd_coef, k_gn_affine_grad, k_gn_dx).
 *   CPU reference: nn_groupnorm_backward (src/nn) after nn_groupnorm_forward; checked against
 *                  the textbook formula in double: with dym = dy masked by y > 0 and
 *                  xhat = (x - mean) rstd per (sample, group),
 *                  dx = rstd (gamma dym - mean_g(gamma dym) - xhat mean_g(gamma dym xhat)),
 *                  dgamma += sum dym xhat, dbeta += sum dym (they accumulate).
 *   v1: cu_groupnorm_backward (the product).
 * Tolerances (atol relative to the tensor's largest value, as tests/gpu): the reference against
 * double, 1e-5 max|.| + 1e-5 |.|; GPU against the reference, 1e-4 max|.| + 1e-4 |.| (dx is a
 * difference of three terms of similar size: cancellation is judged at the tensor's scale).
 * Shape as groupnorm_forward. Bytes: the product's reads of x, dy, y twice and the write of
 * dx. */
#include "kh.h"
#include "nn/layers.h"

typedef struct gnb {
    float *dx, *dg, *db;
    const float *dy, *x, *y, *mean, *rstd, *gamma;
    int N, C, G;
    long S;
} gnb;

static void naive(double *dx, double *dg, double *db, const float *dy, const float *x,
                  const float *y, const float *mean, const float *rstd, const float *gamma,
                  int N, long S, int C, int G) {
    const int cg = C / G;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const double mu = mean[n * G + g], rs = rstd[n * G + g], cnt = (double)S * cg;
            double a = 0, b = 0;
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double d = y[i] > 0 ? dy[i] : 0, xh = (x[i] - mu) * rs;
                    a += gamma[c] * d;
                    b += gamma[c] * d * xh;
                    dg[c] += d * xh;
                    db[c] += d;
                }
            for (long v = 0; v < S; v++)
                for (int c = g * cg; c < (g + 1) * cg; c++) {
                    const size_t i = ((size_t)n * S + v) * C + c;
                    const double d = y[i] > 0 ? dy[i] : 0, xh = (x[i] - mu) * rs;
                    dx[i] = rs * (gamma[c] * d - a / cnt - xh * b / cnt);
                }
        }
}

#if KH_GPU
static int v1(kh *h, void *arg) {
    gnb *a = arg;
    return cu_groupnorm_backward(h->ctx, a->dx, a->dg, a->db, a->dy, a->x, a->y, a->mean,
                                 a->rstd, a->gamma, a->N, a->S, a->C, a->G, 1);
}
#endif

/* The file's rule: atol = rel * the reference's largest value, rtol = rel. */
static void check(kh *h, const char *ver, const char *what, const float *got, const float *ref,
                  size_t n, double rel, double ms, double bytes) {
    kh_check(h, ver, what, got, ref, n, rel * kh_maxabs(ref, n), rel, ms, bytes);
}

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "groupnorm_backward", 1, argc, argv);
    const int N = h.quick ? 2 : 1, C = h.quick ? 32 : 128, G = 8;
    const long S = h.quick ? 512 : 64L * 64 * 64;
    const size_t n = (size_t)N * S * C, ng = (size_t)N * G;
    size_t ws = 0;
#if KH_GPU
    cu_ws_plan pl;
    cu_groupnorm_ws_plan(&pl, N, S, C);
    ws = pl.total;
#endif
    kh_start(&h, ws, 0);
    kh_seed(2);
    float *x = kh_rand(n, 2, 3), *gamma = kh_rand(C, 1, 0), *beta = kh_rand(C, 0.5f, 0);
    float *dy = kh_rand(n, 1, 0), *dg0 = kh_rand(C, 0.1f, 0), *db0 = kh_rand(C, 0.1f, 0);
    float *y = kh_alloc(n * 4), *mean = kh_alloc(ng * 4), *rstd = kh_alloc(ng * 4);
    float *dx = kh_alloc(n * 4), *dg = kh_alloc(C * 4), *db = kh_alloc(C * 4);
    float *w = kh_alloc(nn_groupnorm_ws_floats(C) * sizeof *w);
    nn_groupnorm_forward(y, mean, rstd, x, gamma, beta, N, S, C, G, 1, w);
    double ms;
    KH_CPU_MS(&h, ms, {
        memcpy(dg, dg0, C * 4);
        memcpy(db, db0, C * 4);
        nn_groupnorm_backward(dx, dg, db, dy, x, y, mean, rstd, gamma, N, S, C, G, 1, w);
    });
    double *dxd = kh_alloc(n * 8), *dgd = kh_alloc(C * 8), *dbd = kh_alloc(C * 8);
    for (int c = 0; c < C; c++)
        dgd[c] = dg0[c], dbd[c] = db0[c];
    naive(dxd, dgd, dbd, dy, x, y, mean, rstd, gamma, N, S, C, G);
    float *dxf = kh_to_float(dxd, n), *dgf = kh_to_float(dgd, C), *dbf = kh_to_float(dbd, C);
    const double bytes = 7.0 * n * 4;
    check(&h, "cpu", "dx", dx, dxf, n, 1e-5, ms, bytes);
    check(&h, "cpu", "dgamma", dg, dgf, C, 1e-5, 0, 0);
    check(&h, "cpu", "dbeta", db, dbf, C, 1e-5, 0, 0);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        gnb a = {kh_dev(&h, NULL, n * 4), kh_dev(&h, dg0, C * 4), kh_dev(&h, db0, C * 4),
                 kh_dev(&h, dy, n * 4), kh_dev(&h, x, n * 4), kh_dev(&h, y, n * 4),
                 kh_dev(&h, mean, ng * 4), kh_dev(&h, rstd, ng * 4), kh_dev(&h, gamma, C * 4),
                 N, C, G, S};
        kh_run(&h, v1, &a, "v1");
        float *gdx = kh_host(&h, a.dx, n * 4), *gdg = kh_host(&h, a.dg, C * 4);
        float *gdb = kh_host(&h, a.db, C * 4);
        const double t = kh_bench(&h, v1, &a); /* dgamma, dbeta keep accumulating: timing only */
        check(&h, "v1", "dx", gdx, dx, n, 1e-4, t, bytes);
        check(&h, "v1", "dgamma", gdg, dg, C, 1e-4, 0, 0);
        check(&h, "v1", "dbeta", gdb, db, C, 1e-4, 0, 0);
        free(gdx), free(gdg), free(gdb);
    }
#endif
    free(x), free(gamma), free(beta), free(dy), free(dg0), free(db0), free(y), free(mean);
    free(rstd), free(dx), free(dg), free(db), free(w), free(dxd), free(dgd), free(dbd);
    free(dxf), free(dgf), free(dbf);
    return kh_finish(&h);
}
