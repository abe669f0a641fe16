/* ckpt: the benchmark's checkpoints (reference §12, ARCHITECTURE decision 3).
 *
 * A checkpoint is the engine's checkpoint pair (nn/checkpoint.h), written by rank 0:
 *   checkpoint_<tag>.safetensors        the model: upstream state_dict names and shapes, so
 *                                       UNet.load_state_dict(safetensors.torch.load_file(p))
 *                                       works; scalars (epoch, val loss/Dice, step counters,
 *                                       learning rate, optimizer kind...) in the metadata
 *   checkpoint_<tag>.optim.safetensors  the optimizer state (exp_avg.<name>, exp_avg_sq.<name> or
 *                                       square_avg.<name>) and the same save id
 * Each file is written to a temporary name, fsynced and renamed (fsutil), the optimizer file
 * first; both carry a save id, so a crash between the two renames is detected as a mismatch.
 * `best` (lowest validation loss) is a pair of hard links to the newly renamed `last` files —
 * never a byte copy, and never a link to a file that is later rewritten in place, because every
 * save creates new inodes. With async saves, a background thread writes a snapshot taken on the
 * caller's thread while training goes on; at most one save is pending (a new save first waits
 * for the previous one). */
#ifndef SCAFFOLD_TRAIN_CKPT_H
#define SCAFFOLD_TRAIN_CKPT_H

#include "dist/dist.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <pthread.h>
#include <stdint.h>

/* Scalars saved with a checkpoint (metadata). */
typedef struct ckpt_state {
    int epoch;
    double val_loss_avg, val_dice, best_val_loss;
    long total_optimizer_steps, global_step;
    double lr;
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
    ckpt_state st;
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

/* Loads `last`, or `best` if `last` is missing or corrupt (a corrupt pair is renamed *.corrupt).
 * Restores params, optimizer state and scalars. Returns 0, ERR_NOTFOUND when neither exists, or
 * ERR_FORMAT when both are unusable. *which = "last" or "best". */
int ckpt_load(const char *dir, nn_unet *m, nn_optim *o, ckpt_state *st, const char **which);

/* Collective resume: rank 0 loads (ckpt_load), the outcome is agreed, then parameters,
 * optimizer state and scalars are broadcast. Without a checkpoint, `required` (--restart)
 * makes it an error; otherwise the run starts fresh (*resumed = 0, state untouched). 0 or an
 * agreed error. */
int ckpt_resume(const char *dir, const dist_world *w, int required, nn_unet *m, nn_optim *o,
                ckpt_state *st, int *resumed);

#endif
