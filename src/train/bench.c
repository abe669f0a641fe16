/* bench: the benchmark driver (see bench.h). */
#include "train/bench.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "dataset/dataset.h"
#include "fractal/library.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/unet.h"
#include "train/ckpt.h"
#include "train/memsource.h"
#include "train/plot.h"
#include "train/runfolder.h"

#include <scaffold/trace.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Everything one training run holds; freed by bench_state_free. */
typedef struct bench_state {
    dataset *ds;
    ds_loader *train, *val;
    nn_unet model;
    nn_optim opt;
    float *ce_w;      /* n_classes */
    float *dice_buf;  /* local_batch_size */
    memsource mem;     /* data_store: memory */
    int replicas, replica;
    MPI_Comm comm;     /* the data-parallel group */
    double grad_scale; /* 1 / replicas */
} bench_state;

static void bench_state_free(bench_state *s) {
    ds_loader_destroy(s->train);
    ds_loader_destroy(s->val);
    memsource_free(&s->mem);
    dataset_close(s->ds);
    nn_unet_free(&s->model);
    nn_optim_free(&s->opt);
    free(s->ce_w);
    free(s->dice_buf);
}

/* CE class weights (reference §11.4): label counts over the sampled training masks, split over
 * the ranks and summed, so the weights do not depend on the rank count. */
static int compute_ce_weights(const scaffold_config *c, const dist_world *w, bench_state *s) {
    int K = c->n_categories + 1;
    int64_t n_train = s->ds->n[DS_TRAIN];
    int64_t *idx = malloc((size_t)(n_train > 0 ? n_train : 1) * sizeof *idx);
    uint64_t *counts = calloc((size_t)K, sizeof *counts);
    uint16_t *mask = malloc(s->ds->mask_elems * sizeof *mask);
    float *vol = malloc(s->ds->vol_elems * sizeof *vol);
    int rc = idx && counts && mask && vol ? 0 : err_set(ERR_NOMEM, "out of memory");
    int64_t k = rc ? 0 : dataset_ce_indices(n_train, c->ce_weight_sample_fraction, idx);
    size_t lo, hi;
    dist_block(w, (size_t)k, &lo, &hi);
    for (size_t i = lo; i < hi && rc == 0; i++) {
        rc = dataset_read_sample(s->ds, DS_TRAIN, idx[i], vol, mask);
        if (rc == 0)
            rc = nn_label_counts(counts, mask, s->ds->mask_elems, K);
    }
    rc = dist_agree(w, rc);
    if (rc == 0) {
        MPI_Allreduce(MPI_IN_PLACE, counts, K, MPI_UINT64_T, MPI_SUM, w->comm);
        nn_ce_class_weights(s->ce_w, counts, K);
        log_info("CE class weights from %lld sampled masks: background %.4g, foreground %.4g",
                 (long long)k, (double)s->ce_w[0], K > 1 ? (double)s->ce_w[1] : 0.0);
    }
    free(idx);
    free(counts);
    free(mask);
    free(vol);
    return rc;
}

/* One optimizer step on the next batch; accumulates loss*bs, dice*bs, bs. Returns 1 with a
 * step, 0 at the end of the epoch, or an error. */
