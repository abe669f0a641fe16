/* kv: launchers of the harness's candidate kernel versions (versions.cu), numbered as in the
 * programs that run them; version 1 of every kernel is the product's own (src/nn/cuda). Each
 * returns cudaErrorInvalidValue when its preconditions (alignment, multiples of 4) do not
 * hold, else the launch status. CUDA builds only. */
#ifndef SCAFFOLD_BENCH_GPU_KV_H
#define SCAFFOLD_BENCH_GPU_KV_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* relu v2: y = max(x, 0) with float4 loads and stores (n % 4 == 0, 16-byte aligned). */
cudaError_t kv_relu_v2(cudaStream_t st, float *y, const float *x, long long n);
/* concat v2: out (P, ca + cb) = [a | b], one thread per 4 channels (ca, cb multiples of 4). */
cudaError_t kv_concat_v2(cudaStream_t st, float *out, const float *a, int ca, const float *b,
                         int cb, long long P);
/* adam v2: the product's per-element formula, 4 parameters per thread (n % 4 == 0, aligned). */
cudaError_t kv_adam_v2(cudaStream_t st, float *p, const float *g, float *m, float *v,
                       long long n, float b1, float b2, float step_size, float bc2s, float eps);

#ifdef __cplusplus
}
#endif

#endif
