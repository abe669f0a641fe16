/* device: the CUDA backend's process-level pieces: error reporting, device selection across the
 * MPI ranks, the context (streams, cuDNN and cuBLAS handles, workspace, pinned result buffer),
 * device memory and copies, the parameter slab, and the loader's pinned staging ring. */
#include "nn/cuda/cu_int.h"


#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cu_fail_cuda(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaErrorMemoryAllocation)
        return err_set(ERR_NOMEM, "GPU out of memory in %s (%s:%d): use a smaller batch, "
                                  "bf16 (torch_amp: 1) or spatial shards", what, file, line);
    return err_set(ERR_INTERNAL, "CUDA error %s in %s (%s:%d): %s", cudaGetErrorName(e), what,
                   file, line, cudaGetErrorString(e));
}

int cu_fail_dnn(cudnnStatus_t s, const char *what, const char *file, int line) {
    return err_set(ERR_INTERNAL, "cuDNN error in %s (%s:%d): %s", what, file, line,
                   cudnnGetErrorString(s));
}

int cu_fail_blas(cublasStatus_t s, const char *what, const char *file, int line) {
    const char *dl = cu_dl_error(CU_DL_CUBLAS);
    return err_set(ERR_INTERNAL, "cuBLAS error %d in %s (%s:%d)%s%s", (int)s, what, file, line,
                   dl ? ": " : "", dl ? dl : "");
}

int cu_ws_check(const cu_ctx *c, const cu_ws_plan *p, const char *op) {
    if (p->total <= c->ws_bytes)
        return 0;
    return err_set(ERR_RANGE,
                   "%s needs %zu bytes of GPU workspace, the context has %zu: size it with the "
                   "cu_*_ws_plan totals of every op it runs",
                   op, p->total, c->ws_bytes);
}

/* ---- device selection ------------------------------------------------------------------------ */

static const char *env_get(const char *name) {
    return getenv(name);
}

int cu_probe(char *why, size_t n) {
    int ndev = 0;
    why[0] = '\0';
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* clear the status of the failed probe */
        return -1;
    }
    return ndev;
}

int cu_device_select(const char *want_s, MPI_Comm comm, const char *cpu_only, int *gpu, char *note,
                     size_t note_len) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    *gpu = -1;
    note[0] = '\0';
    cu_want want;
    int rc = cu_want_parse(want_s, &want);
    int g = -1;
    /* The same `want` on every rank (the configuration is agreed), so the collective split
     * below runs on all ranks or on none. */
    if (rc == 0 && want != CU_WANT_CPU) {
        MPI_Comm node;
        int lr = 0;
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &lr);
        MPI_Comm_free(&node);
        char probe[256];
        const int ndev = cu_probe(probe, sizeof probe);
        /* The launcher's local rank wins over MPI's; it only matters with several GPUs. */
        const char *var = NULL;
        if (ndev > 1) {
            int e = cu_local_rank_from_env(env_get, &lr, &var);
            if (e < 0)
                rc = err_prefix("key 'device': %s", want_s);
        }
        if (rc == 0)
            rc = cu_device_decide(want, ndev, probe, lr, cpu_only, &g, note, note_len);
    }
    /* The GPU on every rank, or the CPU on every rank (one all-reduce path for gradients). */
    const int mine = rc == 0 && g >= 0;
    int without = !mine;
    MPI_Allreduce(MPI_IN_PLACE, &without, 1, MPI_INT, MPI_SUM, comm);
    if (mine && without > 0) {
        g = -1;
        snprintf(note, note_len,
                 "device %s: %d of %d ranks have no usable GPU; using the CPU on every rank",
                 want_s, without, size);
    }
    *gpu = g;
    return rc;
}

/* ---- context ---------------------------------------------------------------------------------- */