static int train_step(bench_state *s, const dist_world *w, double lr, double acc[3]) {
    int n = 0;
    const float *vol = NULL;
    const uint16_t *mask = NULL;
    scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FETCH,
                                                           SCAFFOLD_TRACE_CAT_DATALOADER);
    /* In place: copying a batch out of the prefetch slot costs as much as reading it. */
    int got = ds_loader_next_ref(s->train, &vol, &mask, &n);
    SCAFFOLD_TRACE_REGION_INT(tr, "batch_size", n);
    SCAFFOLD_TRACE_REGION_END(tr);
    /* Every replica has the same number of batches (padded sampler), so 0 is seen everywhere
     * at once; an error on one rank must be agreed before the gradient all-reduce, or the
     * others would wait in it forever. */
    if (got == 0)
        return 0;
    double loss = 0, dice = 0;
    int rc = got < 0 ? got : 0;
    /* Test hook: SCAFFOLD_FAULT_FAIL_STEP=R:K makes rank R fail its K-th training step as a
     * read error would, to check that the other ranks do not hang in the all-reduce. */
    static long steps_seen;
    const char *ff = getenv("SCAFFOLD_FAULT_FAIL_STEP");
    int fr = -1;
    long fk = -1;
    if (ff && sscanf(ff, "%d:%ld", &fr, &fk) == 2 && fr == w->rank && ++steps_seen == fk)
        rc = err_set(ERR_IO, "injected read failure at training step %ld on rank %d", fk, fr);
    if (rc == 0) {
        nn_unet_zero_grad(&s->model);
        /* One region for the fused forward + loss + backward pass of the engine. */
        tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FORWARD, SCAFFOLD_TRACE_CAT_COMPUTE);
        SCAFFOLD_TRACE_REGION_STR(tr, "pass", "forward+loss+backward");
        rc = nn_unet_forward_backward(&s->model, vol, mask, n, s->ce_w, &loss, &dice);
        SCAFFOLD_TRACE_REGION_END(tr);
    }
    if (s->replicas > 1)
        rc = dist_agree(w, rc);
    if (rc)
        return rc;
    tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_ALL_REDUCE, SCAFFOLD_TRACE_CAT_COMM);
    if (s->replicas > 1) {
        /* DDP: gradients averaged over replicas. */
        MPI_Allreduce(MPI_IN_PLACE, s->model.grads, (int)s->model.nparams, MPI_FLOAT, MPI_SUM,
                      s->comm);
        float sc = (float)s->grad_scale;
        for (size_t i = 0; i < s->model.nparams; i++)
            s->model.grads[i] *= sc;
    }
    SCAFFOLD_TRACE_REGION_INT(tr, "bytes", (int64_t)(s->model.nparams * sizeof(float)));
    SCAFFOLD_TRACE_REGION_END(tr);
    tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_STEP, SCAFFOLD_TRACE_CAT_COMPUTE);
    nn_clip_grad_norm(s->model.grads, s->model.nparams, 1.0);
    nn_optim_step(&s->opt, s->model.params, s->model.grads, lr);
    SCAFFOLD_TRACE_REGION_END(tr);
    acc[0] += loss * n;
    acc[1] += dice * n;
    acc[2] += n;
    return 1;
}

/* Validation over this rank's contiguous share: sums of per-sample hard Dice and loss*bs. */
static int validate(bench_state *s, int64_t epoch, int max_batches, double acc[3]) {
    int rc = ds_loader_start_epoch(s->val, epoch);
    for (int b = 0; rc == 0 && (max_batches < 0 || b < max_batches); b++) {
        int n = 0;
        const float *vol = NULL;
        const uint16_t *mask = NULL;
        scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FETCH,
                                                               SCAFFOLD_TRACE_CAT_DATALOADER);
        int got = ds_loader_next_ref(s->val, &vol, &mask, &n);
        SCAFFOLD_TRACE_REGION_END(tr);
        if (got < 0)
            rc = got;
        if (got <= 0)
            break;
        double loss = 0;
        tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FORWARD, SCAFFOLD_TRACE_CAT_COMPUTE);
        rc = nn_unet_evaluate(&s->model, vol, mask, n, s->ce_w, &loss, s->dice_buf);
        SCAFFOLD_TRACE_REGION_END(tr);
        for (int i = 0; i < n && rc == 0; i++)
            acc[0] += s->dice_buf[i];
        acc[1] += loss * n;
        acc[2] += n;
    }
    return rc;
}

static double lr_for_epoch(const scaffold_config *c, int epoch) {
    if (c->disable_scheduler)
        return c->starting_learning_rate;
    return nn_lr_cosine_warm(c->starting_learning_rate, c->T_0, c->T_mult, c->min_learning_rate,
                             epoch - 1);
}

/* Untimed warmup (reference §11.7): real steps and validation batches, then the model and the
 * optimizer are restored. */
