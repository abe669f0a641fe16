/* train: the pieces of `scaffold benchmark` below the epoch loop (bench.c), for a reader who
 * starts at bench_run:
 *
 *   device.c train_device_open: the `device` key (CPU, or one GPU per rank with the CUDA
 *            backend), and the gradient all-reduce that goes with it (MPI or NCCL).
 *   setup.c  train_setup: layout check, process grid, fractals and dataset (generated or
 *            reused), the dataset opened for this rank's shard, model (on the shard's block,
 *            with the sharding hooks and the gradient all-reduce attached), optimizer, loaders
 *            (files or the in-memory store), initial weights and CE class weights.
 *   step.c   train_step (one optimizer step: fetch, forward+loss+backward, gradient
 *            all-reduce, clip, update), train_validate (one pass over this replica's
 *            validation share), train_warmup (untimed steps, state restored), train_lr.
 *   ckpt.c   ckpt_resume (load on rank 0, agree, broadcast) with the checkpoint files.
 *
 * Every function taking the state is collective over the world and returns an agreed error
 * where it says so. All MPI goes through src/mpi (the base) and src/parallel (DistConv, gradient
 * buckets). */
#ifndef SCAFFOLD_TRAIN_TRAIN_H
#define SCAFFOLD_TRAIN_TRAIN_H

#include "core/config.h"
#include "dataset/dataset.h"
#include "mpi/dist.h"
#include "parallel/grad.h"
#include "parallel/grid.h"
#include "nn/backend.h"
#include "nn/optim.h"
#include "nn/unet.h"
#include "train/memsource.h"

#include <stdint.h>

/* Where the model computes. */
typedef struct train_device {
    nn_backend *be;  /* the model's backend; NULL: the CPU engine */
    int gpu;         /* the GPU in use, -1: the CPU */
    char note[512];  /* what rank 0 says about the choice (empty: nothing) */
    void *comm;      /* CUDA: the NCCL communicator (cu_comm) */
    void *grad;      /* CUDA: the model's bucketed all-reduce (cu_grad) */
} train_device;

/* Collective: the `device` key decided on every rank alike (cpu; cuda or auto: a GPU per rank
 * when every rank has one and the run is not spatially sharded, else auto stays on the CPU and
 * cuda is refused naming the reason), and the backend made for it. Called before anything is
 * written (device: cuda without a GPU is bad input). 0 or an agreed error. */
int train_device_open(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                      train_device *d);
void train_device_close(train_device *d);

/* Everything one training run holds; freed by train_state_free. */
typedef struct train_state {
    const scaffold_config *cfg;
    const dist_world *w; /* the world */
    par_grid grid;      /* replicas x spatial shards; grid.replicas sums the epoch statistics */
    par_spatial sp;     /* the model's sharding hooks when the volume is split (T > 1) */
    par_grad grad;      /* the bucketed, overlapped gradient all-reduce (world size > 1) */
    train_device dev;    /* the backend; on a GPU its NCCL all-reduce replaces grad */
    int replicas, replica;
    dataset *ds;
    ds_loader *train, *val;
    nn_unet model;
    nn_optim opt;
    float *ce_w;         /* n_classes */
    float *dice_buf;     /* local_batch_size */
    memsource mem;       /* data_store: memory */
    int stop;            /* a stop signal agreed during the warmup (train/stop.h), else 0 */
    double minibatch_s;  /* the last train_step's time after its batch arrived (upstream's
                          * minibatch time); -1 for a batch smaller than local_batch_size */
} train_state;

/* Collective. Checks the parallel layout and the arguments before anything is written: the
 * world a multiple of prod(dc_num_shards) (par_grid_check), shards dividing every level into
 * even blocks of at least 2 voxels down to the bottleneck. Fills `l` with the config's layout
 * (ds_layout_from_config, computed here once), which train_device_open and train_setup take.
 * 0 or an agreed ERR_CONFIG/ERR_USAGE naming the key and the fix. */
int train_check(const scaffold_config *c, const dist_world *w, ds_layout *l);