static int ctx_init(cu_ctx *c, size_t ws_bytes, size_t algo_ws_bytes) {
    CU_TRY(cudaSetDevice(c->gpu));
    CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CU_TRY(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    DNN_TRY(cudnnCreate(&c->dnn));
    DNN_TRY(cudnnSetStream(c->dnn, c->stream));
    BLAS_TRY(cublasCreate(&c->blas));
    BLAS_TRY(cublasSetStream(c->blas, c->stream));
    /* Default math with an explicit CUBLAS_COMPUTE_32F in every GEMM: never TF32. */
    BLAS_TRY(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    if (ws_bytes) {
        CU_TRY(cudaMalloc((void **)&c->ws, ws_bytes));
        c->ws_owned = 1;
    }
    c->ws_bytes = ws_bytes;
    if (algo_ws_bytes)
        CU_TRY(cudaMalloc(&c->algo_ws, algo_ws_bytes));
    c->algo_ws_bytes = algo_ws_bytes;
    CU_TRY(cudaMallocHost(&c->host, CU_HOST_SCRATCH));
    return 0;
}

int cu_ctx_create(cu_ctx **out, int gpu, int bf16, size_t ws_bytes, size_t algo_ws_bytes) {
    *out = NULL;
    cu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(ERR_NOMEM, "CUDA context: cannot allocate %zu bytes", sizeof *c);
    c->gpu = gpu;
    c->bf16 = bf16 != 0;
    int rc = cu_skip_mode_parse(getenv("SCAFFOLD_CUDA_SKIP"), &c->skip_split);
    if (rc) {
        free(c);
        return rc;
    }
    c->skip_split &= !c->bf16;
    rc = ctx_init(c, ws_bytes, algo_ws_bytes);
    if (rc) {
        cu_ctx_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void cu_ctx_free(cu_ctx *c) {
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->algos.n; i++) {
        cu_conv_desc *d = &c->desc[i];
        if (!d->made)
            continue;
        cudnnDestroyTensorDescriptor(d->x);
        cudnnDestroyTensorDescriptor(d->y);
        cudnnDestroyFilterDescriptor(d->w);
        cudnnDestroyConvolutionDescriptor(d->conv);
    }
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->dnn)
        cudnnDestroy(c->dnn);
    if (c->ws_owned)
        cudaFree(c->ws);
    cudaFree(c->algo_ws);
    if (c->host)
        cudaFreeHost(c->host);
    if (c->copy)
        cudaStreamDestroy(c->copy);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

void cu_ctx_set_workspace(cu_ctx *c, void *ws, size_t bytes) {
    if (c->ws_owned) {
        cudaStreamSynchronize(c->stream);
        cudaFree(c->ws);
    }
    c->ws = ws;
    c->ws_bytes = bytes;
    c->ws_owned = 0;
}

int cu_ctx_bf16(const cu_ctx *c) {
    return c->bf16;
}

int cu_ctx_skip_split(const cu_ctx *c) {
    return c->skip_split;
}

void cu_ctx_set_skip_split(cu_ctx *c, int split) {
    c->skip_split = split && !c->bf16;
}

const cu_algo_cache *cu_ctx_algos(const cu_ctx *c) {
    return &c->algos;
}

int cu_sync(cu_ctx *c) {
    CU_TRY(cudaStreamSynchronize(c->stream));
    return 0;
}

/* ---- memory ----------------------------------------------------------------------------------- */

int cu_alloc(void **p, size_t bytes) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return err_set(ERR_NOMEM, "GPU: cannot allocate %.1f MiB: use a smaller batch, bf16 "
                                  "(torch_amp: 1) or spatial shards", bytes / 1048576.0);
    }
    CU_TRY(e);
    return 0;
}

void cu_free(void *p) {
    cudaFree(p);
}

int cu_upload(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return 0;
}

int cu_download(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return 0;
}

int cu_zero(cu_ctx *c, void *p, size_t bytes) {
    CU_TRY(cudaMemsetAsync(p, 0, bytes, c->stream));
    return 0;
}

int cu_slab_create(cu_slab *s, size_t nparams, nn_optim_kind kind) {
    memset(s, 0, sizeof *s);
    s->nparams = nparams;
    s->state_floats = nn_optim_state_floats(kind, nparams);
    cu_slab_plan(nparams, s->state_floats, &s->layout);
    int rc = cu_alloc(&s->base, s->layout.bytes);
    if (rc)
        return err_prefix("parameter slab (%zu parameters)", nparams);
    /* cudaMemset runs on the legacy stream, which the context's non-blocking streams do not
     * wait for: finish it here. */
    CU_TRY(cudaMemset(s->base, 0, s->layout.bytes));
    CU_TRY(cudaDeviceSynchronize());
    char *b = s->base;
    s->params = (float *)(b + s->layout.params);
    s->grads = (float *)(b + s->layout.grads);
    s->state = s->state_floats ? (float *)(b + s->layout.state) : NULL;
    return 0;
}

void cu_slab_free(cu_slab *s) {
    if (!s)
        return;
    cudaFree(s->base);
    memset(s, 0, sizeof *s);
}

/* ---- loader staging ---------------------------------------------------------------------------- */

#define CU_STAGE_MAX 8

struct cu_stage {
    cu_ctx *c;
    int n;
    size_t bytes;
    void *host[CU_STAGE_MAX];
    void *dev[CU_STAGE_MAX];
    cudaEvent_t copied[CU_STAGE_MAX]; /* on the copy stream: the slot's copy is done */
    cudaEvent_t used[CU_STAGE_MAX];   /* on the compute stream: the slot's data was consumed */
    int sent[CU_STAGE_MAX], released[CU_STAGE_MAX];
};

static int stage_init(cu_stage *s) {
    for (int i = 0; i < s->n; i++) {
        CU_TRY(cudaMallocHost(&s->host[i], s->bytes));
        CU_TRY(cudaMalloc(&s->dev[i], s->bytes));
        CU_TRY(cudaEventCreateWithFlags(&s->copied[i], cudaEventDisableTiming));
        CU_TRY(cudaEventCreateWithFlags(&s->used[i], cudaEventDisableTiming));
    }
    return 0;
}

int cu_stage_create(cu_ctx *c, cu_stage **out, size_t bytes, int nslots) {
    *out = NULL;
    if (nslots < 1 || nslots > CU_STAGE_MAX)
        return err_set(ERR_RANGE, "staging ring: %d slots, must be 1..%d", nslots, CU_STAGE_MAX);
    cu_stage *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "staging ring: out of host memory");
    s->c = c;
    s->n = nslots;
    s->bytes = bytes;
    int rc = stage_init(s);
    if (rc) {
        cu_stage_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void cu_stage_free(cu_stage *s) {
    if (!s)
        return;
    cudaStreamSynchronize(s->c->copy);
    cudaStreamSynchronize(s->c->stream);
    for (int i = 0; i < s->n; i++) {
        if (s->host[i])
            cudaFreeHost(s->host[i]);
        cudaFree(s->dev[i]);
        if (s->copied[i])
            cudaEventDestroy(s->copied[i]);
        if (s->used[i])
            cudaEventDestroy(s->used[i]);
    }
    free(s);
}

void *cu_stage_host(cu_stage *s, int slot) {
    /* The pinned buffer is the source of the slot's previous copy: wait for that copy only. */
    if (s->sent[slot]) {
        cudaError_t e = cudaEventSynchronize(s->copied[slot]);
        if (e != cudaSuccess) {
            cu_fail_cuda(e, "cudaEventSynchronize(staging copy)", __FILE__, __LINE__);
            return NULL;
        }
    }
    return s->host[slot];
}

int cu_stage_send(cu_stage *s, int slot, size_t bytes) {
    if (bytes > s->bytes)
        return err_set(ERR_RANGE, "staging: %zu bytes into a %zu-byte slot", bytes, s->bytes);
    /* The device buffer may still be read by compute queued before the slot's release. */
    if (s->released[slot])
        CU_TRY(cudaStreamWaitEvent(s->c->copy, s->used[slot], 0));
    CU_TRY(cudaMemcpyAsync(s->dev[slot], s->host[slot], bytes, cudaMemcpyHostToDevice,
                           s->c->copy));
    CU_TRY(cudaEventRecord(s->copied[slot], s->c->copy));
    s->sent[slot] = 1;
    return 0;
}

void *cu_stage_device(cu_stage *s, int slot) {
    cudaError_t e = cudaStreamWaitEvent(s->c->stream, s->copied[slot], 0);
    if (e != cudaSuccess) {
        cu_fail_cuda(e, "cudaStreamWaitEvent(staging copy)", __FILE__, __LINE__);
        return NULL;
    }
    return s->dev[slot];
}

int cu_stage_release(cu_stage *s, int slot) {
    CU_TRY(cudaEventRecord(s->used[slot], s->c->stream));
    s->released[slot] = 1;
    return 0;
}
