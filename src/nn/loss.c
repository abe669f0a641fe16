/* loss: weighted cross-entropy + (1 - soft foreground Dice), its gradient w.r.t. the logits,
 * the hard Dice metric and the CE class weights (see loss.h for the formulas).
 *
 * Gradient: with g = dloss/dlp, dloss/dlogits = g - p * sum_c g. The CE part of g is
 * -w[y]/den at the label; the Dice part is dloss/dp * p with, for c >= 1,
 * dloss/dp = -(1/(N(K-1))) * (2t/(S+e) - (I+e)/(S+e)^2). Sums are accumulated in double per
 * thread and combined in a fixed order. */
#include "nn/loss.h"

#include "core/err.h"
#include "core/prof.h"
#include "nn/layers.h"

#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <string.h>

/* Per thread: 2 doubles (num, den) + 3*N*K doubles (sum p, sum p*t, sum t) + 1 bad label. */
static size_t loss_thread_doubles(int N, int K) {
    return 4 + 3 * (size_t)N * K;
}

size_t nn_loss_ws_floats(int N, int K) {
    return 2 * (loss_thread_doubles(N, K) * NN_SLICES + 2 * (size_t)N * K) + 64;
}

static int bad_label(long v, int K) {
    return err_set(ERR_RANGE,
                   "mask label %ld is not a class index: the model has %d classes (0..%d); "
                   "check n_categories against the dataset",
                   v, K, K - 1);
}

int nn_loss(float *dlogits, const float *logits, const uint16_t *labels, const float *ce_weight,
            int N, long S, int K, double *loss_out, double *ce_out, double *dice_out, float *ws) {
    return nn_loss_sh(dlogits, logits, labels, ce_weight, N, S, K, loss_out, ce_out, dice_out, ws,
                      NULL);
}

/* A bad label seen on another shard only (the sums said so; this shard's labels are fine). */
static int bad_label_elsewhere(int K) {
    return err_set(ERR_RANGE,
                   "a mask label on another spatial shard is not a class index: the model has %d "
                   "classes (0..%d); check n_categories against the dataset",
                   K, K - 1);
}

/* exp(x) for the softmax's x = z - max z <= 0, within an ulp or two of the C library's, in
 * plain arithmetic so that a loop of it vectorizes: x = k ln2 + r (|r| <= ln2 / 2, k by the
 * round-to-nearest of adding 1.5 * 2^52), exp(r) by its Taylor series to r^13 (the rest under
 * 2^-56 of it), times 2^k built in the exponent bits. Below -708 (a subnormal result) it gives
 * 0: such a term changes neither the sum it is added to (at least 1) nor its float
 * probability (0). NaN stays NaN. The C library's exp, one call per class and voxel, was most
 * of the loss pass (5 / 64: 1.6 ms). */
static inline double loss_exp(double x) {
    const double inv_ln2 = 0x1.71547652b82fep0, ln2_hi = 0x1.62e42fee00000p-1,
                 ln2_lo = 0x1.a39ef35793c76p-33, shift = 0x1.8p52;
    const double t = x * inv_ln2 + shift, k = t - shift;
    const double r = (x - k * ln2_hi) - k * ln2_lo;
    double p = 1.0 / 6227020800.0;
    p = 1.0 / 479001600.0 + r * p;
    p = 1.0 / 39916800.0 + r * p;
    p = 1.0 / 3628800.0 + r * p;
    p = 1.0 / 362880.0 + r * p;
    p = 1.0 / 40320.0 + r * p;
    p = 1.0 / 5040.0 + r * p;
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    p = 1.0 + r * p;
    p = 1.0 + r * p;
    /* t's low bits hold k (two's complement, unsigned arithmetic modulo 2^64): 2^k =
     * ((k + 1023) << 52) as a double */
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    const uint64_t sb = (tb + 1023) << 52;
    double sc;
    memcpy(&sc, &sb, sizeof sc);
    const double e = p * sc;
    return x != x ? x : x < -708.0 ? 0.0 : e;
}

/* Values per block of voxels: their differences z - max, then their exponentials, in one
 * array (the exponentials' loop vectorizes). */
enum { LOSS_BLOCK = 2048 };

/* One slice's sums (voxels [lo, hi)): softmax per voxel (into dlogits when given), the weighted
 * cross-entropy's numerator and denominator, and the Dice sums, in voxel order. */
