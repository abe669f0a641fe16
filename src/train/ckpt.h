/* ckpt: the benchmark's checkpoints (reference §12, ARCHITECTURE decision 3).
 *
 * A checkpoint is the engine's checkpoint pair (nn/checkpoint.h), written by rank 0:
 *   checkpoint_<tag>.safetensors        the model: upstream state_dict names and shapes, so
 *                                       UNet.load_state_dict(safetensors.torch.load_file(p))
 *                                       works; scalars (epoch, val loss/Dice, step counters,
 *                                       learning rate, optimizer kind...) in the metadata
 *   checkpoint_<tag>.optim.safetensors  the optimizer state (exp_avg.<name>, exp_avg_sq.<name> or
 *                                       square_avg.<name>) and the same pair id
 *
 * Always a consistent pair. A save writes both files of the new pair into the staging folder
 * `.pending/` beside them (each to a temporary name, fsynced, renamed), so the previous pair is
 * untouched until the new one is complete and synced; then the sidecar and the model are
 * renamed over `last`. `best` (lowest validation loss) is then a pair of hard links to the new
 * `last` files, never a byte copy (every save creates new inodes). A crash can leave one
 * window per tag where the two files under its names belong to different saves; the files
 * carry a pair id, and a resume pairs model and sidecar files by it wherever they are (last,
 * best, the staging folder), takes the newest consistent pair, and only then tidies: that pair
 * becomes `last`, a torn `best` is relinked, unusable files are renamed *.corrupt, the staging
 * folder is emptied.
 *
 * A save in the middle of an epoch (a signal stopped the run) records the steps done in the
 * epoch after `epoch`, their seconds, and every rank's partial sums, so that the resumed epoch
 * ends with the same statistics as an uninterrupted one.
 *
 * With async saves, a background thread writes a snapshot taken on the caller's thread while
 * training goes on; at most one save is pending (a new save first waits for the previous one). */
#ifndef SCAFFOLD_TRAIN_CKPT_H
#define SCAFFOLD_TRAIN_CKPT_H

#include "mpi/dist.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <pthread.h>
#include <stdint.h>

/* Scalars saved with a checkpoint (metadata). */
typedef struct ckpt_state {
    int epoch; /* the last completed epoch */
    double val_loss_avg, val_dice, best_val_loss;
    long total_optimizer_steps, global_step; /* through `epoch`; global_step adds partial_steps */
    double lr;
    /* A save inside epoch `epoch` + 1: the steps done there (0: saved at an epoch's end), their
     * seconds, and the sums (loss*n, dice*n, n) of those steps on each of the `world` ranks
     * (partial_acc: 3 * world doubles; ckpt_load allocates it, the caller frees it). */
    int partial_steps, world;
    double partial_seconds;
    double *partial_acc;
} ckpt_state;

typedef struct ckpt_writer {
    char dir[4096];
    int async;
    /* Snapshot buffers for async saves (allocated on the first async save). */
    float *snap_params, *snap_state;
    size_t nparams, nstate;
    pthread_t thread;
    int pending;
    int result;           /* of the last completed save */
    char errmsg[1024];    /* its message */
    /* What the pending save writes. */
    const nn_unet *model;
    nn_optim_kind kind;
    int64_t opt_step;
    ckpt_state st;        /* partial_acc points into acc_copy */
    double *acc_copy;
    int make_best;
    long long bytes_written;
    double seconds;       /* time spent in saves (writer thread or caller) */
} ckpt_writer;

void ckpt_writer_init(ckpt_writer *w, const char *dir, int async);

/* Saves `last` (and `best` if make_best). Synchronous mode returns the write's result; async mode
 * waits for the previous save, snapshots params and optimizer state, starts the thread and
 * returns the previous save's result. */
int ckpt_save(ckpt_writer *w, const nn_unet *m, const nn_optim *o, const ckpt_state *st,
              int make_best);

/* Waits for a pending save; returns its result. */
int ckpt_finish(ckpt_writer *w);

void ckpt_writer_free(ckpt_writer *w);

/* Loads the newest consistent pair (model and sidecar with one pair id, found among last, best
 * and the staging folder; newest by epoch and steps) and restores params, optimizer state and
 * scalars; then, and only then, tidies the folder (see above). Returns 0, ERR_NOTFOUND when
 * there is no checkpoint, or ERR_FORMAT naming every file and why when no pair is consistent
 * (nothing is renamed then). *which names where the pair was found ("checkpoint_last", ...). */
int ckpt_load(const char *dir, nn_unet *m, nn_optim *o, ckpt_state *st, const char **which);

/* 1 when `dir` holds a checkpoint model file a resume could start from (any tag or the staging
 * folder), without reading it. */
int ckpt_exists(const char *dir);

/* Collective resume: rank 0 loads (ckpt_load), the outcome is agreed, then parameters,
 * optimizer state and scalars are broadcast. Without a checkpoint, `required` (--restart)
 * makes it an error; otherwise the run starts fresh (*resumed = 0, state untouched). 0 or an
 * agreed error. */
int ckpt_resume(const char *dir, const dist_world *w, int required, nn_unet *m, nn_optim *o,
                ckpt_state *st, int *resumed);

#endif
