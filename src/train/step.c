/* step: one training step, one validation pass, the untimed warmup and the learning-rate
 * schedule (see train.h). */
#include "train/train.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/prof.h"
#include "nn/loss.h"
#include "train/stop.h"

#include <scaffold/trace.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A read error on one rank (fault point FAIL_STEP): the others must not hang in the
 * all-reduce. */
static int fault_fail_step(int rank) {
    if (fault_hit(FAULT_FAIL_STEP, rank))
        return err_set(ERR_IO, "injected read failure at training step %ld on rank %d",
                       fault_arg(FAULT_FAIL_STEP, 1), rank);
    return 0;
}

/* The next batch of l, in place (copying a batch out of the prefetch slot costs as much as
 * reading it), inside a traced fetch region that states the samples and bytes handed over,
 * whatever tier served them (compare's unit of work). ds_loader_next_ref's return. */
static int fetch(const train_state *s, ds_loader *l, const float **vol, const uint16_t **mask,
                 int *n) {
    scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FETCH,
                                                           SCAFFOLD_TRACE_CAT_DATALOADER);
    prof_begin(PROF_LOADER_WAIT);
    int got = ds_loader_next_ref(l, vol, mask, n);
    prof_end(PROF_LOADER_WAIT);
    SCAFFOLD_TRACE_REGION_INT(tr, "batch_size", *n);
    size_t sample = s->ds->vol_elems * sizeof(float) + s->ds->mask_elems * sizeof(uint16_t);
    SCAFFOLD_TRACE_REGION_INT(tr, "bytes", (int64_t)*n * (int64_t)sample);
    SCAFFOLD_TRACE_REGION_END(tr);
    return got;
}

int train_step(train_state *s, double lr, double acc[3]) {
    int n = 0;
    const float *vol = NULL;
    const uint16_t *mask = NULL;
    /* Fault point SKIP_BATCHES (a do-less knob for the tuner's tests): drop every K-th batch. */
    static long seen;
    long skip = fault_arg(FAULT_SKIP_BATCHES, 0);
    if (skip > 0 && ++seen % skip == 0 && ds_loader_next_ref(s->train, &vol, &mask, &n) == 0)
        return 0;
    int got = fetch(s, s->train, &vol, &mask, &n);
    /* Every replica has the same number of batches (padded sampler), so 0 is seen everywhere
     * at once; an error on one rank must be agreed before the gradient all-reduce, or the
     * others would wait in it forever. */
    if (got == 0)
        return 0;
    prof_begin(PROF_MINIBATCH);
    const double t_mb = time_now();
    double loss = 0, dice = 0;
    int rc = got < 0 ? got : fault_fail_step(s->w->rank);
    /* A read error on one rank is agreed before any collective of the step (halo exchanges,
     * GroupNorm and loss sums, gradient buckets), or the others would wait in it forever. */
    if (s->w->size > 1)
        rc = dist_agree(s->w, rc);
    if (rc)
        return rc;
    nn_unet_zero_grad(&s->model);
    train_grad_begin(s);
    /* One region for the fused forward + loss + backward pass of the engine; the gradient
     * buckets start inside it as the backward pass finishes them. */
    scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FORWARD,
                                                           SCAFFOLD_TRACE_CAT_COMPUTE);
    SCAFFOLD_TRACE_REGION_STR(tr, "pass", "forward+loss+backward");
    rc = nn_unet_forward_backward(&s->model, vol, mask, n, s->ce_w, &loss, &dice);
    SCAFFOLD_TRACE_REGION_END(tr);
    if (rc == 0 && s->model.shard)
        rc = par_spatial_status(&s->sp);
    /* Every rank completes the gradient all-reduce (the same buckets, whether its backward pass
     * ran or not), then the outcome is agreed. */
    tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_ALL_REDUCE, SCAFFOLD_TRACE_CAT_COMM);
    prof_begin(PROF_ALL_REDUCE);
    int grc = train_grad_finish(s);
    prof_end(PROF_ALL_REDUCE);
    rc = rc ? rc : grc;
    SCAFFOLD_TRACE_REGION_INT(tr, "bytes", (int64_t)(s->model.nparams * sizeof(float)));
    SCAFFOLD_TRACE_REGION_END(tr);
    if (s->w->size > 1)
        rc = dist_agree(s->w, rc);
    if (rc)
        return rc;
    tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_STEP, SCAFFOLD_TRACE_CAT_COMPUTE);
    /* clip_grad_norm_ 1.0, then the update, where the model computes */
    prof_begin(PROF_OPTIMIZER);
    rc = nn_unet_step(&s->model, &s->opt, lr, 1.0);
    prof_end(PROF_OPTIMIZER);
    SCAFFOLD_TRACE_REGION_END(tr);
    if (s->w->size > 1)
        rc = dist_agree(s->w, rc);
    if (rc)
        return rc;
    prof_begin(PROF_UPDATE_LOSS);
    acc[0] += loss * n;
    acc[1] += dice * n;
    acc[2] += n;
    prof_end(PROF_UPDATE_LOSS);
    prof_end(PROF_MINIBATCH);
    /* upstream times full-size batches only (reference §11.8) */
    s->minibatch_s = n == s->cfg->local_batch_size ? time_now() - t_mb : -1;
    return 1;
}