static int warmup(const scaffold_config *c, const dist_world *w, bench_state *s) {
    if (c->warmup_batches <= 0)
        return 0;
    size_t np = s->model.nparams, ns = nn_optim_state_floats(s->opt.kind, np);
    float *p = malloc(np * sizeof *p), *st = malloc((ns ? ns : 1) * sizeof *st);
    int rc = p && st ? 0 : err_set(ERR_NOMEM, "out of memory for the warmup snapshot");
    rc = dist_agree(w, rc);
    if (rc) {
        free(p);
        free(st);
        return rc;
    }
    memcpy(p, s->model.params, np * sizeof *p);
    if (ns)
        memcpy(st, s->opt.state, ns * sizeof *st);
    int64_t step0 = s->opt.step;
    double t0 = time_now(), acc[3] = {0, 0, 0}, vacc[3] = {0, 0, 0};
    int64_t nb = ds_loader_num_batches(s->train);
    int steps = c->warmup_batches < nb ? c->warmup_batches : (int)nb;
    rc = ds_loader_start_epoch(s->train, 0);
    for (int i = 0; i < steps && rc == 0; i++) {
        int r = train_step(s, w, c->starting_learning_rate, acc);
        if (r < 0)
            rc = r;
        if (r == 0)
            break;
    }
    if (rc == 0)
        rc = validate(s, 0, c->warmup_batches, vacc);
    rc = dist_agree(w, rc);
    memcpy(s->model.params, p, np * sizeof *p);
    if (ns)
        memcpy(s->opt.state, st, ns * sizeof *st);
    s->opt.step = step0;
    free(p);
    free(st);
    dist_barrier(w);
    if (rc == 0)
        log_info("warmup: %d training and up to %d validation batches per rank in %.2f s "
                 "(untimed; state restored)", steps, c->warmup_batches, time_now() - t0);
    return rc;
}

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

static int setup(scaffold_config *c, const dist_world *w, bench_state *s) {
    int T = 1;
    for (int i = 0; i < c->dc_num_shards.n; i++)
        T *= c->dc_num_shards.v[i];
    if (w->size % T != 0)
        return err_set(ERR_CONFIG,
                       "world size %d is not divisible by the number of spatial shards %d "
                       "(dc_num_shards); run on a multiple of %d ranks or change dc_num_shards",
                       w->size, T, T);
    if (T > 1)
        return err_set(ERR_CONFIG, "dc_num_shards with more than one shard (spatial "
                                   "parallelism) is not supported by scaffold benchmark yet; "
                                   "use [1, 1, 1] (the dataset generator supports shards)");
    if (c->restart && !c->run_dir[0])
        return err_set(ERR_USAGE, "--restart needs --run-dir DIR (the run folder to resume)");
    s->replicas = w->size / T;
    s->replica = w->rank / T;
    s->grad_scale = 1.0 / s->replicas;
    s->comm = w->comm;
    return 0;
}