static NN_WIDE void loss_slice(double *a, float *dlogits, const float *logits,
                               const uint16_t *labels, const float *ce_weight, int N, long S,
                               int K, long lo, long hi) {
    double *sp = a + 4, *spt = sp + (size_t)N * K, *st = spt + (size_t)N * K;
    const long nb = LOSS_BLOCK / K > 0 ? LOSS_BLOCK / K : 1;
    double e[LOSS_BLOCK]; /* nb * K <= LOSS_BLOCK (K <= 256 < LOSS_BLOCK) */
    float mx[LOSS_BLOCK], pbuf[256]; /* each voxel's max z (nb <= LOSS_BLOCK) */
    for (long v0 = lo; v0 < hi; v0 += nb) {
        const long v1 = v0 + nb < hi ? v0 + nb : hi;
        for (long v = v0; v < v1; v++) {
            const float *z = logits + v * K;
            float m = z[0];
            for (int c = 1; c < K; c++)
                m = z[c] > m ? z[c] : m;
            for (int c = 0; c < K; c++)
                e[(v - v0) * K + c] = (double)(z[c] - m);
            mx[v - v0] = m;
        }
        /* one exponential per class, the probabilities as e / sum: the form exp(z - lse)
         * took a second one per class (5 / 64 step: 1.95 -> 1.57 ms). In double: with expf
         * the training-parity test moved 4x past its tolerance. */
        const long ne = (v1 - v0) * K;
#pragma omp simd
        for (long i = 0; i < ne; i++)
            e[i] = loss_exp(e[i]);
        for (long v = v0; v < v1; v++) {
            const int n = (int)(v / S), y = labels[v];
            if (y >= K) {
                a[2] = 1;
                a[3] = y;
                continue;
            }
            const float *z = logits + v * K;
            const double *ev = e + (v - v0) * K;
            float *pv = dlogits ? dlogits + v * K : pbuf;
            double s = 0;
            for (int c = 0; c < K; c++)
                s += ev[c];
            const double inv = 1.0 / s;
            for (int c = 0; c < K; c++) {
                pv[c] = (float)(ev[c] * inv);
                sp[n * K + c] += pv[c];
            }
            const double lpy = (double)(z[y] - mx[v - v0]) - log(s);
            a[0] += ce_weight[y] * -lpy;
            a[1] += ce_weight[y];
            spt[n * K + y] += pv[y];
            st[n * K + y] += 1;
        }
    }
}

/* The per-slice sums of the loss (layout in nn_loss_sh). */
static void loss_slice_sums(double *acc, size_t per, float *dlogits, const float *logits,
                            const uint16_t *labels, const float *ce_weight, int N, long S, int K,
                            int nth) {
    /* NN_SLICES fixed voxel slices with their own sums, combined in order: the loss does not
     * depend on the number of threads. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
    for (int sl = 0; sl < NN_SLICES; sl++) {
        double *a = acc + per * sl;
        memset(a, 0, sizeof(double) * per);
        const long P = (long)N * S;
        loss_slice(a, dlogits, logits, labels, ce_weight, N, S, K, P * sl / NN_SLICES,
                   P * (sl + 1) / NN_SLICES);
    }
}

/* dlogits (holding the softmax) becomes the gradient of the loss: the Dice part through the
 * per-(sample, class) coefficients coef (alpha, beta), the cross-entropy's through inv_den. */
static void loss_grad(float *dlogits, const uint16_t *labels, const float *ce_weight,
                      const double *coef, double inv_den, int N, long S, int K, int nth) {
    const long P = (long)N * S;
#pragma omp parallel for schedule(static) num_threads(nth)
    for (long v = 0; v < P; v++) {
        const int n = (int)(v / S);
        float *pv = dlogits + v * K;
        const int y = labels[v];
        float g[256];
        double gs = 0;
        for (int c = 0; c < K; c++) {
            const double *cf = coef + 2 * (n * K + c);
            double gv = (cf[0] * (c == y) + cf[1]) * pv[c];
            if (c == y)
                gv -= ce_weight[y] * inv_den;
            g[c] = (float)gv;
            gs += gv;
        }
        for (int c = 0; c < K; c++)
            pv[c] = g[c] - pv[c] * (float)gs;
    }
}

int nn_loss_sh(float *dlogits, const float *logits, const uint16_t *labels,
               const float *ce_weight, int N, long S, int K, double *loss_out, double *ce_out,
               double *dice_out, float *ws, const nn_shard *sh) {
    const int nth = nn_threads();
    const size_t per = loss_thread_doubles(N, K);
    double *acc = (double *)ws;
    double *coef = acc + per * NN_SLICES; /* alpha, beta per (n, c) */
    loss_slice_sums(acc, per, dlogits, logits, labels, ce_weight, N, S, K, nth);
    /* Reduce the slices into slice 0's area, in order: [num, den, bad, label, sums...]. */
    long bad = acc[2] != 0 ? (long)acc[3] : -1;
    for (int t = 1; t < NN_SLICES; t++) {
        const double *a = acc + per * t;
        if (a[2] != 0 && bad < 0)
            bad = (long)a[3];
        acc[0] += a[0];
        acc[1] += a[1];
        for (size_t i = 4; i < per; i++)
            acc[i] += a[i];
    }
    acc[2] = bad >= 0;
    /* Over the whole volume: every shard gets the same sums, so the same loss, the same decision
     * on bad labels, and the gradient of the global loss. */
    if (sh) {
        prof_begin(PROF_LOSS_ALLREDUCE);
        sh->sum(sh->ctx, acc, (int)per);
        prof_end(PROF_LOSS_ALLREDUCE);
    }
    if (bad >= 0)
        return bad_label(bad, K);
    if (acc[2] != 0)
        return bad_label_elsewhere(K);
    const double num = acc[0], den = acc[1];
    double *sp = acc + 4, *spt = sp + (size_t)N * K, *st = spt + (size_t)N * K;
    const double ce = num / (den > 1e-12 ? den : 1e-12);
    double dsum = 0;
    const double scale = K > 1 ? 1.0 / ((double)N * (K - 1)) : 0.0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < K; c++) {
            const double I = 2 * spt[n * K + c];
            double Ssum = sp[n * K + c] + st[n * K + c];
            const int degenerate = Ssum == 0;
            if (degenerate)
                Ssum = I;
            const double d = (I + NN_DICE_EPS) / (Ssum + NN_DICE_EPS);
            if (c >= 1)
                dsum += d;
            /* dloss/dp = alpha * t + beta (zero for background or a degenerate S). */
            double alpha = 0, beta = 0;
            if (c >= 1 && !degenerate) {
                alpha = -scale * 2.0 / (Ssum + NN_DICE_EPS);
                beta = scale * (I + NN_DICE_EPS) / ((Ssum + NN_DICE_EPS) * (Ssum + NN_DICE_EPS));
            }
            coef[2 * (n * K + c)] = alpha;
            coef[2 * (n * K + c) + 1] = beta;
        }
    const double dice = K > 1 ? dsum * scale : 1.0;
    if (loss_out)
        *loss_out = ce + (1.0 - dice);
    if (ce_out)
        *ce_out = ce;
    if (dice_out)
        *dice_out = dice;
    if (!dlogits)
        return 0;
    loss_grad(dlogits, labels, ce_weight, coef, 1.0 / (den > 1e-12 ? den : 1e-12), N, S, K, nth);
    return 0;
}