int train_validate(train_state *s, int64_t epoch, int max_batches, double acc[3]) {
    prof_begin(PROF_VALIDATION);
    int rc = ds_loader_start_epoch(s->val, epoch);
    const int64_t nb = ds_loader_num_batches(s->val);
    const long total = max_batches >= 0 && max_batches < nb ? max_batches : (long)nb;
    log_progress pr;
    log_progress_start(&pr, total, 0);
    for (int b = 0; rc == 0 && (max_batches < 0 || b < max_batches); b++) {
        double per, el, eta;
        if (b > 0 && log_progress_due(&pr, b, &per, &el, &eta)) {
            char what[32] = "warmup";
            if (epoch > 0)
                snprintf(what, sizeof what, "epoch %lld", (long long)epoch);
            log_info("%s validation: batch %d of %ld, %.2f s per batch, %.1f s elapsed, ETA %.0f s",
                     what, b, total, per, el, eta);
        }
        int n = 0;
        const float *vol = NULL;
        const uint16_t *mask = NULL;
        int got = fetch(s, s->val, &vol, &mask, &n);
        if (got < 0)
            rc = got;
        if (got <= 0)
            break;
        double loss = 0;
        scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FORWARD,
                                                               SCAFFOLD_TRACE_CAT_COMPUTE);
        rc = nn_unet_evaluate(&s->model, vol, mask, n, s->ce_w, &loss, s->dice_buf);
        SCAFFOLD_TRACE_REGION_END(tr);
        if (rc == 0 && s->model.shard)
            rc = par_spatial_status(&s->sp);
        for (int i = 0; i < n && rc == 0; i++)
            acc[0] += s->dice_buf[i];
        acc[1] += loss * n;
        acc[2] += n;
    }
    prof_end(PROF_VALIDATION);
    return rc;
}

double train_lr(const scaffold_config *c, int epoch) {
    if (c->disable_scheduler)
        return c->starting_learning_rate;
    return nn_lr_cosine_warm(c->starting_learning_rate, c->T_0, c->T_mult, c->min_learning_rate,
                             epoch - 1);
}

int train_warmup(train_state *s) {
    const scaffold_config *c = s->cfg;
    if (c->warmup_batches <= 0)
        return 0;
    size_t np = s->model.nparams, ns = nn_optim_state_floats(s->opt.kind, np);
    float *p = malloc(np * sizeof *p), *st = malloc((ns ? ns : 1) * sizeof *st);
    int rc = p && st ? 0 : err_set(ERR_NOMEM, "out of memory for the warmup snapshot");
    if (rc == 0) /* the snapshot is taken from the host mirrors */
        rc = nn_unet_download(&s->model, &s->opt);
    rc = dist_agree(s->w, rc);
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
    log_progress pr;
    log_progress_start(&pr, steps, 0);
    log_info("warmup: %d training and up to %d validation batches per rank (untimed)", steps,
             c->warmup_batches);
    for (int i = 0; i < steps && rc == 0 && !s->stop; i++) {
        int r = train_step(s, c->starting_learning_rate, acc);
        if (r < 0)
            rc = r;
        if (r == 0)
            break;
        s->stop = train_stop_poll(s->w);
        double per, el, eta;
        if (log_progress_due(&pr, i + 1, &per, &el, &eta))
            log_info("warmup: batch %d of %d, %.2f s per batch, %.1f s elapsed, ETA %.0f s", i + 1,
                     steps, per, el, eta);
    }
    if (rc == 0 && !s->stop)
        rc = train_validate(s, 0, c->warmup_batches, vacc);
    rc = dist_agree(s->w, rc);
    memcpy(s->model.params, p, np * sizeof *p);
    if (ns)
        memcpy(s->opt.state, st, ns * sizeof *st);
    s->opt.step = step0;
    free(p);
    free(st);
    int urc = dist_agree(s->w, nn_unet_upload(&s->model, &s->opt)); /* the restored state */
    rc = rc ? rc : urc;
    dist_barrier(s->w);
    if (rc == 0 && !s->stop)
        log_info("warmup: %d training and up to %d validation batches per rank in %.2f s "
                 "(untimed; state restored)", steps, c->warmup_batches, time_now() - t0);
    return rc;
}
