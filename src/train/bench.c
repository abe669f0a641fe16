/* bench: the benchmark driver (see bench.h): setup, resume, warmup, then the epoch loop with its
 * statistics, checkpoints, figures and the figure of merit. The pieces below the loop are in
 * train.h (setup.c, step.c) and ckpt.h. */
#include "train/bench.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "train/ckpt.h"
#include "train/plot.h"
#include "train/runfolder.h"
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
        free(x);
        free(y);
        free(rows);
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
    free(x);
    free(y);
    free(rows);
}

/* Resume from the run folder's checkpoint (restart or train_from_scratch 0) or clean it.
 * Sets the checkpoint scalars (epoch 0 when fresh). Agreed result. */
static int resume_or_clean(const scaffold_config *c, train_state *s, const char *ckdir,
                           ckpt_state *cs) {
    const dist_world *w = s->w;
    *cs = (ckpt_state){0, 0, 0, INFINITY, 0, 0, c->starting_learning_rate};
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

/* Progress inside an epoch (at scale 7 a CPU step takes many seconds and an epoch hours): one
 * line on rank 0 at most every SCAFFOLD_PROGRESS_SECONDS (default 10) seconds, so small
 * configurations, whose epochs are shorter than that, print none. */
typedef struct progress {
    double t0, last, every;
    int64_t total;     /* steps in the epoch */
    double per_step;   /* samples per step over all replicas */
} progress;

static progress progress_start(const train_state *s) {
    const char *e = getenv("SCAFFOLD_PROGRESS_SECONDS");
    double now = time_now();
    progress p = {now, now, e && *e ? atof(e) : 10.0, ds_loader_num_batches(s->train),
                  (double)s->cfg->local_batch_size * s->replicas};
    return p;
}

static void progress_step(progress *p, int epoch, long done) {
    double now = time_now();
    if (now - p->last < p->every || done >= p->total)
        return;
    p->last = now;
    double el = now - p->t0, eta = el / done * (double)(p->total - done);
    log_info("epoch %d: step %ld/%lld, %.2f samples/s, %.1f s elapsed, training ETA %.0f s",
             epoch, done, (long long)p->total, done * p->per_step / el, el, eta);
}

/* The training phase of one epoch: every batch of this replica's share (recorded in `pl` when
 * sample_order.csv is asked for). Agreed result. */
static int train_epoch(train_state *s, int epoch, double lr, double acc[3], long *steps,
                       parity_log *pl) {
    const dist_world *w = s->w;
    progress pr = progress_start(s);
    scaffold_trace_region tr =
        SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_TRAIN, SCAFFOLD_TRACE_CAT_PIPELINE);
    int rc = ds_loader_start_epoch(s->train, epoch);
    if (rc == 0)
        rc = parity_log_epoch(pl, s, epoch);
    for (;;) {
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
        (*steps)++;
        progress_step(&pr, epoch, *steps);
    }
    if (rc == 0)
        rc = parity_log_flush(pl, s);
    SCAFFOLD_TRACE_REGION_INT(tr, "steps", *steps);
    SCAFFOLD_TRACE_REGION_END(tr);
    return rc;
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
    int rc = nn_unet_download(&s->model, &s->opt);
    return rc ? rc : ckpt_save(ck, &s->model, &s->opt, cs, best);
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
    make_figures(c);
}

