/* work: the application work a traced run did, per phase, from the benchmark's annotations
 * (see an_work in compare.h). Two passes over the time-sorted events: the first finds, per
 * process, the epoch span, the first warmup fetch/compute and the evaluation and checkpoint
 * regions; the second attributes every event to a phase and counts samples, steps, bytes
 * delivered, checkpoints and file-system bytes. */
#include "analyze/compare.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>

/* Regions of one kind on one process are an_spans in start order (the events are sorted by
 * start), whose cursor serves monotone "is time s inside one?" queries: these must come in
 * non-decreasing s (true for one process's events in trace order). */
static int regions_inside(an_spans *r, int64_t s) {
    while (r->cur < r->n && r->e[r->cur] < s)
        r->cur++;
    return r->cur < r->n && r->s[r->cur] <= s;
}

typedef struct {
    int64_t e0, e1, warm0;  /* first epoch start, last epoch end, first fetch/compute before e0 */
    uint64_t epochs;
    an_spans eval, ckpt;
} proc_phase;

static int phase_of(const proc_phase *p, int64_t s) {
    if (!p->epochs)
        return AN_PH_SETUP;
    if (s > p->e1)
        return AN_PH_AFTER;
    if (s >= p->e0)
        return AN_PH_TRAIN;
    return s >= p->warm0 ? AN_PH_WARMUP : AN_PH_SETUP;
}

/* Pass 1: per-process epoch span, evaluation and checkpoint regions, first fetch/compute;
 * *has_step says whether a compute annotation is named "step" (then only those are steps). */
static int find_regions(const an_trace *t, proc_phase *pp, uint32_t step_name, int *has_step) {
    int rc = 0;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        proc_phase *p = &pp[t->proc[i]];
        int64_t s = t->ts[i], e = s + t->dur[i];
        switch (t->op[i]) {
        case AN_OP_EPOCH:
            p->epochs++;
            if (s < p->e0)
                p->e0 = s;
            if (e > p->e1)
                p->e1 = e;
            break;
        case AN_OP_EVAL: rc = an_spans_add(&p->eval, s, e); break;
        case AN_OP_CKPT: rc = an_spans_add(&p->ckpt, s, e); break;
        case AN_OP_FETCH:
        case AN_OP_COMPUTE:
            if (s < p->warm0)
                p->warm0 = s;
            *has_step |= t->op[i] == AN_OP_COMPUTE && t->name[i] == step_name;
            break;
        default: break;
        }
    }
    return rc;
}

/* A training-phase fetch or compute event: batches, samples and bytes delivered, steps. */
static void count_train_event(const an_trace *t, size_t i, int in_eval, uint32_t step_name,
                              int has_step, an_work *w) {
    int op = t->op[i];
    if (op == AN_OP_FETCH) {
        int split = in_eval ? 1 : 0;
        int64_t items = t->offset[i];
        if (items == 0)
            return; /* the end-of-epoch call that found no batch */
        w->batches[split]++;
        if (items > 0)
            w->samples[split] += (uint64_t)items;
        else
            w->samples_known[split] = 0;
        if (t->bytes[i] >= 0) {
            w->delivered_bytes += (uint64_t)t->bytes[i];
            w->delivered_known = 1;
        }
    } else if (op == AN_OP_COMPUTE && !in_eval && (!has_step || t->name[i] == step_name)) {
        w->steps++;
    }
}

/* Pass 2: attribute every event to its process's phase: the phases' spans, checkpoints,
 * file-system bytes per phase, and the training phase's work. */
static void attribute_events(const an_trace *t, proc_phase *pp, const uint8_t *ckfile,
                             uint32_t step_name, int has_step, int64_t span[][2], an_work *w) {
    for (size_t i = 0; i < t->n; i++) {
        int op = t->op[i];
        if (op == AN_OP_TRACER)
            continue;
        proc_phase *p = &pp[t->proc[i]];
        int64_t s = t->ts[i], e = s + t->dur[i];
        int ph = phase_of(p, s);
        /* Phase times come from the annotated processes only (a launcher or wrapper process
         * lives as long as the run). */
        if (p->epochs || !w->annotated) {
            if (s < span[ph][0])
                span[ph][0] = s;
            if (e > span[ph][1])
                span[ph][1] = e;
        }
        int in_eval = regions_inside(&p->eval, s);
        int in_ckpt = regions_inside(&p->ckpt, s);
        if (op == AN_OP_CKPT) {
            w->ckpt_events++;
            continue;
        }
        if (AN_IS_IO(op) && !(t->flags[i] & AN_F_IGNORED) && t->bytes[i] > 0) {
            uint64_t b = (uint64_t)t->bytes[i];
            if (op == AN_OP_READ)
                w->fs_read[ph] += b;
            else if (op == AN_OP_WRITE) {
                w->fs_written[ph] += b;
                /* Checkpoint bytes: writes inside a checkpoint region, or to a checkpoint file
                 * from any thread (an asynchronous writer runs outside the region). */
                if (in_ckpt || ckfile[t->file[i]])
                    w->ckpt_bytes += b;
            }
            continue;
        }
        if (ph == AN_PH_TRAIN)
            count_train_event(t, i, in_eval, step_name, has_step, w);
    }
}

int an_work_compute(const an_trace *t, const an_metrics *m, an_work *w) {
    memset(w, 0, sizeof *w);
    size_t np = t->nprocs;
    proc_phase *pp = calloc(np ? np : 1, sizeof *pp);
    uint8_t *ckfile = calloc((size_t)t->files.n + 1, 1);
    int64_t span[AN_PH_COUNT][2];
    int rc = pp && ckfile ? 0 : err_set(ERR_NOMEM, "out of memory measuring the work");
    if (rc)
        goto out;
    for (size_t k = 0; k < m->nfiles; k++)
        if (m->files[k].is_ckpt)
            ckfile[m->files[k].file] = 1;
    for (size_t p = 0; p < np; p++)
        pp[p].e0 = pp[p].warm0 = INT64_MAX;
    uint32_t step_name = an_strtab_find(&t->names, "step", 4);
    int has_step = 0;
    rc = find_regions(t, pp, step_name, &has_step);
    if (rc) {
        err_set(rc, "out of memory measuring the work");
        goto out;
    }
    for (int k = 0; k < AN_PH_COUNT; k++) {
        span[k][0] = INT64_MAX;
        span[k][1] = INT64_MIN;
    }
    for (size_t p = 0; p < np; p++) {
        w->nprocs += pp[p].epochs > 0;
        if (pp[p].epochs > w->epochs)
            w->epochs = pp[p].epochs;
        if (pp[p].warm0 > pp[p].e0)
            pp[p].warm0 = pp[p].e0; /* no warmup: setup runs up to the first epoch */
    }
    w->annotated = w->epochs > 0;
    w->samples_known[0] = w->samples_known[1] = 1;
    attribute_events(t, pp, ckfile, step_name, has_step, span, w);
    for (int k = 0; k < AN_PH_COUNT; k++)
        w->phase_s[k] = span[k][1] > span[k][0] ? (double)(span[k][1] - span[k][0]) / 1e6 : 0;
    for (int k = 0; k < 2; k++)
        if (!w->batches[k])
            w->samples_known[k] = 0;
out:
    if (pp)
        for (size_t p = 0; p < np; p++) {
            an_spans_free(&pp[p].eval);
            an_spans_free(&pp[p].ckpt);
        }
    free(pp);
    free(ckfile);
    return rc;
}