void nn_argmax(uint16_t *out, const float *logits, long P, int K) {
#pragma omp parallel for schedule(static)
    for (long v = 0; v < P; v++) {
        const float *z = logits + v * K;
        int best = 0;
        for (int c = 1; c < K; c++)
            if (z[c] > z[best] || (isnan(z[c]) && !isnan(z[best])))
                best = c;
        out[v] = (uint16_t)best;
    }
}

int nn_hard_dice(float *dice, const float *logits, const uint16_t *labels, int N, long S, int K) {
    return nn_hard_dice_sh(dice, logits, labels, N, S, K, NULL);
}

int nn_hard_dice_sh(float *dice, const float *logits, const uint16_t *labels, int N, long S,
                    int K, const nn_shard *sh) {
    for (int n = 0; n < N; n++) {
        /* counts: predicted, label, both, per class (K <= 256 by nn_loss's contract too), then
         * a bad-label flag; doubles so that the shards can sum them (exact below 2^53). */
        double cnt[3 * 256 + 1] = {0}, *cp = cnt, *cl = cnt + K, *cb = cnt + 2 * K;
        long bad = -1;
        for (long v = 0; v < S; v++) {
            const float *z = logits + ((size_t)n * S + v) * K;
            int best = 0;
            for (int c = 1; c < K; c++)
                if (z[c] > z[best] || (isnan(z[c]) && !isnan(z[best])))
                    best = c;
            const int y = labels[(size_t)n * S + v];
            if (y >= K) {
                bad = y;
                break;
            }
            cp[best]++;
            cl[y]++;
            cb[best] += best == y;
        }
        cnt[3 * K] = bad >= 0;
        if (sh) {
            prof_begin(PROF_LOSS_ALLREDUCE);
            sh->sum(sh->ctx, cnt, 3 * K + 1);
            prof_end(PROF_LOSS_ALLREDUCE);
        }
        if (bad >= 0)
            return bad_label(bad, K);
        if (cnt[3 * K] != 0)
            return bad_label_elsewhere(K);
        double s = 0;
        for (int c = 1; c < K; c++) {
            const double I = 2.0 * cb[c];
            double Ss = cp[c] + cl[c];
            if (Ss == 0)
                Ss = I;
            s += (I + NN_DICE_EPS) / (Ss + NN_DICE_EPS);
        }
        dice[n] = K > 1 ? (float)(s / (K - 1)) : 1.0f;
    }
    return 0;
}

int nn_label_counts(uint64_t *counts, const uint16_t *labels, size_t n, int K) {
    for (size_t i = 0; i < n; i++) {
        if (labels[i] >= K)
            return bad_label(labels[i], K);
        counts[labels[i]]++;
    }
    return 0;
}

void nn_ce_class_weights(float *w, const uint64_t *counts, int K) {
    uint64_t total = 0;
    for (int c = 0; c < K; c++)
        total += counts[c];
    const uint64_t bg = counts[0], fg = total - bg;
    for (int c = 0; c < K; c++)
        w[c] = 1.0f;
    if (bg == 0 || fg == 0)
        return;
    w[0] = (float)((double)total / (double)bg);
    for (int c = 1; c < K; c++)
        w[c] = (float)((double)total / (double)fg);
}
