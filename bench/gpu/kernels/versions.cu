/* versions: candidate versions of the CUDA backend's own kernels for the per-kernel harness
 * (bench/gpu/kernels/, kv.h), kept here and not in the product until a GPU run shows one is
 * faster and passes the same check as the product's (version 1, src/nn/cuda):
 *  relu v2    float4 loads and stores: 4 elements per thread, a quarter of the memory
 *             instructions of v1's one element per thread.
 *  concat v2  one thread per 4 channels (float4) instead of one per channel.
 *  adam v2    4 parameters per thread (float4 loads of p, g, m, v), the same float arithmetic
 *             per element as v1, so its results equal v1's bit for bit. */
#include "kv.h"
#include "nn/cuda/kern.h"

#define T CUK_THREADS

static int aligned16(const void *p) {
    return ((unsigned long long)p & 15) == 0;
}

static __global__ void k_relu_v2(float4 *y, const float4 *x, long long n4) {
    GRID_LOOP(i, n4) {
        float4 v = x[i];
        v.x = v.x > 0.0f ? v.x : 0.0f;
        v.y = v.y > 0.0f ? v.y : 0.0f;
        v.z = v.z > 0.0f ? v.z : 0.0f;
        v.w = v.w > 0.0f ? v.w : 0.0f;
        y[i] = v;
    }
}

extern "C" cudaError_t kv_relu_v2(cudaStream_t st, float *y, const float *x, long long n) {
    if (n % 4 || !aligned16(x) || !aligned16(y))
        return cudaErrorInvalidValue;
    k_relu_v2<<<cuk_grid(n / 4), T, 0, st>>>((float4 *)y, (const float4 *)x, n / 4);
    return cudaGetLastError();
}

static __global__ void k_concat_v2(float4 *out, const float4 *a, int ca4, const float4 *b,
                                   int cb4, long long P) {
    const int cc4 = ca4 + cb4;
    GRID_LOOP(i, P * cc4) {
        const long long p = i / cc4;
        const int c = (int)(i - p * cc4);
        out[i] = c < ca4 ? a[p * ca4 + c] : b[p * cb4 + (c - ca4)];
    }
}

extern "C" cudaError_t kv_concat_v2(cudaStream_t st, float *out, const float *a, int ca,
                                    const float *b, int cb, long long P) {
    if (ca % 4 || cb % 4 || !aligned16(out) || !aligned16(a) || !aligned16(b))
        return cudaErrorInvalidValue;
    k_concat_v2<<<cuk_grid(P * (ca + cb) / 4), T, 0, st>>>(
        (float4 *)out, (const float4 *)a, ca / 4, (const float4 *)b, cb / 4, P);
    return cudaGetLastError();
}

static __device__ float adam1(float p, float g, float *m, float *v, float b1, float b2,
                              float step_size, float bc2s, float eps) {
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
    const float denom = sqrtf(*v) / bc2s + eps;
    return p - step_size * *m / denom;
}

static __global__ void k_adam_v2(float4 *p, const float4 *g, float4 *m, float4 *v, long long n4,
                                 float b1, float b2, float step_size, float bc2s, float eps) {
    GRID_LOOP(i, n4) {
        float4 pp = p[i], mm = m[i], vv = v[i];
        const float4 gg = g[i];
        pp.x = adam1(pp.x, gg.x, &mm.x, &vv.x, b1, b2, step_size, bc2s, eps);
        pp.y = adam1(pp.y, gg.y, &mm.y, &vv.y, b1, b2, step_size, bc2s, eps);
        pp.z = adam1(pp.z, gg.z, &mm.z, &vv.z, b1, b2, step_size, bc2s, eps);
        pp.w = adam1(pp.w, gg.w, &mm.w, &vv.w, b1, b2, step_size, bc2s, eps);
        p[i] = pp;
        m[i] = mm;
        v[i] = vv;
    }
}

extern "C" cudaError_t kv_adam_v2(cudaStream_t st, float *p, const float *g, float *m, float *v,
                                  long long n, float b1, float b2, float step_size, float bc2s,
                                  float eps) {
    if (n % 4 || !aligned16(p) || !aligned16(g) || !aligned16(m) || !aligned16(v))
        return cudaErrorInvalidValue;
    k_adam_v2<<<cuk_grid(n / 4), T, 0, st>>>((float4 *)p, (const float4 *)g, (float4 *)m,
                                             (float4 *)v, n / 4, b1, b2, step_size, bc2s, eps);
    return cudaGetLastError();
}
