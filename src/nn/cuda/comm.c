/* comm: the gradient all-reduce over NCCL, one GPU per rank, bootstrapped over MPI: rank 0 makes
 * the NCCL unique id, a broadcast of the MPI base (src/mpi) hands it to every rank, each joins
 * with ncclCommInitRank. Buckets
 * (cu_bucket_plan) are reduced on a stream of their own after an event on the compute stream, so
 * a bucket's all-reduce overlaps the backward pass that is still computing earlier layers. */
#include "nn/cuda/cu_int.h"

#include "mpi/dist.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct cu_comm {
    cu_ctx *c;
    ncclComm_t nccl;
    cudaStream_t stream; /* NCCL and the bucket scaling */
    cudaEvent_t ready;   /* compute stream: the bucket's gradients are final */
    cudaEvent_t done;    /* comm stream: everything started so far is reduced */
};

static int fail_nccl(ncclResult_t r, const char *what) {
    return err_set(ERR_INTERNAL, "NCCL error in %s: %s", what, ncclGetErrorString(r));
}

#define NCCL_TRY(call)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return fail_nccl(r_, #call);                                                           \
    } while (0)

/* Every rank learns whether all ranks succeeded (1) or not (0). */
static int all_ok(const dist_world *w, int ok) {
    return !dist_max_int(w, !ok);
}

static int comm_streams(cu_comm *m) {
    CU_TRY(cudaSetDevice(m->c->gpu));
    CU_TRY(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    CU_TRY(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming));
    return 0;
}

int cu_comm_create(cu_comm **out, cu_ctx *c, MPI_Comm comm) {
    *out = NULL;
    dist_world w;
    dist_world_of(&w, comm);
    cu_comm *m = calloc(1, sizeof *m);
    int rc = m ? 0 : err_set(ERR_NOMEM, "NCCL communicator: out of host memory");
    if (m) {
        m->c = c;
        rc = comm_streams(m);
    }
    /* The id travels with rank 0's status, so a failure there reaches every rank. */
    struct {
        int ok;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (w.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&boot.id);
        boot.ok = r == ncclSuccess;
        if (!boot.ok && rc == 0)
            rc = fail_nccl(r, "ncclGetUniqueId");
    }
    dist_bcast(&w, &boot, sizeof boot, 0);
    if (rc == 0 && !boot.ok)
        rc = err_set(ERR_INTERNAL, "NCCL: rank 0 could not create the communicator id");
    /* ncclCommInitRank blocks until every rank has joined: join only if every rank can. */
    if (!all_ok(&w, rc == 0)) {
        cu_comm_free(m);
        return rc ? rc : err_set(ERR_INTERNAL, "NCCL: another rank failed before the join");
    }
    ncclResult_t r = ncclCommInitRank(&m->nccl, w.size, boot.id, w.rank);
    if (r != ncclSuccess) {
        m->nccl = NULL;
        rc = fail_nccl(r, "ncclCommInitRank");
    }
    if (!all_ok(&w, rc == 0)) {
        cu_comm_free(m);
        return rc ? rc : err_set(ERR_INTERNAL, "NCCL: another rank failed to join");
    }
    *out = m;
    return 0;
}

void cu_comm_free(cu_comm *m) {
    if (!m)
        return;
    if (m->stream)
        cudaStreamSynchronize(m->stream);
    if (m->nccl)
        ncclCommDestroy(m->nccl);
    if (m->ready)
        cudaEventDestroy(m->ready);
    if (m->done)
        cudaEventDestroy(m->done);
    if (m->stream)
        cudaStreamDestroy(m->stream);
    free(m);
}

int cu_allreduce_bucket(cu_comm *m, float *grads, const cu_bucket *b, float scale) {
    float *p = grads + b->offset;
    CU_TRY(cudaEventRecord(m->ready, m->c->stream));
    CU_TRY(cudaStreamWaitEvent(m->stream, m->ready, 0));
    NCCL_TRY(ncclAllReduce(p, p, b->count, ncclFloat32, ncclSum, m->nccl, m->stream));
    if (scale != 1.0f)
        CU_TRY(cuk_scale(m->stream, p, (long long)b->count, scale));
    return 0;
}

int cu_allreduce_wait(cu_comm *m) {
    CU_TRY(cudaEventRecord(m->done, m->stream));
    CU_TRY(cudaStreamWaitEvent(m->c->stream, m->done, 0));
    return 0;
}

/* ---- the bucketed gradient all-reduce of a model (cu.h cu_grad_*) ---------------------------- */

struct cu_grad {
    cu_comm *m;
    float *grads;
    float scale;
    int nb, started;
    int status;
    cu_bucket *b;
};

int cu_grad_create(cu_grad **out, cu_comm *m, float *grads, const size_t *offset,
                   const size_t *numel, int ntensors, size_t cap, float scale) {
    *out = NULL;
    cu_grad *g = calloc(1, sizeof *g);
    cu_bucket *b = malloc((size_t)(ntensors > 0 ? ntensors : 1) * sizeof *b);
    if (!g || !b) {
        free(g);
        free(b);
        return err_set(ERR_NOMEM, "gradient buckets: out of host memory");
    }
    int nb = cu_bucket_plan(offset, numel, ntensors, cap, b);
    if (nb < 0) {
        free(g);
        free(b);
        return nb;
    }
    g->m = m;
    g->grads = grads;
    g->scale = scale;
    g->nb = nb;
    g->b = b;
    *out = g;
    return 0;
}

void cu_grad_free(cu_grad *g) {
    if (!g)
        return;
    free(g->b);
    free(g);
}

void cu_grad_begin(cu_grad *g) {
    g->started = 0;
    g->status = 0;
}

/* Starts the buckets whose tensors (>= first) are all final, in plan order. */
static void grad_start(cu_grad *g, int first) {
    const int upto = cu_buckets_startable(g->b, g->nb, g->started, first);
    for (; g->started < upto; g->started++) {
        /* every bucket is issued even after a failure: the other ranks wait for it */
        int rc = cu_allreduce_bucket(g->m, g->grads, &g->b[g->started], g->scale);
        if (g->status == 0)
            g->status = rc;
    }
}

void cu_grad_ready(void *ctx, int first) {
    grad_start(ctx, first);
}

int cu_grad_finish(cu_grad *g) {
    grad_start(g, 0);
    int rc = cu_allreduce_wait(g->m);
    return g->status ? g->status : rc;
}
