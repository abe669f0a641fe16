/* loss: the ScaFFold loss, weighted CE + (1 - soft foreground Dice), and its gradient
 * (loss.cu: k_softmax_ce, kernels.cu: k_chan_partial mode 3, loss.cu: k_loss_finalize,
 * k_loss_grad).
 *   CPU reference: nn_loss (src/nn/loss.c); checked against the definition (loss.h) in double,
 *                  and its gradient against central finite differences of that double loss at
 *                  16 logits (the one check of the gradient that shares no formula with it).
 *   v1: cu_loss (the product; the class weights from nn_ce_class_weights).
 * Tolerances: the reference: loss, CE and Dice 1e-6 relative to the double definition (the CPU
 * rounds p to float before its Dice sums); the gradient within 1e-3 of the finite difference
 * relative to the largest gradient element (step 1e-3 in double). GPU against the reference:
 * loss, CE, Dice 1e-6 relative; dlogits 1e-4 (atol 1e-4 of the largest element), as tests/gpu.
 * Labels: a partly trained model (the label's logit raised), class K-1 absent (the degenerate
 * Dice branch). Shape: 1 sample of 64^3 voxels, 5 classes; --quick 2 x 512, 4 classes.
 * Bytes: logits read twice and the gradient written and read once (the product's passes). */
#include "kh.h"
#include "nn/loss.h"

typedef struct ls {
    float *dl;
    const float *z, *w;
    const uint16_t *lab;
    int N, K;
    long S;
    double loss, ce, dice;
} ls;

/* The definition of loss.h in double: CE + (1 - mean over samples and classes c >= 1 of the
 * soft Dice). */
static double naive(const float *z, const uint16_t *lab, const float *w, int N, long S, int K,
                    double *ce_out, double *dice_out) {
    double num = 0, den = 0, dsum = 0;
    double *sp = calloc((size_t)K * 3, sizeof *sp);
    for (int n = 0; n < N; n++) {
        memset(sp, 0, sizeof(double) * K * 3);
        for (long v = 0; v < S; v++) {
            const float *zv = z + ((size_t)n * S + v) * K;
            const int y = lab[(size_t)n * S + v];
            double m = zv[0], s = 0;
            for (int c = 1; c < K; c++)
                m = zv[c] > m ? zv[c] : m;
            for (int c = 0; c < K; c++)
                s += exp(zv[c] - m);
            const double lse = m + log(s);
            for (int c = 0; c < K; c++) {
                const double p = exp(zv[c] - lse);
                sp[c] += p;
                if (c == y) {
                    sp[K + c] += p;
                    sp[2 * K + c] += 1;
                }
            }
            num += w[y] * -(zv[y] - lse);
            den += w[y];
        }
        for (int c = 1; c < K; c++) {
            const double I = 2 * sp[K + c];
            double Ss = sp[c] + sp[2 * K + c];
            if (Ss == 0)
                Ss = I;
            dsum += (I + 1e-6) / (Ss + 1e-6);
        }
    }
    free(sp);
    *ce_out = num / den;
    *dice_out = dsum / ((double)N * (K - 1));
    return *ce_out + 1 - *dice_out;
}

#if KH_GPU
static int v1(kh *h, void *arg) {
    ls *a = arg;
    return cu_loss(h->ctx, a->dl, a->z, a->lab, a->w, a->N, a->S, a->K, &a->loss, &a->ce,
                   &a->dice);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "loss", 1, argc, argv);
    const int N = h.quick ? 2 : 1, K = h.quick ? 4 : 5;
    const long S = h.quick ? 512 : 64L * 64 * 64;
    const size_t P = (size_t)N * S, nz = P * K;
    size_t ws = 0;
#if KH_GPU
    cu_ws_plan pl;
    cu_loss_ws_plan(&pl, N, S, K);
    ws = pl.total;
#endif
    kh_start(&h, ws, 0);
    kh_seed(6);
    float *z = kh_rand(nz, 4, 0), *w = kh_alloc(K * 4), *dl = kh_alloc(nz * 4);
    uint16_t *lab = kh_alloc(P * 2);
    for (size_t v = 0; v < P; v++) {
        lab[v] = (uint16_t)((v * 7 + v / 13) % (K - 1));
        z[v * K + lab[v]] += 1.5f;
    }
    uint64_t cnt[256] = {0};
    nn_label_counts(cnt, lab, P, K);
    nn_ce_class_weights(w, cnt, K);
    float *wsf = kh_alloc(nn_loss_ws_floats(N, K) * 4);
    double r[3], ms;
    KH_CPU_MS(&h, ms, nn_loss(dl, z, lab, w, N, S, K, &r[0], &r[1], &r[2], wsf));
    double d[3];
    d[0] = naive(z, lab, w, N, S, K, &d[1], &d[2]);
    kh_check_d(&h, "cpu", "loss,ce,dice", r, d, 3, 0, 1e-6, ms);
    /* finite differences of the double loss at 16 logits spread over the tensor */
    float fd[16], an[16];
    for (int k = 0; k < 16; k++) {
        const size_t i = (size_t)(k * 2654435761u) % nz;
        const float z0 = z[i];
        double c1, c2;
        z[i] = z0 + 1e-3f;
        const double e1 = z[i] - z0, lp = naive(z, lab, w, N, S, K, &c1, &c2);
        z[i] = z0 - 1e-3f;
        const double e2 = z0 - z[i], lm = naive(z, lab, w, N, S, K, &c1, &c2);
        z[i] = z0;
        fd[k] = (float)((lp - lm) / (e1 + e2));
        an[k] = dl[i];
    }
    kh_check(&h, "cpu", "dlogits vs finite differences", an, fd, 16,
             1e-3 * kh_maxabs(dl, nz), 1e-3, 0, 0);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        const double bytes = 3.0 * nz * 4 + 2.0 * P;
        ls a = {kh_dev(&h, NULL, nz * 4), kh_dev(&h, z, nz * 4), kh_dev(&h, w, K * 4),
                kh_dev(&h, lab, P * 2), N, K, S, 0, 0, 0};
        kh_run(&h, v1, &a, "v1");
        const double g[3] = {a.loss, a.ce, a.dice};
        float *gdl = kh_host(&h, a.dl, nz * 4);
        const double t = kh_bench(&h, v1, &a);
        kh_check_d(&h, "v1", "loss,ce,dice", g, r, 3, 0, 1e-6, t);
        kh_check(&h, "v1", "dlogits", gdl, dl, nz, 1e-4 * kh_maxabs(dl, nz), 1e-4, 0, bytes);
        free(gdl);
    }
#endif
    free(z), free(w), free(dl), free(lab), free(wsf);
    return kh_finish(&h);
}
