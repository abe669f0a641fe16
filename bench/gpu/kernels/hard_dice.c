/* hard_dice: the validation metric, argmax Dice per sample over the foreground classes
 * (loss.cu: k_dice_counts, integer atomics on per-block shared counts).
 *   CPU reference: nn_hard_dice; checked against counts and the formula of loss.h in double.
 *   v1: cu_hard_dice (the product: counts on the GPU, the formula on the host).
 * Tolerance: the reference against double 1e-6 relative (float result); the GPU must equal the
 * reference bit for bit (integer counts, the same host formula). Ties between classes and NaN
 * logits test the argmax rule (first maximum; NaN wins). Shape: 2 samples of 64^3 voxels,
 * 5 classes; --quick 2 x 512, 4 classes. Bytes: logits and labels read once. */
#include "kh.h"
#include "nn/loss.h"

typedef struct hd {
    float *dice;
    const float *z;
    const uint16_t *lab;
    int N, K;
    long S;
} hd;

static int amax(const float *z, int K) {
    int b = 0;
    for (int c = 1; c < K; c++)
        if (z[c] > z[b] || (isnan(z[c]) && !isnan(z[b])))
            b = c;
    return b;
}

#if KH_GPU
static int v1(kh *h, void *arg) {
    hd *a = arg;
    return cu_hard_dice(h->ctx, a->dice, a->z, a->lab, a->N, a->S, a->K);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "hard_dice", 1, argc, argv);
    const int N = 2, K = h.quick ? 4 : 5;
    const long S = h.quick ? 512 : 64L * 64 * 64;
    const size_t P = (size_t)N * S, nz = P * K;
    size_t ws = 0;
#if KH_GPU
    cu_ws_plan pl;
    cu_dice_ws_plan(&pl, N, K);
    ws = pl.total;
#endif
    kh_start(&h, ws, 0);
    kh_seed(7);
    float *z = kh_rand(nz, 2, 0);
    uint16_t *lab = kh_alloc(P * 2);
    for (size_t v = 0; v < P; v++) {
        lab[v] = (uint16_t)((v * 5 + v / 7) % (K - 1));
        z[v * K + lab[v]] += 1.0f;
        z[v * K + (v % K)] = roundf(z[v * K + (v % K)]); /* ties */
    }
    z[3] = NAN;
    float dice[2];
    double ms;
    KH_CPU_MS(&h, ms, nn_hard_dice(dice, z, lab, N, S, K));
    double dd[2], dc[2];
    for (int n = 0; n < N; n++) {
        double cp[256] = {0}, cl[256] = {0}, cb[256] = {0}, s = 0;
        for (long v = 0; v < S; v++) {
            const size_t r = (size_t)n * S + v;
            const int b = amax(z + r * K, K), y = lab[r];
            cp[b]++, cl[y]++;
            if (b == y)
                cb[y]++;
        }
        for (int c = 1; c < K; c++) {
            const double I = 2 * cb[c];
            double Ss = cp[c] + cl[c];
            if (Ss == 0)
                Ss = I;
            s += (I + 1e-6) / (Ss + 1e-6);
        }
        dd[n] = s / (K - 1);
        dc[n] = dice[n];
    }
    kh_check_d(&h, "cpu", "dice", dc, dd, N, 0, 1e-6, ms);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        float gd[2];
        hd a = {gd, kh_dev(&h, z, nz * 4), kh_dev(&h, lab, P * 2), N, K, S};
        kh_run(&h, v1, &a, "v1");
        kh_same(&h, "v1", "dice", gd, dice, sizeof dice, kh_bench(&h, v1, &a), 4.0 * nz + 2.0 * P);
    }
#endif
    free(z), free(lab);
    return kh_finish(&h);
}
