/* argmax: the predicted class of each voxel (loss.cu: k_argmax), for prediction masks.
 *   CPU reference: nn_argmax; checked against a plain loop (first maximum wins, a NaN wins as
 *                  in PyTorch).
 *   v1: cu_argmax.
 * Tolerance: exact. Ties and a NaN in the input. Shape: 128^3 voxels, 5 classes (one
 * scale-7 sample); --quick 4096 voxels, 4 classes. Bytes: logits read, labels written. */
#include "kh.h"
#include "nn/loss.h"

typedef struct am {
    uint16_t *out;
    const float *z;
    long P;
    int K;
} am;

#if KH_GPU
static int v1(kh *h, void *arg) {
    am *a = arg;
    return cu_argmax(h->ctx, a->out, a->z, a->P, a->K);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "argmax", 1, argc, argv);
    const long P = h.quick ? 4096 : 128L * 128 * 128;
    const int K = h.quick ? 4 : 5;
    const size_t nz = (size_t)P * K;
    kh_start(&h, 0, 0);
    kh_seed(8);
    float *z = kh_rand(nz, 2, 0);
    for (size_t i = 0; i < nz; i += 3)
        z[i] = roundf(z[i]);
    z[5] = NAN;
    uint16_t *out = kh_alloc(P * 2), *ref = kh_alloc(P * 2);
    double ms;
    KH_CPU_MS(&h, ms, nn_argmax(out, z, P, K));
    for (long v = 0; v < P; v++) {
        const float *zv = z + (size_t)v * K;
        int b = 0;
        for (int c = 1; c < K; c++)
            if (zv[c] > zv[b] || (isnan(zv[c]) && !isnan(zv[b])))
                b = c;
        ref[v] = (uint16_t)b;
    }
    kh_same(&h, "cpu", "classes", out, ref, P * 2, ms, 4.0 * nz + 2.0 * P);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        am a = {kh_dev(&h, NULL, P * 2), kh_dev(&h, z, nz * 4), P, K};
        kh_run(&h, v1, &a, "v1");
        uint16_t *g = kh_host(&h, a.out, P * 2);
        kh_same(&h, "v1", "classes", g, out, P * 2, kh_bench(&h, v1, &a), 4.0 * nz + 2.0 * P);
        free(g);
    }
#endif
    free(z), free(out), free(ref);
    return kh_finish(&h);
}