/* The epoch loop (reference §11.6) from the resumed state `cs`. */
static int epoch_loop(const scaffold_config *c, train_state *s, ckpt_writer *ck, ckpt_state *cs,
                      parity_log *pl, bench_result *out) {
    const dist_world *w = s->w;
    double dice = cs->val_dice, t_train0 = time_now(), last_lr = c->starting_learning_rate;
    int epoch = cs->epoch + 1, last_saved = cs->epoch, rc = 0;
    double samples_all = 0, seconds_all = 0;
    long total_steps = cs->total_optimizer_steps;
    run_stats_row last_row;
    memset(&last_row, 0, sizeof last_row);
    log_info("training: %lld batches per epoch per replica, target val dice %.3f%s",
             (long long)ds_loader_num_batches(s->train), c->target_dice,
             c->epochs > 0 ? "" : " (no epoch cap)");
    while (rc == 0 && dice < c->target_dice) {
        if (c->epochs != -1 && epoch > c->epochs)
            break;
        double t0 = time_now(), lr = train_lr(c, epoch), samples = 0;
        double acc[3] = {0, 0, 0}, vacc[3] = {0, 0, 0};
        long steps = 0;
        scaffold_trace_region tr_epoch =
            SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EPOCH, SCAFFOLD_TRACE_CAT_PIPELINE);
        SCAFFOLD_TRACE_REGION_INT(tr_epoch, "epoch", epoch);
        rc = train_epoch(s, epoch, lr, acc, &steps, pl);
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
        /* Every shard of a replica holds the same sums: add the replicas only. */
        run_stats_row row = epoch_row(&s->grid.replicas, epoch, acc, vacc, &samples);
        if (!isfinite(row.overall_loss) || !isfinite(row.val_loss_avg)) {
            rc = err_set(ERR_NUMERIC,
                         "non-finite loss at epoch %d (training %g, validation %g); lower "
                         "starting_learning_rate",
                         epoch, row.overall_loss, row.val_loss_avg);
            break;
        }
        row.epoch_duration = dist_max_double(w, time_now() - t0);
        row.optimizer_steps = steps;
        samples_all += samples;
        seconds_all += row.epoch_duration;
        total_steps += steps;
        row.total_optimizer_steps = total_steps;
        if (w->rank == 0) {
            rc = run_stats_append(c->run_dir, &row);
            log_info("epoch %d: loss %.4f, train dice %.4f, val dice %.4f, val loss %.4f, "
                     "lr %.3g, %.2f s, %.1f samples/s",
                     epoch, row.overall_loss, row.train_dice, row.val_dice, row.val_loss_avg, lr,
                     row.epoch_duration, samples / row.epoch_duration);
        }
        out->epochs_run++;
        out->last_epoch = epoch;
        last_row = row;
        last_lr = lr;
        dice = row.val_dice;
        /* Checkpoints: rank 0 writes; the outcome is agreed. */
        if (rc == 0 && c->checkpoint_interval > 0 && epoch % c->checkpoint_interval == 0) {
            scaffold_trace_region tr_ck =
                SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_CAPTURE, SCAFFOLD_TRACE_CAT_CHECKPOINT);
            SCAFFOLD_TRACE_REGION_INT(tr_ck, "async", c->async_save);
            rc = save_epoch(ck, s, cs, &row, lr);
            SCAFFOLD_TRACE_REGION_END(tr_ck);
            last_saved = epoch;
        }
        SCAFFOLD_TRACE_REGION_END(tr_epoch);
        rc = dist_agree(w, rc);
        epoch++;
    }
    /* A final checkpoint if the last epoch was not saved, with the scalars of the epoch actually
     * saved, so a resume sees its Dice (and does not train past convergence). */
    if (rc == 0 && c->checkpoint_interval > 0 && out->epochs_run > 0 &&
        last_saved != out->last_epoch)
        rc = save_epoch(ck, s, cs, &last_row, last_lr);
    int frc = w->rank == 0 ? ckpt_finish(ck) : 0;
    rc = dist_agree(w, rc ? rc : frc);
    out->wall_s = time_now() - t_train0;
    out->samples_per_s = seconds_all > 0 ? samples_all / seconds_all : 0;
    out->val_dice = dice;
    out->converged = dice >= c->target_dice;
    return rc;
}

int bench_run(scaffold_config *c, const dist_world *w, int argc, char **argv,
              const parity_opts *po, bench_result *out) {
    memset(out, 0, sizeof *out);
    int rc = train_check(c, w);
    if (rc == 0)
        rc = dist_agree(w, parity_check(po));
    if (rc)
        return rc;
    /* The device before anything is written (device: cuda without a GPU is bad input); its note
     * comes with the model, after the run folder's checks. */
    train_device dev;
    rc = train_device_open(c, w, &dev);
    if (rc)
        return rc;
    /* Run folder first: an unwritable base_run_dir fails before any expensive work. */
    rc = run_folder_setup(c, w, argc, argv);
    if (rc) {
        train_device_close(&dev);
        return rc;
    }
    log_info("run folder: %s", c->run_dir);
    train_state s;
    rc = train_setup(c, w, &dev, &s);
    if (rc)
        return rc;
    char ckdir[FS_PATH_MAX + 64];
    snprintf(ckdir, sizeof ckdir, "%s/%s", c->run_dir, c->checkpoint_dir);
    ckpt_state cs;
    rc = resume_or_clean(c, &s, ckdir, &cs);
    if (rc == 0)
        rc = parity_save_initial(po, &s, cs.epoch);
    parity_log pl;
    memset(&pl, 0, sizeof pl);
    if (rc == 0)
        rc = parity_log_open(&pl, po, &s, cs.epoch + 1);
    if (rc == 0)
        rc = train_warmup(&s);
    if (rc == 0) {
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
    if (w->rank == 0 && rc == 0)
        finish_run(c, out);
    parity_log_free(&pl);
    train_state_free(&s);
    return rc;
}
