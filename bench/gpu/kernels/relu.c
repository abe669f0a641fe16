/* relu: ReLU forward and backward (kernels.cu: k_relu, k_relu_backward). The U-Net fuses its
 * ReLUs into GroupNorm; these kernels are the table's plain ones and the simplest measure of
 * the GPU's memory bandwidth through our launch pattern.
 *   CPU reference: nn_relu_forward, nn_relu_backward; checked against max(x, 0) and
 *                  dy * (y > 0) written out here.
 *   forward v1: cu_relu_forward (one element per thread); v2: kv_relu_v2 (float4, versions.cu).
 *   backward v1: cu_relu_backward.
 * Tolerance: exact (no arithmetic). Shape: 64^3 voxels x 128 channels; --quick 2 x 8^3 x 16.
 * Bytes: forward reads x and writes y; backward reads dy, y and writes dx. */
#include "kh.h"
#include "nn/layers.h"
#if KH_GPU
#include "kv.h"
#endif

typedef struct rl {
    float *y, *dx;
    const float *x, *dy;
    size_t n;
} rl;

#if KH_GPU
static int fwd_v1(kh *h, void *arg) {
    rl *a = arg;
    return cu_relu_forward(h->ctx, a->y, a->x, a->n);
}
static int fwd_v2(kh *h, void *arg) {
    rl *a = arg;
    cudaError_t e = kv_relu_v2(h->ctx->stream, a->y, a->x, (long long)a->n);
    return e == cudaSuccess ? 0 : cu_fail_cuda(e, "kv_relu_v2", __FILE__, __LINE__);
}
static int bwd_v1(kh *h, void *arg) {
    rl *a = arg;
    return cu_relu_backward(h->ctx, a->dx, a->dy, a->y, a->n);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "relu", 2, argc, argv);
    const size_t n = h.quick ? 2 * 512 * 16 : (size_t)64 * 64 * 64 * 128;
    kh_start(&h, 0, 0);
    kh_seed(3);
    float *x = kh_rand(n, 1, 0), *dy = kh_rand(n, 1, 0);
    x[1] = 0.0f;
    x[2] = -0.0f;
    float *y = kh_alloc(n * 4), *dx = kh_alloc(n * 4);
    float *yr = kh_alloc(n * 4), *dxr = kh_alloc(n * 4);
    double tf, tb;
    KH_CPU_MS(&h, tf, nn_relu_forward(y, x, n));
    KH_CPU_MS(&h, tb, nn_relu_backward(dx, dy, y, n));
    for (size_t i = 0; i < n; i++) {
        yr[i] = x[i] > 0 ? x[i] : 0.0f;
        dxr[i] = yr[i] > 0 ? dy[i] : 0.0f;
    }
    kh_same(&h, "cpu", "forward", y, yr, n * 4, tf, 8.0 * n);
    kh_same(&h, "cpu", "backward", dx, dxr, n * 4, tb, 12.0 * n);
#if KH_GPU
    if (h.gpu) {
        rl a = {kh_dev(&h, NULL, n * 4), kh_dev(&h, NULL, n * 4), kh_dev(&h, x, n * 4),
                kh_dev(&h, dy, n * 4), n};
        kh_fn fwd[2] = {fwd_v1, fwd_v2};
        for (int v = 1; v <= 2; v++) {
            if (!kh_runs(&h, v))
                continue;
            char ver[8];
            snprintf(ver, sizeof ver, "v%d", v);
            kh_put(&h, a.y, x, n * 4); /* not the result: a run that writes nothing fails */
            kh_run(&h, fwd[v - 1], &a, ver);
            float *g = kh_host(&h, a.y, n * 4);
            kh_same(&h, ver, "forward", g, y, n * 4, kh_bench(&h, fwd[v - 1], &a), 8.0 * n);
            free(g);
        }
        if (kh_runs(&h, 1)) {
            kh_run(&h, fwd_v1, &a, "v1");
            kh_run(&h, bwd_v1, &a, "v1 backward");
            float *g = kh_host(&h, a.dx, n * 4);
            kh_same(&h, "v1", "backward", g, dx, n * 4, kh_bench(&h, bwd_v1, &a), 12.0 * n);
            free(g);
        }
    }
#endif
    free(x), free(dy), free(y), free(dx), free(yr), free(dxr);
    return kh_finish(&h);
}
