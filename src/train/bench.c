/* bench: the benchmark driver (see bench.h): setup, resume, warmup, then the epoch loop with its
 * statistics, checkpoints, figures and the figure of merit. The pieces below the loop are in
 * train.h (setup.c, step.c) and ckpt.h. */
#include "train/bench.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/prof.h"
#include "nn/algo.h"
#include "nn/base.h"
#include "nn/settings.h"
#include "train/ckpt.h"
#include "train/plot.h"
#include "train/runfolder.h"
#include "train/stop.h"
#include "train/train.h"

#include <scaffold/trace.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void make_figures(const scaffold_config *c) {
    run_stats_row *rows = NULL;
    int n = 0;
    if (run_stats_read(c->run_dir, &rows, &n) != 0 || n == 0) {
        free(rows);
        return;
    }
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    if (!x || !y) {
        MEM_FREE(x, y, rows);
        return;
    }
    char title[128], p[FS_PATH_MAX + 64];
    snprintf(title, sizeof title, "v=%d, c=%d, u=%d", c->vol_size, c->n_categories,
             c->unet_layers);
    struct {
        const char *file, *label;
        int logy;
    } figs[3] = {{"train_loss.png", "training loss", 1},
                 {"val_dice.png", "validation Dice", 0},
                 {"val_loss.png", "validation loss", 0}};
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < n; i++) {
            x[i] = rows[i].epoch;
            y[i] = f == 0 ? rows[i].overall_loss : f == 1 ? rows[i].val_dice : rows[i].val_loss_avg;
        }
        snprintf(p, sizeof p, "%s/figures/%s", c->run_dir, figs[f].file);
        if (plot_line_png(p, title, "epoch", figs[f].label, x, y, n, figs[f].logy) != 0)
            log_warn("figure %s: %s", p, err_msg());
    }
    MEM_FREE(x, y, rows);
}

/* Resume from the run folder's checkpoint (restart or train_from_scratch 0) or clean it.
 * Sets the checkpoint scalars (epoch 0 when fresh). Agreed result. */
static int resume_or_clean(const scaffold_config *c, train_state *s, const char *ckdir,
                           ckpt_state *cs) {
    const dist_world *w = s->w;
    *cs = (ckpt_state){.best_val_loss = INFINITY, .lr = c->starting_learning_rate};
    int rc = 0;
    if (c->restart || !c->train_from_scratch) {
        int resumed = 0;
        rc = ckpt_resume(ckdir, w, c->restart, &s->model, &s->opt, cs, &resumed);
        /* the loaded state is on the host: to the device the model computes on */
        if (rc == 0 && resumed)
            rc = dist_agree(w, nn_unet_upload(&s->model, &s->opt));
        if (rc == 0 && resumed && w->rank == 0)
            rc = run_stats_truncate(c->run_dir, cs->epoch + 1);
    } else if (w->rank == 0) {
        rc = run_folder_clean(c);
    }
    return dist_agree(w, rc);
}

/* The training phase of one epoch from batch `first` (a run resumed in the middle of it): every
 * further batch of this replica's share, with a progress line at most every
 * SCAFFOLD_PROGRESS_SECONDS (log_progress; at scale 7 a CPU step takes many seconds). After each
 * step the ranks agree on a stop signal (*stop, train_stop_poll): the epoch ends there. Agreed
 * result. The epoch's samples are recorded in `pl` when sample_order.csv is asked for; the
 * minibatch times go into mb[0..nmb) (-1 where there was none). */
