/* grad (src/parallel, the layer above nn): the gradient all-reduce of data (and spatial)
 * parallelism, bucketed and overlapped with the backward pass, as PyTorch DDP does.
 *
 * The gradient slab (nn_unet.grads: tensors in state_dict order, contiguous) is cut into buckets
 * of about bucket_bytes in reverse tensor order, the order in which the backward pass finishes
 * them. The model's grad_ready callback (nn_unet.grad_ready) starts an MPI_Iallreduce (sum over
 * the world) of every bucket whose tensors are all final, while the rest of the backward pass
 * computes. Open MPI progresses non-blocking operations only inside MPI calls, so a background
 * thread calls MPI_Iprobe every millisecond (SCAFFOLD_PROGRESS_US) between par_grad_begin and
 * par_grad_finish (when MPI provides MPI_THREAD_MULTIPLE; otherwise the callbacks test the
 * requests). It also progresses the halo exchanges of the forward and backward passes.
 *
 * par_grad_finish starts the buckets not started yet, waits for all of them and scales the sum
 * by `scale` (1/replicas: the gradient is the sum over spatial shards averaged over replicas,
 * upstream's DistConvDDP). The bucket sequence depends only on the tensor sizes, so a rank whose
 * backward pass did not run (a failure agreed afterwards) issues the same collectives from
 * par_grad_finish and nobody waits forever. SCAFFOLD_GRAD_OVERLAP=0 starts every bucket in
 * par_grad_finish instead (the blocking baseline of bench/dist); SCAFFOLD_GRAD_BUCKET_MB sets
 * the bucket size (default 4). */
#ifndef SCAFFOLD_PARALLEL_GRAD_H
#define SCAFFOLD_PARALLEL_GRAD_H

#include "mpi/dist.h"
#include "nn/unet.h"

#include <pthread.h>

typedef struct par_grad_piece {
    int first;     /* the bucket's lowest tensor: it may start when tensors >= first are final */
    size_t lo, hi; /* float range of the slab (at most 2^30 floats) */
} par_grad_piece;

typedef struct par_grad {
    const dist_world *w;
    float *grads;
    float scale;
    int np;                  /* pieces, in start order */
    par_grad_piece *piece;
    MPI_Request *req;
    int started;             /* pieces started this step */
    int overlap;             /* 0: all start in par_grad_finish */
    /* background progress */
    MPI_Comm probe;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int has_thread, active, quit;
    /* accounting since init */
    double exposed_s;        /* seconds waited in par_grad_finish */
    long long bytes;         /* bytes all-reduced */
    long steps;
} par_grad;

/* Collective over w (when w->size > 1). Attaches the callback to m (m->grad_ready). 0 or
 * ERR_NOMEM (agreed). */
int par_grad_init(par_grad *g, const dist_world *w, nn_unet *m, double scale);
void par_grad_free(par_grad *g); /* collective; NULL-safe after a failed or no init */

/* Before the step's forward pass: background progress on. */
void par_grad_begin(par_grad *g);

/* The model's callback: tensors >= first have their final gradient. */
void par_grad_ready(void *ctx, int first);

/* Starts the remaining buckets, waits, scales; background progress off. Collective. */
void par_grad_finish(par_grad *g);

#endif
