/* concat: the channel concatenation and its backward split (kernels.cu: k_gather), the copy
 * that the skip connection costs when it is materialised (bf16, or fp32 with
 * SCAFFOLD_CUDA_SKIP=gather; the fp32 default feeds cuDNN without it, cu_conv3d_parts).
 *   CPU reference: nn_concat_forward, nn_concat_backward; checked against plain loops here.
 *   forward v1: cu_concat_forward (one channel per thread); v2: kv_concat_v2 (float4).
 *   backward v1: cu_concat_backward.
 * Tolerance: exact (copies). Shape: 64^3 voxels, 64 + 64 channels (level 1's skip at scale 6,
 * a quarter of scale 7's top level); --quick 300 voxels, 8 + 4. Bytes: read both, write both. */
#include "kh.h"
#include "nn/layers.h"
#if KH_GPU
#include "kv.h"
#endif

typedef struct cc {
    float *out, *da, *db;
    const float *a, *b;
    int ca, cb;
    long P;
} cc;

#if KH_GPU
static int fwd_v1(kh *h, void *arg) {
    cc *x = arg;
    return cu_concat_forward(h->ctx, x->out, x->a, x->ca, x->b, x->cb, x->P);
}
static int fwd_v2(kh *h, void *arg) {
    cc *x = arg;
    cudaError_t e = kv_concat_v2(h->ctx->stream, x->out, x->a, x->ca, x->b, x->cb, x->P);
    return e == cudaSuccess ? 0 : cu_fail_cuda(e, "kv_concat_v2", __FILE__, __LINE__);
}
static int bwd_v1(kh *h, void *arg) {
    cc *x = arg;
    return cu_concat_backward(h->ctx, x->da, x->db, x->out, x->ca, x->cb, x->P);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "concat", 2, argc, argv);
    const long P = h.quick ? 300 : 64L * 64 * 64;
    const int ca = h.quick ? 8 : 64, cb = h.quick ? 4 : 64, cc_ = ca + cb;
    const size_t na = (size_t)P * ca, nb = (size_t)P * cb, no = (size_t)P * cc_;
    kh_start(&h, 0, 0);
    kh_seed(5);
    float *a = kh_rand(na, 1, 0), *b = kh_rand(nb, 1, 0);
    float *out = kh_alloc(no * 4), *outr = kh_alloc(no * 4);
    float *da = kh_alloc(na * 4), *db = kh_alloc(nb * 4);
    double tf, tb;
    KH_CPU_MS(&h, tf, nn_concat_forward(out, a, ca, b, cb, P));
    KH_CPU_MS(&h, tb, nn_concat_backward(da, db, out, ca, cb, P));
    for (long p = 0; p < P; p++)
        for (int c = 0; c < cc_; c++)
            outr[(size_t)p * cc_ + c] = c < ca ? a[(size_t)p * ca + c] : b[(size_t)p * cb + c - ca];
    const double bytes = 8.0 * no;
    kh_same(&h, "cpu", "forward", out, outr, no * 4, tf, bytes);
    kh_same(&h, "cpu", "backward: first input", da, a, na * 4, tb, bytes);
    kh_same(&h, "cpu", "backward: second input", db, b, nb * 4, 0, 0);
#if KH_GPU
    if (h.gpu) {
        cc x = {kh_dev(&h, NULL, no * 4), kh_dev(&h, NULL, na * 4), kh_dev(&h, NULL, nb * 4),
                kh_dev(&h, a, na * 4), kh_dev(&h, b, nb * 4), ca, cb, P};
        kh_fn fwd[2] = {fwd_v1, fwd_v2};
        for (int v = 1; v <= 2; v++) {
            if (!kh_runs(&h, v))
                continue;
            char ver[8];
            snprintf(ver, sizeof ver, "v%d", v);
            if (cu_zero(h.ctx, x.out, no * 4))
                kh_die("zero");
            kh_run(&h, fwd[v - 1], &x, ver);
            float *g = kh_host(&h, x.out, no * 4);
            kh_same(&h, ver, "forward", g, out, no * 4, kh_bench(&h, fwd[v - 1], &x), bytes);
            free(g);
        }
        if (kh_runs(&h, 1)) {
            kh_run(&h, bwd_v1, &x, "v1 backward");
            float *ga = kh_host(&h, x.da, na * 4), *gb = kh_host(&h, x.db, nb * 4);
            const double t = kh_bench(&h, bwd_v1, &x);
            kh_same(&h, "v1", "backward: first input", ga, a, na * 4, t, bytes);
            kh_same(&h, "v1", "backward: second input", gb, b, nb * 4, 0, 0);
            free(ga), free(gb);
        }
    }
#endif
    free(a), free(b), free(out), free(outr), free(da), free(db);
    return kh_finish(&h);
}
