/* cu_int: what the C files of the CUDA backend share: the context's definition, the descriptor
 * cache that sits beside the algorithm cache, and the error helpers that turn a CUDA, cuDNN,
 * cuBLAS or NCCL status into the project's error convention (ERR_INTERNAL naming the call). */
#ifndef SCAFFOLD_NN_CUDA_CU_INT_H
#define SCAFFOLD_NN_CUDA_CU_INT_H

#include "core/err.h"
#include "nn/cuda/cu.h"
#include "nn/cuda/kern.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

/* cuDNN descriptors of one algorithm-cache entry, made on its first use. */
typedef struct cu_conv_desc {
    int made, ready; /* created; set for the entry's key */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} cu_conv_desc;

/* Bytes of pinned host memory for results that ops return to the host. */
#define CU_HOST_SCRATCH (1u << 20)

struct cu_ctx {
    int gpu, bf16;
    int skip_split; /* cu_conv3d_parts: the skip's convolution split by input (fp32 only) */
    cudaStream_t stream; /* compute */
    cudaStream_t copy;   /* loader host-to-device copies */
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    char *ws; /* op workspace (cu_*_ws_plan regions) */
    size_t ws_bytes;
    int ws_owned; /* allocated by the context (else the caller's, cu_ctx_set_workspace) */
    void *algo_ws; /* cuDNN algorithms' workspace */
    size_t algo_ws_bytes;
    void *host; /* pinned, CU_HOST_SCRATCH bytes */
    cu_algo_cache algos;
    cu_conv_desc desc[CU_ALGO_CACHE_MAX];
};

/* ---- dl.c: cuDNN, cuBLAS and NCCL are opened on first use (not linked), so a process that
 * makes no CUDA context never loads them. */
enum { CU_DL_CUDNN = 0, CU_DL_CUBLAS = 1, CU_DL_NCCL = 2, CU_DL_NLIBS = 3 };
/* Why library `lib` could not be opened or lacked a symbol; NULL while nothing failed. */
const char *cu_dl_error(int lib);
/* 1 once library `lib` is open. */
int cu_dl_loaded(int lib);
/* Tests: the soname the next first use opens (a missing one exercises the failure path; NULL:
 * the default again). */
void cu_dl_use_soname(int lib, const char *soname);

int cu_fail_cuda(cudaError_t e, const char *what, const char *file, int line);
int cu_fail_dnn(cudnnStatus_t s, const char *what, const char *file, int line);
int cu_fail_blas(cublasStatus_t s, const char *what, const char *file, int line);

/* The algorithm-cache slot of a key with its descriptors ready (conv.c; the bench uses it). */
int cu_conv_slot(cu_ctx *c, const cu_conv_key *k, int *slot);
/* Measures operation `op` of a slot on these buffers unless done (cu_conv_exec's operands; out
 * is overwritten). */
int cu_conv_measure(cu_ctx *c, int slot, int op, const void *a, const void *b, void *out);
/* Runs one cuDNN operation of a slot with algorithm `algo` and math type `math` (beta = 0, or
 * 1 with `accumulate`):
 * FWD (a = x, b = w, out = y), BWD_DATA (a = w, b = dy, out = dx), BWD_FILTER (a = x, b = dy,
 * out = dw). */
int cu_conv_exec(cu_ctx *c, int slot, int op, int algo, int math, size_t ws, const void *a,
                 const void *b, void *out, int accumulate);

#define CU_TRY(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cu_fail_cuda(e_, #call, __FILE__, __LINE__);                                    \
    } while (0)
#define DNN_TRY(call)                                                                              \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return cu_fail_dnn(s_, #call, __FILE__, __LINE__);                                     \
    } while (0)
#define BLAS_TRY(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return cu_fail_blas(s_, #call, __FILE__, __LINE__);                                    \
    } while (0)

/* 0, or ERR_RANGE when the context's workspace is smaller than the plan; then cu_ws_at() is
 * region i of the plan (NULL for an empty region). */
int cu_ws_check(const cu_ctx *c, const cu_ws_plan *p, const char *op);
static inline void *cu_ws_at(const cu_ctx *c, const cu_ws_plan *p, int i) {
    return p->size[i] ? c->ws + p->off[i] : NULL;
}

#endif
