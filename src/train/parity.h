/* parity: what a run writes on request so that another implementation (the PyTorch harness
 * bench/train/torch_train.py) can train the very same model on the very same samples in the
 * very same order, and compare step by step (docs/train-parity.md):
 *
 *   --save-initial-weights FILE  the model's initial parameters, written before warmup as a
 *                                safetensors state_dict with upstream's tensor names (the
 *                                checkpoint format, nn/checkpoint.h), so
 *                                UNet.load_state_dict(load_file(FILE)) works strictly. A resumed
 *                                run has no initial weights: it warns and writes nothing.
 *   --save-sample-order          <run folder>/sample_order.csv, one row per optimizer step and
 *                                replica: `epoch,step,replica,samples,loss,dice` with the
 *                                replica's sample ids (file stems, space-separated, in batch
 *                                order) and the training loss and soft Dice of its step. The
 *                                rows of an epoch are added when the epoch's training ends
 *                                (atomically: the file holds whole epochs only); a resume drops
 *                                the rows of epochs it trains again.
 *
 * The order rows come from the sampler itself (ds_sampler_indices over every replica on rank 0),
 * so they are the order the loaders deliver; the losses are each replica's, summed to rank 0
 * over the replicas (one all-reduce of 2 x replicas doubles per step, only with the option). */
#ifndef SCAFFOLD_TRAIN_PARITY_H
#define SCAFFOLD_TRAIN_PARITY_H

#include "train/train.h"

#include <stdint.h>

#define PARITY_ORDER_FILE "sample_order.csv"
#define PARITY_ORDER_HEADER "epoch,step,replica,samples,loss,dice"

typedef struct parity_opts {
    const char *initial_weights; /* NULL: not written */
    int sample_order;            /* 1: sample_order.csv */
} parity_opts;

/* The recorder of one run (rank 0 holds the rows; every rank takes part in the sums). */
typedef struct parity_log {
    int on;
    int64_t *order;  /* rank 0: replicas x per-replica samples of the current epoch */
    int64_t per;     /* samples per replica per epoch */
    double *sums;    /* 2 x replicas: this step's loss and Dice per replica */
    char *rows;      /* rank 0: this epoch's rows */
    size_t len, cap;
    int epoch, step;
} parity_log;

/* Checks, before anything is written, that the initial-weights file can be created (its
 * directory exists or can be made and is writable). Local; ERR_USAGE naming the path. */
int parity_check(const parity_opts *o);

/* Collective. Writes the initial weights (rank 0, from the host mirror of the parameters) when
 * asked and the run starts fresh (resumed_epoch == 0); a resumed run warns instead. Agreed. */
int parity_save_initial(const parity_opts *o, train_state *s, int resumed_epoch);

/* Collective. Starts the recorder; on a resumed run (start_epoch > 1) drops the rows of epochs
 * >= start_epoch from sample_order.csv. Off (and free of cost) unless o->sample_order. */
int parity_log_open(parity_log *p, const parity_opts *o, train_state *s, int start_epoch);

/* Called at the start of every training epoch (all ranks): rank 0 computes every replica's
 * order for it. Agreed result. */
int parity_log_epoch(parity_log *p, train_state *s, int epoch);

/* Collective, after every optimizer step: the step's loss and Dice of this replica (the
 * difference of train_step's accumulator before and after). Agreed result. */
int parity_log_step(parity_log *p, train_state *s, const double before[3], const double after[3]);

/* Rank 0 appends the epoch's rows to sample_order.csv (atomic rewrite). Agreed result. */
int parity_log_flush(parity_log *p, train_state *s);

void parity_log_free(parity_log *p);

#endif
