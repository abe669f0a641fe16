/* layout: PyTorch's NCDHW batch to the backend's channels-last layout and back (kernels.cu:
 * k_layout), once per batch on the input and for predictions.
 *   CPU reference: nn_to_channels_last, nn_to_channels_first; checked against the index formula
 *                  written out here, and the round trip.
 *   v1: cu_to_channels_last, cu_to_channels_first.
 * Tolerance: exact (permutations). Shape: one scale-7 input, 3 channels x 128^3; --quick
 * 2 x 3 x 1000. Bytes: read and write the tensor. */
#include "kh.h"
#include "nn/layers.h"

typedef struct ly {
    float *last, *first;
    const float *src;
    int N, C;
    long S;
} ly;

#if KH_GPU
static int to_last(kh *h, void *arg) {
    ly *a = arg;
    return cu_to_channels_last(h->ctx, a->last, a->src, a->N, a->C, a->S);
}
static int to_first(kh *h, void *arg) {
    ly *a = arg;
    return cu_to_channels_first(h->ctx, a->first, a->last, a->N, a->C, a->S);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "layout", 1, argc, argv);
    const int N = h.quick ? 2 : 1, C = 3;
    const long S = h.quick ? 1000 : 128L * 128 * 128;
    const size_t n = (size_t)N * C * S;
    kh_start(&h, 0, 0);
    kh_seed(17);
    float *x = kh_rand(n, 1, 0), *last = kh_alloc(n * 4), *first = kh_alloc(n * 4);
    float *ref = kh_alloc(n * 4);
    double t1, t2;
    KH_CPU_MS(&h, t1, nn_to_channels_last(last, x, N, C, S));
    KH_CPU_MS(&h, t2, nn_to_channels_first(first, last, N, C, S));
    for (int b = 0; b < N; b++)
        for (int c = 0; c < C; c++)
            for (long v = 0; v < S; v++)
                ref[((size_t)b * S + v) * C + c] = x[((size_t)b * C + c) * S + v];
    kh_same(&h, "cpu", "to channels-last", last, ref, n * 4, t1, 8.0 * n);
    kh_same(&h, "cpu", "to channels-first (round trip)", first, x, n * 4, t2, 8.0 * n);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        ly a = {kh_dev(&h, NULL, n * 4), kh_dev(&h, NULL, n * 4), kh_dev(&h, x, n * 4), N, C, S};
        kh_run(&h, to_last, &a, "v1 to channels-last");
        kh_run(&h, to_first, &a, "v1 to channels-first");
        float *gl = kh_host(&h, a.last, n * 4), *gf = kh_host(&h, a.first, n * 4);
        kh_same(&h, "v1", "to channels-last", gl, last, n * 4, kh_bench(&h, to_last, &a), 8.0 * n);
        kh_same(&h, "v1", "to channels-first (round trip)", gf, x, n * 4,
                kh_bench(&h, to_first, &a), 8.0 * n);
        free(gl), free(gf);
    }
#endif
    free(x), free(last), free(first), free(ref);
    return kh_finish(&h);
}
