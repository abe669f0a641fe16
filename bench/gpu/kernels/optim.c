/* optim: the fused optimizer updates, Adam, SGD and RMSprop (loss.cu: k_adam, k_sgd,
 * k_rmsprop), each a run of STEPS steps with fresh gradients and learning rates.
 *   CPU reference: nn_optim_step (src/nn/optim.c); checked against PyTorch's formulas (optim.h)
 *                  in double, run alongside over the same gradients.
 *   adam v1: cu_optim_step (the product); v2: kv_adam_v2 (float4, versions.cu) with the same
 *            host scalars as cu_optim_step (step size lr / (1 - b1^t), sqrt(1 - b2^t)).
 *   sgd v1, rmsprop v1: cu_optim_step.
 * Tolerances: the reference against double, parameters and state 1e-6 + 1e-5 relative (float
 * arithmetic for STEPS steps); GPU against the reference, 1e-6 + 1e-5 relative (the same float
 * formula, contracted differently by nvcc). Shape: 16 M parameters, 10 steps; --quick 100003,
 * 3 steps. Bytes per Adam step: p, g, m, v read, p, m, v written. */
#include "kh.h"
#include "nn/optim.h"
#if KH_GPU
#include "kv.h"
#endif

typedef struct op {
    nn_optim o; /* the device run's counter and hyperparameters (its state is on the device) */
    float *p, *g, *st;
    size_t n;
    double lr;
    int version;
} op;

#if KH_GPU
static int run(kh *h, void *arg) {
    op *a = arg;
    if (a->version == 1)
        return cu_optim_step(h->ctx, &a->o, a->p, a->g, a->st, a->n, a->lr);
    /* v2: cu_optim_step's host part, then the candidate kernel */
    a->o.step++;
    const double bc1 = 1.0 - pow(a->o.beta1, (double)a->o.step);
    const double bc2 = 1.0 - pow(a->o.beta2, (double)a->o.step);
    cudaError_t e = kv_adam_v2(h->ctx->stream, a->p, a->g, a->st, a->st + a->n, (long long)a->n,
                               (float)a->o.beta1, (float)a->o.beta2, (float)(a->lr / bc1),
                               (float)sqrt(bc2), (float)a->o.eps);
    return e == cudaSuccess ? 0 : cu_fail_cuda(e, "kv_adam_v2", __FILE__, __LINE__);
}
#endif

/* PyTorch's update in double (optim.h). */
static void naive_step(nn_optim_kind k, double *p, double *s, const float *g, size_t n, double lr,
                       long t) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8, a = 0.99;
    const double bc1 = 1 - pow(b1, (double)t), bc2 = sqrt(1 - pow(b2, (double)t));
    for (size_t i = 0; i < n; i++) {
        if (k == NN_OPT_SGD) {
            p[i] -= lr * g[i];
        } else if (k == NN_OPT_RMSPROP) {
            s[i] = a * s[i] + (1 - a) * g[i] * g[i];
            p[i] -= lr * g[i] / (sqrt(s[i]) + eps);
        } else {
            s[i] = b1 * s[i] + (1 - b1) * g[i];
            s[n + i] = b2 * s[n + i] + (1 - b2) * g[i] * g[i];
            p[i] -= lr / bc1 * s[i] / (sqrt(s[n + i]) / bc2 + eps);
        }
    }
}

static void one(kh *h, nn_optim_kind kind, size_t n, int steps) {
    char what[64];
    const char *name = nn_optim_name(kind);
    const size_t ns = nn_optim_state_floats(kind, n);
    kh_seed(9 + kind);
    float *p0 = kh_rand(n, 1, 0), *p = kh_alloc(n * 4);
    float **g = kh_alloc(steps * sizeof *g);
    double *pd = kh_alloc(n * 8), *sd = kh_alloc((ns ? ns : 1) * 8), ms = 0;
    memcpy(p, p0, n * 4);
    for (size_t i = 0; i < n; i++)
        pd[i] = p0[i];
    nn_optim o;
    if (nn_optim_init(&o, kind, n))
        kh_die("optimizer");
    for (int s = 0; s < steps; s++) {
        g[s] = kh_rand(n, 0.01f * (s + 1), 0);
        const double lr = 1e-3 * (1 + s % 3), t0 = kh_now();
        nn_optim_step(&o, p, g[s], lr);
        ms += 1e3 * (kh_now() - t0) / steps;
        naive_step(kind, pd, sd, g[s], n, lr, s + 1);
    }
    const double bytes = (kind == NN_OPT_ADAM ? 7.0 : kind == NN_OPT_RMSPROP ? 5.0 : 3.0) * n * 4;
    float *pf = kh_to_float(pd, n), *sf = kh_to_float(sd, ns);
    snprintf(what, sizeof what, "%s x%d: params", name, steps);
    kh_check(h, "cpu", what, p, pf, n, 1e-6, 1e-5, ms, bytes);
    if (ns) {
        snprintf(what, sizeof what, "%s x%d: state", name, steps);
        kh_check(h, "cpu", what, o.state, sf, ns, 1e-6, 1e-5, 0, 0);
    }
#if KH_GPU
    for (int v = 1; v <= (kind == NN_OPT_ADAM ? 2 : 1); v++) {
        if (!kh_runs(h, v))
            continue;
        char ver[8];
        snprintf(ver, sizeof ver, "v%d", v);
        op a = {.p = kh_dev(h, p0, n * 4), .g = kh_dev(h, NULL, n * 4),
                .st = kh_dev(h, NULL, (ns ? ns : 1) * 4), .n = n, .version = v};
        if (nn_optim_init(&a.o, kind, 0))
            kh_die("optimizer");
        for (int s = 0; s < steps; s++) {
            kh_put(h, a.g, g[s], n * 4);
            a.lr = 1e-3 * (1 + s % 3);
            kh_run(h, run, &a, ver);
        }
        float *gp = kh_host(h, a.p, n * 4), *gs = ns ? kh_host(h, a.st, ns * 4) : NULL;
        const double t = kh_bench(h, run, &a); /* more steps: timing only */
        snprintf(what, sizeof what, "%s x%d: params", name, steps);
        kh_check(h, ver, what, gp, p, n, 1e-6, 1e-5, t, bytes);
        if (ns) {
            snprintf(what, sizeof what, "%s x%d: state", name, steps);
            kh_check(h, ver, what, gs, o.state, ns, 1e-6, 1e-5, 0, 0);
        }
        nn_optim_free(&a.o);
        free(gp), free(gs);
    }
#endif
    for (int s = 0; s < steps; s++)
        free(g[s]);
    nn_optim_free(&o);
    free(g), free(p0), free(p), free(pd), free(sd), free(pf), free(sf);
}

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "optim", 2, argc, argv);
    const size_t n = h.quick ? 100003 : (size_t)16 << 20;
    const int steps = h.quick ? 3 : 10;
    kh_start(&h, 0, 0);
    one(&h, NN_OPT_ADAM, h.quick ? 100004 : n, steps); /* v2 needs a multiple of 4 */
    one(&h, NN_OPT_SGD, n, steps);
    one(&h, NN_OPT_RMSPROP, n, steps);
    return kh_finish(&h);
}
