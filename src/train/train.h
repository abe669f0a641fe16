/* train: the pieces of `scaffold benchmark` below the epoch loop (bench.c), for a reader who
 * starts at bench_run:
 *
 *   setup.c  train_setup: layout check, fractals and dataset (generated or reused), the
 *            dataset opened for this rank's shard, model, optimizer, loaders (files or the
 *            in-memory store), initial weights and CE class weights; train_state_free.
 *   step.c   train_step (one optimizer step: fetch, forward+loss+backward, gradient
 *            all-reduce, clip, update), train_validate (one pass over this replica's
 *            validation share), train_warmup (untimed steps, state restored), train_lr.
 *   ckpt.c   ckpt_resume (load on rank 0, agree, broadcast) with the checkpoint files.
 *
 * Every function taking the state is collective over the world and returns an agreed error
 * where it says so. All MPI goes through src/dist. */
#ifndef SCAFFOLD_TRAIN_TRAIN_H
#define SCAFFOLD_TRAIN_TRAIN_H

#include "core/config.h"
#include "dataset/dataset.h"
#include "dist/dist.h"
#include "nn/optim.h"
#include "nn/unet.h"
#include "train/memsource.h"

#include <stdint.h>

/* Everything one training run holds; freed by train_state_free. */
typedef struct train_state {
    const scaffold_config *cfg;
    const dist_world *w; /* the world */
    dist_world dp;       /* the data-parallel group (the replicas) */
    int replicas, replica;
    double grad_scale;   /* 1 / replicas */
    dataset *ds;
    ds_loader *train, *val;
    nn_unet model;
    nn_optim opt;
    float *ce_w;         /* n_classes */
    float *dice_buf;     /* local_batch_size */
    memsource mem;       /* data_store: memory */
} train_state;

/* Collective. Checks the parallel layout (world vs dc_num_shards) and the arguments before
 * anything is written. 0 or an agreed ERR_CONFIG/ERR_USAGE naming the key and the fix. */
int train_check(const scaffold_config *c, const dist_world *w);

/* Collective. Builds everything listed above; `c->run_dir` must be set up. On error the state
 * is freed and the agreed error returned. */
int train_setup(scaffold_config *c, const dist_world *w, train_state *s);
void train_state_free(train_state *s);

/* One optimizer step on the next training batch at learning rate lr; adds loss*n, dice*n and n
 * to acc. Returns 1 with a step, 0 at the end of the epoch (seen on every rank at once), or an
 * agreed error. */
int train_step(train_state *s, double lr, double acc[3]);

/* Validation over this replica's share (at most max_batches batches, < 0: all): adds the sum of
 * per-sample hard Dice, loss*n and n to acc. Local: the caller agrees on the result. */
int train_validate(train_state *s, int64_t epoch, int max_batches, double acc[3]);

/* Untimed warmup (reference §11.7): warmup_batches real steps and validation batches, then the
 * model and optimizer state are restored. Agreed result. */
int train_warmup(train_state *s);

/* Learning rate of a 1-based epoch (cosine annealing with warm restarts unless disabled). */
double train_lr(const scaffold_config *c, int epoch);

#endif