/* Collective. Sets the threads each rank computes with from the CPUs it was given (core/cpus.h:
 * the affinity mask within the cgroup quota, divided among the node's ranks on the same mask, at
 * most SLURM_CPUS_PER_TASK), unless OMP_NUM_THREADS is set, which wins; writes the one line
 * that says the choice and why into `line`. train_check calls it; rank 0 prints the line. */
void train_threads_choose(const dist_world *w, char *line, size_t n);

/* Warns about a node's CPU use (dist_node_cpu_use) when the ranks' OpenMP threads share CPUs
 * (more threads than the CPUs a rank is bound to, or than the node's ranks may use together) or
 * when a launcher's binding leaves CPUs idle. train_check calls it on rank 0. */
void train_cpu_report(const dist_node_cpu *u);

/* The model a run builds from its config (backend NULL), with sharded set for a spatially
 * sharded layout: one definition for the trainer and the memory plan, so the plan estimates the
 * model that runs. */
void train_model_of(const scaffold_config *c, int sharded, nn_unet_spec *spec, nn_unet_opts *o);

/* The memory a run needs per rank (bytes), estimated from the configuration before anything is
 * generated (preflight.c says how), for the shard extent of layout `l`. */
typedef struct train_mem_plan {
    int ext[3]; /* this rank's shard extent (D, H, W) */
    double params, grads, optim, activations, data, total;
    double snapshot;    /* the warmup's or the async writer's copy of params + optimizer */
    double node_memory; /* MemTotal or a smaller cgroup limit; 0 if unknown */
} train_mem_plan;
int train_memory_plan(const scaffold_config *c, const ds_layout *l, train_mem_plan *p);

/* Everything checkable before the first byte is written (preflight.c): fract_base_dir,
 * dataset_dir and base_run_dir creatable (nothing is created), an explicit run_dir that holds a
 * checkpoint, the global batch within both splits of the dataset the config gives, the model
 * against the shard extent, and the memory plan. Local; train_check agrees on it. */
int train_preflight(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                    int ranks_on_node);

/* Logs the plan (rank 0) and refuses (ERR_CONFIG, one message naming the terms and the fixes) a
 * run whose ranks on this node need more than the node's memory. Local; the caller agrees. */
int train_memory_check(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                       int ranks_on_node);

/* Collective. Builds everything listed above on the device `dev` (train_device_open; the state
 * takes it over, and rank 0 prints its note); `c->run_dir` must be set up. On error the state
 * is freed and the agreed error returned. */
int train_setup(scaffold_config *c, const ds_layout *l, const dist_world *w, train_device *dev,
                train_state *s);
void train_state_free(train_state *s);

/* The gradient all-reduce of the model's gradients (device.c): init attaches it as the model's
 * grad_ready hook (collective); begin before the step's forward pass; finish (collective) after
 * the backward pass, returning a local error (the caller agrees). */
int train_grad_init(train_state *s, double scale);
void train_grad_begin(train_state *s);
int train_grad_finish(train_state *s);
void train_grad_free(train_state *s);

/* One optimizer step on the next training batch at learning rate lr; adds loss*n, dice*n and n
 * to acc. Returns 1 with a step, 0 at the end of the epoch (seen on every rank at once), or an
 * agreed error. */
int train_step(train_state *s, double lr, double acc[3]);

/* Validation over this replica's share (at most max_batches batches, < 0: all): adds the sum of
 * per-sample hard Dice, loss*n and n to acc, with progress lines (log_progress) on long passes.
 * Local: the caller agrees on the result. */
int train_validate(train_state *s, int64_t epoch, int max_batches, double acc[3]);

/* Untimed warmup (reference §11.7): warmup_batches real steps and validation batches, then the
 * model and optimizer state are restored; progress lines with the time per batch and the time
 * left (a warmup step at scale 7 takes many seconds). A stop signal (train/stop.h) ends it after
 * the current step, with s->stop set and the state restored. Agreed result. */
int train_warmup(train_state *s);

/* Learning rate of a 1-based epoch (cosine annealing with warm restarts unless disabled). */
double train_lr(const scaffold_config *c, int epoch);

#endif
