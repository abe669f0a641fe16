/* bench: `scaffold benchmark`, the main job: fractals and dataset if missing, then data-parallel
 * training of the 3D U-Net over MPI until the validation hard Dice reaches target_dice
 * (reference §11), with warmup, checkpoints, resume, train_stats.csv, figures and the figure of
 * merit. Every rank calls bench_run; errors are agreed on all ranks. */
#ifndef SCAFFOLD_TRAIN_BENCH_H
#define SCAFFOLD_TRAIN_BENCH_H

#include "core/config.h"
#include "mpi/dist.h"
#include "train/parity.h"

/* Results of a run (rank 0's view; the same on every rank for the scalars). */
typedef struct bench_result {
    int epochs_run;       /* epochs trained by this invocation */
    int last_epoch;       /* the last epoch number */
    int converged;        /* val_dice >= target_dice */
    double val_dice;
    double sum_epoch_s;   /* sum of epoch_duration over the whole run (all invocations) */
    double wall_s;        /* training wall time of this invocation (after warmup) */
    double fom_upstream;  /* 1 / sum_epoch_s */
    long long ckpt_bytes; /* bytes written in checkpoints */
    double ckpt_s;        /* seconds spent writing checkpoints (blocking or background) */
    double loader_wait_s; /* seconds the training loop waited for batches */
    double samples_per_s; /* training samples (all replicas) / epoch durations, this invocation */
    double rss_max_gib, rss_min_gib; /* peak resident memory per rank, max and min over ranks */
    double cpu_wait; /* share of the training's wall time its threads waited for a CPU (the
                      * largest over ranks; nn_team_wait_seconds), -1 unknown */
    /* A stop signal (train/stop.h): the signal (0: none), where (epoch, and steps done of the
     * epoch's stop_steps; epoch 0: in the warmup) and whether a checkpoint holds that point. */
    int stop_signal, stop_epoch, stop_saved;
    long stop_step, stop_steps;
    double minibatch_time_s;    /* upstream's: per full batch the maximum over ranks, the median
                                 * per epoch, the median of those (NAN: no full batch) */
    long total_optimizer_steps; /* over the whole run (all invocations) */
} bench_result;

/* Above this share of waiting for a CPU, `scaffold benchmark` warns that the run's times are
 * not the machine's: quiet runs wait about 1% (the quickstart on 2 cores), a run with as many
 * busy processes beside it as cores 30-50%. */
#define BENCH_BUSY_WAIT 0.10
/* The summary line's field of that share, in percent ("... BENCH_WAIT_KEY 0.5% (max); ..."),
 * as `scaffold scaling` and `scaffold tune` read it back from a run's output. */
#define BENCH_WAIT_KEY "threads waiting for a CPU "

/* Runs the benchmark. `c` is finalised with absolute directories (cli_config_start); `po`
 * (NULL: none) asks for the same-data comparison outputs of parity.h. */
int bench_run(scaffold_config *c, const dist_world *w, int argc, char **argv,
              const parity_opts *po, bench_result *out);

#endif