static int train_epoch(train_state *s, int epoch, double lr, double acc[3], long *steps,
                       int *stop, double *mb, int64_t nmb, parity_log *pl) {
    const dist_world *w = s->w;
    const int64_t nb = ds_loader_num_batches(s->train);
    const double per_step = (double)s->cfg->local_batch_size * s->replicas;
    log_progress pr;
    log_progress_start(&pr, (long)nb, *steps);
    for (int64_t k = 0; k < nmb; k++)
        mb[k] = -1;
    prof_begin(PROF_BATCH_LOOP);
    scaffold_trace_region tr =
        SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_TRAIN, SCAFFOLD_TRACE_CAT_PIPELINE);
    int rc = ds_loader_start_epoch_at(s->train, epoch, *steps);
    if (rc == 0)
        rc = parity_log_epoch(pl, s, epoch);
    while (!*stop) {
        /* A node failure in the middle of an epoch. */
        if (*steps == 1 && w->rank == 0 && fault_hit(FAULT_KILL_AT_EPOCH, epoch))
            raise(SIGKILL);
        const double before[3] = {acc[0], acc[1], acc[2]};
        int r = rc ? rc : train_step(s, lr, acc);
        if (r > 0) {
            const int prc = parity_log_step(pl, s, before, acc);
            r = prc ? prc : r;
        }
        if (r <= 0) {
            rc = r;
            break;
        }
        if (*steps < nmb)
            mb[*steps] = s->minibatch_s;
        (*steps)++;
        /* A launcher that signals one rank during its step (fault point SIGNAL_AT_STEP). */
        if (fault_hit(FAULT_SIGNAL_AT_STEP, w->rank))
            raise((int)fault_arg(FAULT_SIGNAL_AT_STEP, 1));
        *stop = train_stop_poll(w);
        double per, el, eta;
        if (log_progress_due(&pr, *steps, &per, &el, &eta))
            log_info("epoch %d: step %ld/%lld, %.2f samples/s, %.1f s elapsed, training ETA %.0f s",
                     epoch, *steps, (long long)nb, per_step / per, el, eta);
    }
    prof_end(PROF_BATCH_LOOP);
    if (rc == 0)
        rc = parity_log_flush(pl, s);
    SCAFFOLD_TRACE_REGION_INT(tr, "steps", *steps);
    SCAFFOLD_TRACE_REGION_END(tr);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the positive values of v[0..n) (reorders v); NAN when there are none. */
static double median_positive(double *v, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] > 0)
            v[k++] = v[i];
    if (!k)
        return NAN;
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

/* A train_stats.csv row from the epoch's sums over the replicas (reference §11.6): training
 * [loss*n, dice*n, n] and validation [dice, loss*n, n]. */
static run_stats_row epoch_row(const dist_world *w, int epoch, const double acc[3],
                               const double vacc[3], double *samples) {
    double sums[6] = {acc[0], acc[1], acc[2], vacc[0], vacc[1], vacc[2]};
    dist_sum_doubles(w, sums, 6);
    run_stats_row row;
    memset(&row, 0, sizeof row);
    row.epoch = epoch;
    row.epoch_loss = sums[0];
    row.overall_loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    row.train_dice = sums[2] > 0 ? sums[1] / sums[2] : NAN;
    row.val_dice = sums[5] > 0 ? sums[3] / sums[5] : NAN;
    row.val_loss_epoch = sums[4];
    row.val_loss_avg = sums[5] > 0 ? sums[4] / sums[5] : NAN;
    *samples = sums[2];
    return row;
}

/* Saves `last` (and `best` when this epoch has the lowest validation loss so far) with the
 * scalars of `row`; rank 0 writes. The caller agrees on the result. */
static int save_epoch(ckpt_writer *ck, train_state *s, ckpt_state *cs, const run_stats_row *row,
                      double lr) {
    int best = row->val_loss_avg < cs->best_val_loss;
    if (best)
        cs->best_val_loss = row->val_loss_avg;
    cs->epoch = row->epoch;
    cs->val_loss_avg = row->val_loss_avg;
    cs->val_dice = row->val_dice;
    cs->total_optimizer_steps = cs->global_step = row->total_optimizer_steps;
    cs->lr = lr;
    if (s->w->rank != 0)
        return 0;
    /* the checkpoint is written from the host mirrors (a copy from the device's) */
    prof_begin(PROF_CAPTURE);
    int rc = nn_unet_download(&s->model, &s->opt);
    prof_end(PROF_CAPTURE);
    return rc ? rc : ckpt_save(ck, &s->model, &s->opt, cs, best);
}