int bench_run(scaffold_config *c, const dist_world *w, int argc, char **argv, bench_result *out) {
    bench_state s;
    memset(&s, 0, sizeof s);
    memset(out, 0, sizeof *out);
    int rc = dist_agree(w, setup(c, w, &s));
    if (rc)
        return rc;
    /* Run folder first: an unwritable base_run_dir fails before any expensive work. */
    rc = run_folder_setup(c, w, argc, argv);
    if (rc)
        return rc;
    log_info("run folder: %s", c->run_dir);
    /* The fractal library and the dataset, reused when present (not part of the FOM). */
    fractal_summary fs;
    rc = fractal_generate(c, w, &fs);
    if (rc)
        return rc;
    if (fs.instances_new || fs.classes_new)
        log_info("fractals: %d new classes, %ld new instances in %.2f s", fs.classes_new,
                 fs.instances_new, fs.class_seconds + fs.instance_seconds);
    char dsdir[FS_PATH_MAX];
    dataset_prep_info pi;
    rc = dataset_prepare(c, w, dsdir, sizeof dsdir, &pi);
    if (rc)
        return rc;
    log_info("dataset %s: %s (%d volumes)", pi.config_id, pi.reused ? "reused" : "generated",
             pi.num_volumes);
    rc = dataset_open_world(dsdir, c, w, &s.ds);
    if (rc)
        return rc;
    int64_t n_train = s.ds->n[DS_TRAIN], n_val = s.ds->n[DS_VAL];
    long global_batch = (long)c->local_batch_size * s.replicas;
    if (global_batch > n_train || global_batch > n_val) {
        rc = err_set(ERR_CONFIG,
                     "global batch size %ld (local_batch_size %d x %d replicas) exceeds the %s "
                     "set (%lld samples); lower local_batch_size or the rank count, or raise "
                     "n_instances_used_per_fractal",
                     global_batch, c->local_batch_size, s.replicas,
                     global_batch > n_train ? "training" : "validation",
                     (long long)(global_batch > n_train ? n_train : n_val));
        bench_state_free(&s);
        return dist_agree(w, rc);
    }
    /* Model, optimizer, buffers, loaders. */
    nn_unet_spec spec = {3, c->n_categories + 1, c->unet_layers, c->unet_base_channels,
                         c->group_norm_groups};
    int B = c->local_batch_size;
    rc = nn_unet_spec_check(&spec, (int)s.ds->ext[0], (int)s.ds->ext[1], (int)s.ds->ext[2]);
    if (rc == 0)
        rc = nn_unet_create(&s.model, &spec, B, (int)s.ds->ext[0], (int)s.ds->ext[1],
                            (int)s.ds->ext[2]);
    nn_optim_kind kind = config_optimizer(c) == CFG_OPT_SGD       ? NN_OPT_SGD
                         : config_optimizer(c) == CFG_OPT_RMSPROP ? NN_OPT_RMSPROP
                                                                  : NN_OPT_ADAM;
    if (rc == 0)
        rc = nn_optim_init(&s.opt, kind, s.model.nparams);
    s.ce_w = malloc((size_t)spec.n_classes * sizeof *s.ce_w);
    s.dice_buf = malloc((size_t)B * sizeof *s.dice_buf);
    if (rc == 0 && (!s.ce_w || !s.dice_buf))
        rc = err_set(ERR_NOMEM, "out of memory for batch buffers");
    int use_mem = !strcmp(c->data_store, "memory");
    rc = dist_agree(w, rc);
    if (rc == 0 && use_mem)
        rc = memsource_load(&s.mem, s.ds, w);
    if (rc == 0) {
        ds_source src = use_mem ? memsource_source(&s.mem) : dataset_file_source(s.ds);
        ds_loader_opts lo = {src, DS_TRAIN, n_train, B, s.replicas,
                             s.replica, (uint64_t)c->seed, c->dataloader_num_workers, 0};
        rc = ds_loader_create(&s.train, &lo);
        lo.split = DS_VAL;
        lo.n = n_val;
        if (rc == 0)
            rc = ds_loader_create(&s.val, &lo);
    }
    rc = dist_agree(w, rc);
    if (rc) {
        bench_state_free(&s);
        return rc;
    }
    nn_unet_init_params(&s.model, (uint64_t)c->seed);
    log_info("model: U-Net with %d levels, base %d channels, %zu parameters (%.1f MiB); %s; "
             "%d replica(s) x batch %d; %lld training / %lld validation samples",
             spec.layers, spec.base_channels, s.model.nparams,
             s.model.nparams * 4.0 / 1048576.0, nn_optim_name(kind), s.replicas, B,
             (long long)n_train, (long long)n_val);
    rc = compute_ce_weights(c, w, &s);
    /* Resume or start fresh. */
    ckpt_state cs = {0, 0, 0, INFINITY, 0, 0, c->starting_learning_rate};
    int start_epoch = 1;
    double start_dice = 0;
    char ckdir[FS_PATH_MAX + 64];
    snprintf(ckdir, sizeof ckdir, "%s/%s", c->run_dir, c->checkpoint_dir);
    if (rc == 0 && (c->restart || !c->train_from_scratch)) {
        const char *which = "";
        int lr_ = 0;
        if (w->rank == 0) {
            lr_ = ckpt_load(ckdir, &s.model, &s.opt, &cs, &which);
            if (lr_ == ERR_NOTFOUND && !c->restart) {
                log_info("train_from_scratch is 0 but there is no checkpoint: starting fresh");
                lr_ = 1; /* start fresh */
                err_clear();
            }
        }
        rc = dist_agree(w, lr_ < 0 ? lr_ : 0);
        dist_bcast(w, &lr_, sizeof lr_, 0);
        if (rc == 0 && lr_ == 0) {
            dist_bcast(w, s.model.params, s.model.nparams * sizeof(float), 0);
            size_t ns = nn_optim_state_floats(kind, s.model.nparams);
            if (ns)
                dist_bcast(w, s.opt.state, ns * sizeof(float), 0);
            dist_bcast(w, &s.opt.step, sizeof s.opt.step, 0);
            dist_bcast(w, &cs, sizeof cs, 0);
            start_epoch = cs.epoch + 1;
            start_dice = cs.val_dice;
            if (w->rank == 0) {
                rc = run_stats_truncate(c->run_dir, start_epoch);
                log_info("resumed from checkpoint_%s: epoch %d done (val dice %.4f)", which,
                         cs.epoch, cs.val_dice);
            }
            rc = dist_agree(w, rc);
        }
    } else if (rc == 0 && w->rank == 0) {
        rc = run_folder_clean(c);
    }
    rc = dist_agree(w, rc);
    if (rc == 0)
        rc = warmup(c, w, &s);
    if (rc) {
        bench_state_free(&s);
        return rc;
    }
    /* The epoch loop (reference §11.6). */
    ckpt_writer ck;
    ckpt_writer_init(&ck, ckdir, c->async_save);
    double dice = start_dice, t_train0 = time_now();
    int epoch = start_epoch, last_saved = cs.epoch;
    long total_steps = cs.total_optimizer_steps;
    run_stats_row last_row;
    memset(&last_row, 0, sizeof last_row);
    double last_lr = c->starting_learning_rate;
    int64_t nb = ds_loader_num_batches(s.train);
    log_info("training: %lld batches per epoch per replica, target val dice %.3f%s",
             (long long)nb, c->target_dice, c->epochs > 0 ? "" : " (no epoch cap)");
    while (rc == 0 && dice < c->target_dice) {
        if (c->epochs != -1 && epoch > c->epochs)
            break;
        double t0 = time_now(), lr = lr_for_epoch(c, epoch);
        double acc[3] = {0, 0, 0}, vacc[3] = {0, 0, 0};
        long steps = 0;
        scaffold_trace_region tr_epoch =
            SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EPOCH, SCAFFOLD_TRACE_CAT_PIPELINE);
        SCAFFOLD_TRACE_REGION_INT(tr_epoch, "epoch", epoch);
        scaffold_trace_region tr_phase =
            SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_TRAIN, SCAFFOLD_TRACE_CAT_PIPELINE);
        rc = ds_loader_start_epoch(s.train, epoch);
        /* Test hook: SCAFFOLD_FAULT_KILL_AT_EPOCH=E kills rank 0 after the first step of epoch E
         * (a node failure in the middle of an epoch). */
        const char *fk = getenv("SCAFFOLD_FAULT_KILL_AT_EPOCH");
        int kill_here = fk && atoi(fk) == epoch && w->rank == 0;
        for (;;) {
            if (kill_here && steps == 1)
                raise(SIGKILL);
            int r = rc ? rc : train_step(&s, w, lr, acc);
            if (r <= 0) {
                rc = r;
                break;
            }
            steps++;
        }
        SCAFFOLD_TRACE_REGION_INT(tr_phase, "steps", steps);
        SCAFFOLD_TRACE_REGION_END(tr_phase);
        tr_phase = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EVALUATE, SCAFFOLD_TRACE_CAT_PIPELINE);
        if (rc == 0)
            rc = validate(&s, epoch, -1, vacc);
        SCAFFOLD_TRACE_REGION_END(tr_phase);
        rc = dist_agree(w, rc);
        if (rc) {
            SCAFFOLD_TRACE_REGION_END(tr_epoch);
            break;
        }
        double sums[6] = {acc[0], acc[1], acc[2], vacc[0], vacc[1], vacc[2]};
        MPI_Allreduce(MPI_IN_PLACE, sums, 6, MPI_DOUBLE, MPI_SUM, w->comm);
        run_stats_row row;
        row.epoch = epoch;
        row.epoch_loss = sums[0];
        row.overall_loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
        row.train_dice = sums[2] > 0 ? sums[1] / sums[2] : NAN;
        row.val_dice = sums[5] > 0 ? sums[3] / sums[5] : NAN;
        row.val_loss_epoch = sums[4];
        row.val_loss_avg = sums[5] > 0 ? sums[4] / sums[5] : NAN;
        if (!isfinite(row.overall_loss) || !isfinite(row.val_loss_avg)) {
            rc = err_set(ERR_NUMERIC,
                         "non-finite loss at epoch %d (training %g, validation %g); lower "
                         "starting_learning_rate",
                         epoch, row.overall_loss, row.val_loss_avg);
            break;
        }
        row.epoch_duration = dist_max_double(w, time_now() - t0);
        row.optimizer_steps = steps;
        total_steps += steps;
        row.total_optimizer_steps = total_steps;
        if (w->rank == 0) {
            rc = run_stats_append(c->run_dir, &row);
            log_info("epoch %d: loss %.4f, train dice %.4f, val dice %.4f, val loss %.4f, "
                     "lr %.3g, %.2f s, %.1f samples/s",
                     epoch, row.overall_loss, row.train_dice, row.val_dice, row.val_loss_avg, lr,
                     row.epoch_duration, sums[2] / row.epoch_duration);
        }
        out->epochs_run++;
        out->last_epoch = epoch;
        last_row = row;
        last_lr = lr;
        dice = row.val_dice;
        /* Checkpoints: rank 0 writes; the outcome is agreed. */
        if (rc == 0 && c->checkpoint_interval > 0 && epoch % c->checkpoint_interval == 0) {
            int best = row.val_loss_avg < cs.best_val_loss;
            if (best)
                cs.best_val_loss = row.val_loss_avg;
            cs.epoch = epoch;
            cs.val_loss_avg = row.val_loss_avg;
            cs.val_dice = row.val_dice;
            cs.total_optimizer_steps = total_steps;
            cs.global_step = total_steps;
            cs.lr = lr;
            scaffold_trace_region tr_ck =
                SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_CAPTURE, SCAFFOLD_TRACE_CAT_CHECKPOINT);
            SCAFFOLD_TRACE_REGION_INT(tr_ck, "async", c->async_save);
            if (w->rank == 0)
                rc = ckpt_save(&ck, &s.model, &s.opt, &cs, best);
            SCAFFOLD_TRACE_REGION_END(tr_ck);
            last_saved = epoch;
        }
        SCAFFOLD_TRACE_REGION_END(tr_epoch);
        rc = dist_agree(w, rc);
        epoch++;
    }
    /* A final checkpoint if the last epoch was not saved. */
    if (rc == 0 && c->checkpoint_interval > 0 && out->epochs_run > 0 &&
        last_saved != out->last_epoch) {
        /* The scalars of the epoch actually saved, so a resume sees its Dice (and does not
         * train past convergence); `best` follows the same rule as the periodic saves. */
        int best = last_row.val_loss_avg < cs.best_val_loss;
        if (best)
            cs.best_val_loss = last_row.val_loss_avg;
        cs.epoch = out->last_epoch;
        cs.val_loss_avg = last_row.val_loss_avg;
        cs.val_dice = last_row.val_dice;
        cs.lr = last_lr;
        cs.total_optimizer_steps = cs.global_step = total_steps;
        if (w->rank == 0)
            rc = ckpt_save(&ck, &s.model, &s.opt, &cs, best);
    }
    int frc = w->rank == 0 ? ckpt_finish(&ck) : 0;
    rc = dist_agree(w, rc ? rc : frc);
    out->wall_s = time_now() - t_train0;
    out->ckpt_bytes = ck.bytes_written;
    out->ckpt_s = ck.seconds;
    out->loader_wait_s = ds_loader_wait_seconds(s.train);
    out->val_dice = dice;
    out->converged = dice >= c->target_dice;
    ckpt_writer_free(&ck);
    if (w->rank == 0 && rc == 0) {
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
    bench_state_free(&s);
    return rc;
}
