/* runfolder: the benchmark's run folder (reference §4) and its bookkeeping files:
 *   <base_run_dir>/<job_name>_YYYYmmdd-HHMMSS[-k]/
 *     config.yaml (fully merged), overrides.yaml (explicit flags), base_config.yaml (copy of the
 *     first -c file), restart.sh (executable), train_stats.csv, checkpoints/, figures/
 * and the train_stats.csv writer with upstream's exact 10 columns. */
#ifndef SCAFFOLD_TRAIN_RUNFOLDER_H
#define SCAFFOLD_TRAIN_RUNFOLDER_H

#include "core/config.h"
#include "core/fsutil.h"
#include "mpi/dist.h"

/* Collective. A fresh run (no run_dir given) creates a new folder on rank 0 and writes the
 * files above; an explicit run_dir (--run-dir or config) resumes there: it must exist, and
 * train_from_scratch is forced to 0 and restart to 1. The folder path (absolute) is broadcast
 * into c->run_dir. Errors (unwritable base_run_dir...) are agreed on all ranks. */
int run_folder_setup(scaffold_config *c, const dist_world *w, int argc, char **argv);

/* The keys a resume may change: when and how often to stop or save, where the inputs live,
 * how the work is spread over threads and devices; and the spatial layout (dc_num_shards,
 * dc_shard_dims) while group_norm_stats is global (a sharded run then computes the unsharded
 * one). Every other key changes what the run computes (seed, data, model, optimizer, learning
 * rates, precision, target ...). NULL-terminated; docs/usage.md lists them. */
extern const char *const run_resume_mutable_keys[];

/* Before a resume writes anything (rank 0): compares the merged configuration with the run's
 * RUN/config.yaml. Keys outside run_resume_mutable_keys that differ: ERR_CONFIG naming each
 * with both values. Mutable keys that differ are listed in `changed` ("epochs: [4, 8], ...",
 * "" when none). A config.yaml that cannot be read: ERR_CONFIG naming it. */
int run_config_resume_check(const scaffold_config *c, char *changed, size_t n);

/* One row of train_stats.csv. */
typedef struct run_stats_row {
    int epoch;
    double epoch_loss, overall_loss, val_loss_epoch, val_loss_avg, train_dice, val_dice;
    double epoch_duration;
    long optimizer_steps, total_optimizer_steps;
} run_stats_row;

#define RUN_STATS_HEADER                                                                           \
    "epoch,epoch_loss,overall_loss,val_loss_epoch,val_loss_avg,train_dice,val_dice,"              \
    "epoch_duration,optimizer_steps,total_optimizer_steps"

/* Appends a row (writing the header first if the file is new), flushed and fsynced. */
int run_stats_append(const char *run_dir, const run_stats_row *r);

/* Keeps only rows with epoch < start_epoch (resume), atomically. Missing file: no-op. */
int run_stats_truncate(const char *run_dir, int start_epoch);

/* Reads all rows (malloc'ed array, caller frees). Missing file: 0 rows. */
int run_stats_read(const char *run_dir, run_stats_row **rows, int *n);

/* Removes train_stats.csv, the checkpoint folder's files and predictions/ (train_from_scratch). */
int run_folder_clean(const scaffold_config *c);

#endif