/* The Conv3d algorithms chosen so far (nn/algo.h): when new ones were chosen since the last
 * call, rank 0 rewrites <run>/nn_algorithms.tsv (the file SCAFFOLD_NN_ALGO_PIN takes) and adds
 * them to the trace's metadata; when new ones were measured, the selection's cost is printed,
 * with its share of the epoch it fell in (epoch_s > 0). */
static void algo_report(const scaffold_config *c, const dist_world *w, const char *when,
                        double epoch_s) {
    static int reported, measured_seen;
    const int n = nn_algo_count();
    int measured;
    const double sel = nn_algo_select_seconds(&measured);
    if (n == reported)
        return;
    if (w->rank == 0) {
        char path[FS_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/nn_algorithms.tsv", c->run_dir);
        if (nn_algo_write(path))
            log_warn("%s", err_msg());
        for (int i = reported; i < n; i++) {
            const nn_algo_choice *ch = nn_algo_get(i);
            char key[160];
            nn_algo_describe(ch, key, sizeof key);
            key[strcspn(key, ":")] = 0;
            char k[200];
            snprintf(k, sizeof k, "nn_algo %s", key);
            SCAFFOLD_TRACE_METADATA(k, nn_algo_name(ch->algo));
        }
    }
    if (measured > measured_seen) {
        char share[64] = "";
        if (epoch_s > 0)
            snprintf(share, sizeof share, ", %.1f%% of that epoch", 100 * sel / epoch_s);
        const char *cache = nn_algo_cache_path();
        log_info("nn algorithms: %d Conv3d passes chosen by %s, %d measured in %.2f s%s (cache "
                 "%s; the choices in nn_algorithms.tsv, -v prints them)",
                 n, when, measured, sel, share, cache ? cache : "none");
    }
    reported = n, measured_seen = measured;
}

/* Sum of epoch durations over the whole run (all invocations) from train_stats.csv, the
 * upstream FOM, and the figures. Rank 0. */
static void finish_run(const scaffold_config *c, bench_result *out) {
    run_stats_row *rows = NULL;
    int n = 0;
    if (run_stats_read(c->run_dir, &rows, &n) == 0) {
        for (int i = 0; i < n; i++)
            out->sum_epoch_s += rows[i].epoch_duration;
        free(rows);
    }
    out->fom_upstream = out->sum_epoch_s > 0 ? 1.0 / out->sum_epoch_s : 0;
    prof_begin(PROF_GENERATE_FIGURES);
    make_figures(c);
    prof_end(PROF_GENERATE_FIGURES);
}

/* A save in the middle of epoch `epoch` (a stop signal): the model and optimizer as they are,
 * with the scalars of the last completed epoch (`done`), the steps taken in this one, their
 * seconds and every rank's partial sums, so that the resumed epoch ends as it would have.
 * Collective (the sums are gathered on rank 0, which writes); the caller agrees. */
static int save_partial(ckpt_writer *ck, train_state *s, const ckpt_state *done, long steps,
                        const double acc[3], double seconds, double lr) {
    const dist_world *w = s->w;
    double *all = w->rank == 0 ? malloc((size_t)w->size * 3 * sizeof *all) : NULL;
    int rc = dist_agree(w, w->rank == 0 && !all ? err_set(ERR_NOMEM, "out of memory") : 0);
    if (rc) {
        free(all);
        return rc;
    }
    dist_gather_doubles(w, acc, 3, all, 0);
    ckpt_state p = *done;
    p.partial_steps = (int)steps;
    p.partial_seconds = dist_max_double(w, seconds);
    p.world = w->size;
    p.partial_acc = all;
    p.global_step = done->total_optimizer_steps + steps;
    p.lr = lr;
    if (w->rank == 0) {
        rc = nn_unet_download(&s->model, &s->opt);
        if (rc == 0)
            rc = ckpt_save(ck, &s->model, &s->opt, &p, 0);
    }
    free(all);
    return rc;
}

/* What the epoch loop carries from one epoch to the next. */
typedef struct epoch_run {
    const scaffold_config *c;
    train_state *s;
    ckpt_writer *ck;
    ckpt_state *cs;
    bench_result *out;
    int64_t nb;            /* batches per epoch per replica */
    int ckpt_on;           /* checkpoints at an interval or on a signal */
    int last_saved;        /* the last epoch checkpointed */
    int stop;              /* a stop signal, agreed */
    double samples_all, seconds_all;
    long total_steps;
    ckpt_state done;       /* the last completed epoch's scalars */
    /* upstream's minibatch time: per-batch times, their maximum over ranks, epoch medians */
    double *mb;            /* nb */
    double *med;
    int nmed;
    run_stats_row last_row;
    double wait0; /* the threads' run-queue wait at the start (nn_team_wait_seconds) */
} epoch_run;

/* Stopped inside epoch `epoch` after `steps` steps: saved there (when checkpoints are on),
 * nothing of the epoch is reported. */
static int epoch_stop_inside(epoch_run *r, int epoch, long steps, const double acc[3],
                             double seconds, double lr) {
    bench_result *out = r->out;
    int rc = 0;
    out->stop_epoch = epoch;
    out->stop_step = steps;
    out->stop_steps = r->nb;
    if (r->ckpt_on)
        rc = dist_agree(r->s->w, save_partial(r->ck, r->s, &r->done, steps, acc, seconds, lr));
    out->stop_saved = r->ckpt_on && rc == 0;
    return rc;
}

/* Collective. Completes the epoch's statistics row (duration, steps; the minibatch median kept
 * for the run) and rank 0 appends it to train_stats.csv and logs it. */
static int epoch_record(epoch_run *r, run_stats_row *row, int epoch, long steps, double samples,
                        double lr, double t0) {
    const dist_world *w = r->s->w;
    row->epoch_duration = dist_max_double(w, time_now() - t0);
    /* upstream's minibatch time, after the epoch's time (which this collective must not
     * change): each batch's maximum over ranks, the epoch's median */
    if (r->nb > 0) {
        dist_max_doubles(w, r->mb, (size_t)r->nb);
        double m = median_positive(r->mb, r->nb), *grown = NULL;
        if (!isnan(m) &&
            (grown = realloc(r->med, (size_t)(r->nmed + 1) * sizeof *r->med)) != NULL) {
            r->med = grown;
            r->med[r->nmed++] = m;
        }
    }
    char when[32];
    snprintf(when, sizeof when, "epoch %d", epoch);
    algo_report(r->c, w, when, row->epoch_duration);
    row->optimizer_steps = steps;
    r->samples_all += samples;
    r->seconds_all += row->epoch_duration;
    r->total_steps += steps;
    row->total_optimizer_steps = r->total_steps;
    if (w->rank != 0)
        return 0;
    int rc = run_stats_append(r->c->run_dir, row);
    log_info("epoch %d: loss %.4f, train dice %.4f, val dice %.4f, val loss %.4f, "
             "lr %.3g, %.2f s, %.1f samples/s",
             epoch, row->overall_loss, row->train_dice, row->val_dice, row->val_loss_avg, lr,
             row->epoch_duration, samples / row->epoch_duration);
    return rc;
}

/* Epoch `epoch` is complete: the result and the scalars a checkpoint records follow it. */
static void epoch_done(epoch_run *r, const run_stats_row *row, int epoch, double lr) {
    r->out->epochs_run++;
    r->out->last_epoch = epoch;
    r->last_row = *row;
    r->done.epoch = epoch;
    r->done.val_loss_avg = row->val_loss_avg;
    r->done.val_dice = row->val_dice;
    r->done.total_optimizer_steps = r->done.global_step = r->total_steps;
    r->done.lr = lr;
}

/* The epoch's checkpoint, rank 0 writing (the caller agrees on the outcome). */
static int epoch_checkpoint(epoch_run *r, const run_stats_row *row, int epoch, double lr) {
    scaffold_trace_region tr_ck =
        SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_CAPTURE, SCAFFOLD_TRACE_CAT_CHECKPOINT);
    SCAFFOLD_TRACE_REGION_INT(tr_ck, "async", r->c->async_save);
    prof_begin(PROF_CHECKPOINT);
    int rc = save_epoch(r->ck, r->s, r->cs, row, lr);
    prof_end(PROF_CHECKPOINT);
    SCAFFOLD_TRACE_REGION_END(tr_ck);
    r->last_saved = epoch;
    r->done.best_val_loss = r->cs->best_val_loss;
    return rc;
}

