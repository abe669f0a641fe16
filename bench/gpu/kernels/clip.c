/* clip: clip_grad_norm_ (loss.cu: k_sumsq, k_norm_finalize, k_scale_by): the norm over every
 * gradient, a clip coefficient computed on the device, and the scaling without a host round
 * trip.
 *   CPU reference: nn_clip_grad_norm; checked against the norm in double and the scaling by
 *                  max_norm / (norm + 1e-6) when that is below 1.
 *   v1: cu_clip_grad_norm (with the norm read back, as the tests do; the training step does
 *       not read it).
 * Tolerances: the norm 1e-12 relative between CPU and GPU (double sums over fixed blocks in
 * other orders), 1e-10 against the plain sum here (one sequential chain of n additions, whose
 * own error grows with n: 1.6e-12 at 16 M values); clipped
 * gradients 1e-6 relative to the reference (one float multiply by a coefficient rounded once);
 * unclipped gradients exact. Two cases: norm far above max_norm 1 and far below. Shape: 16 M
 * gradients (the U-Net at scale 7 has 90 M); --quick 54321. Bytes: read twice, written once. */
#include "kh.h"
#include "nn/optim.h"

typedef struct cl {
    float *g;
    const float *g0;
    size_t n;
    double norm;
} cl;

#if KH_GPU
static int v1(kh *h, void *arg) {
    cl *a = arg;
    return cu_clip_grad_norm(h->ctx, a->g, a->n, 1.0, &a->norm);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "clip", 1, argc, argv);
    const size_t n = h.quick ? 54321 : (size_t)16 << 20;
    size_t ws = 0;
#if KH_GPU
    cu_ws_plan pl;
    cu_norm_ws_plan(&pl);
    ws = pl.total;
#endif
    kh_start(&h, ws, 0);
    for (int big = 1; big >= 0; big--) {
        kh_seed(11 + big);
        float *g0 = kh_rand(n, big ? 1.0f : 1e-6f, 0), *g = kh_alloc(n * 4);
        float *want = kh_alloc(n * 4);
        memcpy(g, g0, n * 4);
        double ms;
        double norm = nn_clip_grad_norm(g, n, 1.0);
        KH_CPU_MS(&h, ms, nn_grad_norm(g0, n));
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += (double)g0[i] * g0[i];
        const double dnorm = sqrt(s), coef = 1.0 / (dnorm + 1e-6);
        for (size_t i = 0; i < n; i++)
            want[i] = coef < 1 ? g0[i] * (float)coef : g0[i];
        const char *what = big ? "clipped" : "below max_norm";
        char w2[64];
        snprintf(w2, sizeof w2, "norm (%s)", what);
        kh_check_d(&h, "cpu", w2, &norm, &dnorm, 1, 0, 1e-10, ms);
        kh_check(&h, "cpu", what, g, want, n, 0, big ? 1e-6 : 0, 0, 12.0 * n);
#if KH_GPU
        if (kh_runs(&h, 1)) {
            cl a = {kh_dev(&h, g0, n * 4), g0, n, -1};
            kh_run(&h, v1, &a, "v1");
            const double gn = a.norm;
            float *gg = kh_host(&h, a.g, n * 4);
            const double t = kh_bench(&h, v1, &a);
            kh_check_d(&h, "v1", w2, &gn, &norm, 1, 0, 1e-12, 0);
            kh_check(&h, "v1", what, gg, g, n, 0, big ? 1e-6 : 0, t, 12.0 * n);
            free(gg);
        }
#endif
        free(g0), free(g), free(want);
    }
    return kh_finish(&h);
}
