/* maxpool: MaxPool3d(2) forward with the winner's index and its backward (kernels.cu:
 * k_maxpool, k_maxpool_backward).
 *   CPU reference: nn_maxpool3d_forward, nn_maxpool3d_backward (which accumulates into din);
 *                  checked against a plain loop over the 2x2x2 windows here: PyTorch's rule,
 *                  the first maximum in (dz, dy, dx) order wins and a NaN wins its window.
 *   v1: cu_maxpool3d_forward, cu_maxpool3d_backward.
 * Tolerance: exact (comparisons and one addition per input). The input has few distinct values
 * (ties in most windows) and one NaN. Shape: in 64^3 voxels x 64 channels; --quick 2 x 8^3 x 5.
 * Bytes: forward reads in, writes out and idx; backward reads dout, idx and din, writes din. */
#include "kh.h"
#include "nn/layers.h"

typedef struct mp {
    float *out, *din;
    uint8_t *idx;
    const float *in, *dout;
    int N, D, H, W, C;
} mp;

static void naive(float *out, uint8_t *idx, float *din, const float *dout, const float *in,
                  int N, int D, int H, int W, int C) {
    size_t o = 0;
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D / 2; z++)
            for (int y = 0; y < H / 2; y++)
                for (int x = 0; x < W / 2; x++)
                    for (int c = 0; c < C; c++, o++) {
                        size_t best = 0;
                        int k = 0;
                        for (int t = 0; t < 8; t++) {
                            const size_t i =
                                ((((size_t)n * D + 2 * z + t / 4) * H + 2 * y + (t / 2) % 2) * W +
                                 2 * x + t % 2) * C + c;
                            const float v = in[i], m = in[best];
                            if (t == 0 || v > m || (isnan(v) && !isnan(m))) {
                                best = i;
                                k = t;
                            }
                        }
                        out[o] = in[best];
                        idx[o] = (uint8_t)k;
                        din[best] += dout[o];
                    }
}

#if KH_GPU
static int fwd_v1(kh *h, void *arg) {
    mp *a = arg;
    return cu_maxpool3d_forward(h->ctx, a->out, a->idx, a->in, a->N, a->D, a->H, a->W, a->C);
}
static int bwd_v1(kh *h, void *arg) {
    mp *a = arg;
    return cu_maxpool3d_backward(h->ctx, a->din, a->dout, a->idx, a->N, a->D, a->H, a->W, a->C);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "maxpool", 1, argc, argv);
    const int N = h.quick ? 2 : 1, E = h.quick ? 8 : 64, C = h.quick ? 5 : 64;
    const size_t n = (size_t)N * E * E * E * C, no = n / 8;
    kh_start(&h, 0, 0);
    kh_seed(4);
    float *in = kh_rand(n, 1, 0), *dout = kh_rand(no, 1, 0), *din0 = kh_rand(n, 1, 0);
    for (size_t i = 0; i < n; i++)
        in[i] = roundf(in[i] * 3) / 3; /* ties */
    in[7] = NAN;
    float *out = kh_alloc(no * 4), *din = kh_alloc(n * 4), *outr = kh_alloc(no * 4);
    float *dinr = kh_alloc(n * 4);
    uint8_t *idx = kh_alloc(no), *idxr = kh_alloc(no);
    double tf, tb;
    KH_CPU_MS(&h, tf, nn_maxpool3d_forward(out, idx, in, N, E, E, E, C));
    KH_CPU_MS(&h, tb, {
        memcpy(din, din0, n * 4);
        nn_maxpool3d_backward(din, dout, idx, N, E, E, E, C);
    });
    memcpy(dinr, din0, n * 4);
    naive(outr, idxr, dinr, dout, in, N, E, E, E, C);
    kh_same(&h, "cpu", "forward", out, outr, no * 4, tf, 4.0 * n + 5.0 * no);
    kh_same(&h, "cpu", "argmax", idx, idxr, no, 0, 0);
    kh_same(&h, "cpu", "backward", din, dinr, n * 4, tb, 8.0 * n + 5.0 * no);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        mp a = {kh_dev(&h, NULL, no * 4), kh_dev(&h, din0, n * 4), kh_dev(&h, NULL, no),
                kh_dev(&h, in, n * 4), kh_dev(&h, dout, no * 4), N, E, E, E, C};
        kh_run(&h, fwd_v1, &a, "v1 forward");
        kh_run(&h, bwd_v1, &a, "v1 backward");
        float *go = kh_host(&h, a.out, no * 4), *gd = kh_host(&h, a.din, n * 4);
        uint8_t *gi = kh_host(&h, a.idx, no);
        const double t1 = kh_bench(&h, fwd_v1, &a), t2 = kh_bench(&h, bwd_v1, &a);
        kh_same(&h, "v1", "forward", go, out, no * 4, t1, 4.0 * n + 5.0 * no);
        kh_same(&h, "v1", "argmax", gi, idx, no, 0, 0);
        kh_same(&h, "v1", "backward", gd, din, n * 4, t2, 8.0 * n + 5.0 * no);
        free(go), free(gd), free(gi);
    }
#endif
    free(in), free(dout), free(din0), free(out), free(din), free(outr), free(dinr), free(idx);
    free(idxr);
    return kh_finish(&h);
}