/* After the last epoch: the run's figures in `out`, and a final checkpoint if the last epoch was
 * not saved, with the scalars of the epoch actually saved, so a resume sees its Dice (and does
 * not train past convergence). Not after a stop inside an epoch: the model is no longer that
 * epoch's. Returns the agreed outcome. */
static int epoch_loop_finish(epoch_run *r, int rc, double t_train0) {
    const scaffold_config *c = r->c;
    const dist_world *w = r->s->w;
    bench_result *out = r->out;
    out->stop_signal = r->stop;
    out->minibatch_time_s = median_positive(r->med, r->nmed);
    out->total_optimizer_steps = r->total_steps;
    free(r->mb);
    free(r->med);
    prof_begin(PROF_CHECKPOINT);
    if (rc == 0 && !r->stop && c->checkpoint_interval > 0 && out->epochs_run > 0 &&
        r->last_saved != out->last_epoch)
        rc = save_epoch(r->ck, r->s, r->cs, &r->last_row, r->done.lr);
    int frc = w->rank == 0 ? ckpt_finish(r->ck) : 0;
    prof_end(PROF_CHECKPOINT);
    rc = dist_agree(w, rc ? rc : frc);
    out->wall_s = time_now() - t_train0;
    const double wait1 = nn_team_wait_seconds();
    out->cpu_wait = r->wait0 >= 0 && wait1 >= 0 && out->wall_s > 0
                        ? (wait1 - r->wait0) / (out->wall_s * nn_threads())
                        : -1;
    out->samples_per_s = r->seconds_all > 0 ? r->samples_all / r->seconds_all : 0;
    out->val_dice = r->done.val_dice;
    out->converged = r->done.val_dice >= c->target_dice;
    return rc;
}

/* The epoch loop (reference §11.6) from the resumed state `cs` (which may be in the middle of
 * the next epoch), until the target, the epoch cap or a stop signal. */
static int epoch_loop(const scaffold_config *c, train_state *s, ckpt_writer *ck, ckpt_state *cs,
                      parity_log *pl, bench_result *out) {
    const dist_world *w = s->w;
    epoch_run r = {.c = c, .s = s, .ck = ck, .cs = cs, .out = out, .last_saved = cs->epoch,
                   .total_steps = cs->total_optimizer_steps, .done = *cs};
    r.wait0 = nn_team_wait_seconds();
    double t_train0 = time_now();
    int epoch = cs->epoch + 1, rc = 0;
    r.ckpt_on = c->checkpoint_interval > 0 || c->checkpoint_on_signal;
    r.nb = ds_loader_num_batches(s->train);
    long resumed_steps = cs->partial_steps;
    r.done.partial_steps = 0;
    r.done.partial_acc = NULL;
    r.mb = malloc((size_t)(r.nb > 0 ? r.nb : 1) * sizeof *r.mb);
    if (!r.mb)
        rc = err_set(ERR_NOMEM, "out of memory for %lld minibatch times", (long long)r.nb);
    rc = dist_agree(w, rc);
    log_info("training: %lld batches per epoch per replica, target val dice %.3f%s",
             (long long)r.nb, c->target_dice, c->epochs > 0 ? "" : " (no epoch cap)");
    while (rc == 0 && !r.stop && r.done.val_dice < c->target_dice) {
        if (c->epochs != -1 && epoch > c->epochs)
            break;
        double t0 = time_now(), lr = train_lr(c, epoch), samples = 0;
        double acc[3] = {0, 0, 0}, vacc[3] = {0, 0, 0};
        long steps = 0;
        if (resumed_steps > 0) { /* resumed in the middle of this epoch */
            steps = resumed_steps;
            memcpy(acc, cs->partial_acc + 3 * w->rank, sizeof acc);
            t0 -= cs->partial_seconds;
            resumed_steps = 0;
        }
        scaffold_trace_region tr_epoch =
            SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EPOCH, SCAFFOLD_TRACE_CAT_PIPELINE);
        SCAFFOLD_TRACE_REGION_INT(tr_epoch, "epoch", epoch);
        prof_begin(PROF_EPOCH);
        rc = train_epoch(s, epoch, lr, acc, &steps, &r.stop, r.mb, r.nb, pl);
        if (rc == 0 && r.stop && steps < r.nb) {
            rc = epoch_stop_inside(&r, epoch, steps, acc, time_now() - t0, lr);
            SCAFFOLD_TRACE_REGION_END(tr_epoch);
            prof_end(PROF_EPOCH);
            break;
        }
        scaffold_trace_region tr_phase =
            SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EVALUATE, SCAFFOLD_TRACE_CAT_PIPELINE);
        if (rc == 0)
            rc = train_validate(s, epoch, -1, vacc);
        SCAFFOLD_TRACE_REGION_END(tr_phase);
        rc = dist_agree(w, rc);
        if (rc) {
            SCAFFOLD_TRACE_REGION_END(tr_epoch);
            break;
        }
        prof_begin(PROF_EPOCH_STATS);
        /* Every shard of a replica holds the same sums: add the replicas only. */
        run_stats_row row = epoch_row(&s->grid.replicas, epoch, acc, vacc, &samples);
        if (!isfinite(row.overall_loss) || !isfinite(row.val_loss_avg)) {
            rc = err_set(ERR_NUMERIC,
                         "non-finite loss at epoch %d (training %g, validation %g); lower "
                         "starting_learning_rate",
                         epoch, row.overall_loss, row.val_loss_avg);
            break;
        }
        rc = epoch_record(&r, &row, epoch, steps, samples, lr, t0);
        prof_end(PROF_EPOCH_STATS);
        epoch_done(&r, &row, epoch, lr);
        /* A signal during the validation stops here, at the epoch's end. */
        if (!r.stop)
            r.stop = train_stop_poll(w);
        /* Checkpoints: rank 0 writes; the outcome is agreed. */
        if (rc == 0 && ((c->checkpoint_interval > 0 && epoch % c->checkpoint_interval == 0) ||
                        (r.stop && r.ckpt_on)))
            rc = epoch_checkpoint(&r, &row, epoch, lr);
        SCAFFOLD_TRACE_REGION_END(tr_epoch);
        rc = dist_agree(w, rc);
        if (r.stop) {
            out->stop_epoch = epoch;
            out->stop_step = out->stop_steps = r.nb;
            out->stop_saved = r.ckpt_on && rc == 0;
        }
        prof_end(PROF_EPOCH);
        epoch++;
    }
    prof_end(PROF_EPOCH); /* an epoch left by an error */
    return epoch_loop_finish(&r, rc, t_train0);
}

int bench_run(scaffold_config *c, const dist_world *w, int argc, char **argv,
              const parity_opts *po, bench_result *out) {
    memset(out, 0, sizeof *out);
    out->cpu_wait = -1;
    out->minibatch_time_s = NAN;
    ds_layout layout;
    int rc = train_check(c, w, &layout);
    if (rc == 0)
        rc = dist_agree(w, parity_check(po));
    if (rc)
        return rc;
    /* The device before anything is written (device: cuda without a GPU is bad input); its note
     * comes with the model, after the run folder's checks. */
    train_device dev;
    rc = train_device_open(c, &layout, w, &dev);
    if (rc)
        return rc;
    /* Conv3d algorithms by measurement (nn/algo.h; SCAFFOLD_NN_ALGO=rule turns it off): a
     * bad SCAFFOLD_NN_ALGO or pinned file is bad input, reported before the run folder */
    nn_algo_set_mode(NN_ALGO_MODE_MEASURE);
    rc = dist_agree(w, nn_algo_init());
    if (rc) {
        train_device_close(&dev);
        return rc;
    }
    nn_settings_warn();
    if (log_verbosity() >= 2) /* -vv: the engine's settings, once (rank 0: log_info) */
        nn_settings_log();
    /* Run folder first: an unwritable base_run_dir fails before any expensive work. */
    rc = run_folder_setup(c, w, argc, argv);
    if (rc) {
        train_device_close(&dev);
        return rc;
    }
    log_info("run folder: %s", c->run_dir);
    train_state s;
    prof_begin(PROF_SETUP);
    rc = train_setup(c, &layout, w, &dev, &s);
    prof_end(PROF_SETUP);
    if (rc)
        return rc;
    char ckdir[FS_PATH_MAX + 64];
    snprintf(ckdir, sizeof ckdir, "%s/%s", c->run_dir, c->checkpoint_dir);
    ckpt_state cs;
    prof_begin(PROF_CLEANUP_OR_RESUME);
    rc = resume_or_clean(c, &s, ckdir, &cs);
    prof_end(PROF_CLEANUP_OR_RESUME);
    /* From here on SIGTERM, SIGINT and SIGUSR1 stop the run at a step boundary (stop.h). */
    train_stop_install();
    if (rc == 0)
        rc = parity_save_initial(po, &s, cs.epoch);
    parity_log pl;
    memset(&pl, 0, sizeof pl);
    if (rc == 0)
        rc = parity_log_open(&pl, po, &s, cs.epoch + 1);
    prof_begin(PROF_WARMUP);
    if (rc == 0)
        rc = train_warmup(&s);
    prof_end(PROF_WARMUP);
    out->stop_signal = s.stop;
    out->last_epoch = cs.epoch;
    if (rc == 0 && !s.stop)
        algo_report(c, w, "the warmup", 0);
    if (rc == 0 && !s.stop) {
        ckpt_writer ck;
        ckpt_writer_init(&ck, ckdir, c->async_save);
        rc = epoch_loop(c, &s, &ck, &cs, &pl, out);
        out->ckpt_bytes = ck.bytes_written;
        out->ckpt_s = ck.seconds;
        out->loader_wait_s = ds_loader_wait_seconds(s.train);
        ckpt_writer_free(&ck);
    }
    /* Peak resident memory of every rank (ru_maxrss is in KiB on Linux). */
    struct rusage ru;
    double gib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1048576.0 : 0;
    out->rss_max_gib = dist_max_double(w, gib);
    out->rss_min_gib = -dist_max_double(w, -gib);
    out->cpu_wait = dist_max_double(w, out->cpu_wait);
    if (w->rank == 0 && rc == 0)
        finish_run(c, out);
    train_stop_uninstall();
    free(cs.partial_acc);
    parity_log_free(&pl);
    train_state_free(&s);
    return rc;
}
