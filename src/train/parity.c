/* parity: initial weights and the per-step sample order with losses, on request (see
 * parity.h). */
#include "train/parity.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/mem.h"
#include "nn/checkpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int parity_check(const parity_opts *o) {
    if (!o || !o->initial_weights)
        return 0;
    const char *f = o->initial_weights;
    size_t n = strlen(f);
    if (n == 0 || f[n - 1] == '/' || fs_is_dir(f))
        return err_set(ERR_USAGE, "--save-initial-weights: '%s' is not a file name; give a path "
                                  "such as init.safetensors", f);
    char dir[FS_PATH_MAX];
    const char *slash = strrchr(f, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f) : 1, slash ? f : ".");
    if (slash == f)
        snprintf(dir, sizeof dir, "/");
    if (fs_check_creatable_dir(dir) != 0)
        return err_set(ERR_USAGE, "--save-initial-weights %s: %s; choose a writable directory", f,
                       err_msg());
    return 0;
}

int parity_save_initial(const parity_opts *o, train_state *s, int resumed_epoch) {
    if (!o || !o->initial_weights)
        return 0;
    if (resumed_epoch > 0) {
        if (s->w->rank == 0)
            log_warn("--save-initial-weights: the run resumes after epoch %d, so its weights are "
                     "not initial; %s not written", resumed_epoch, o->initial_weights);
        return 0;
    }
    int rc = 0;
    if (s->w->rank == 0) {
        rc = nn_unet_download(&s->model, NULL);
        char seed[32];
        snprintf(seed, sizeof seed, "%d", s->cfg->seed);
        const char *meta[4] = {"source", "scaffold initial weights", "seed", seed};
        if (rc == 0)
            rc = nn_checkpoint_save(o->initial_weights, &s->model, NULL, meta, 2);
        if (rc == 0)
            log_info("initial weights (seed %d) written to %s", s->cfg->seed, o->initial_weights);
    }
    return dist_agree(s->w, rc);
}

static int order_path(const train_state *s, char *p, size_t n) {
    return snprintf(p, n, "%s/%s", s->cfg->run_dir, PARITY_ORDER_FILE) >= (int)n
               ? err_set(ERR_RANGE, "run folder path too long for %s", PARITY_ORDER_FILE)
               : 0;
}

/* Rewrites sample_order.csv atomically: the header, the existing rows of epochs < keep_below
 * (all when keep_below <= 0), then `extra`. */
static int order_rewrite(const train_state *s, int keep_below, const char *extra, size_t nextra) {
    char path[FS_PATH_MAX];
    int rc = order_path(s, path, sizeof path);
    char *old = NULL;
    size_t nold = 0;
    if (rc == 0 && fs_exists(path))
        rc = fs_read_file(path, &old, &nold);
    fs_atomic a;
    if (rc == 0)
        rc = fs_atomic_open(&a, path);
    if (rc) {
        free(old);
        return rc;
    }
    fprintf(a.fp, "%s\n", PARITY_ORDER_HEADER);
    /* the old rows after its header, line by line */
    char *line = old ? strchr(old, '\n') : NULL;
    while (line && *++line) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (keep_below <= 0 || atoi(line) < keep_below)
            fprintf(a.fp, "%.*s\n", (int)len, line);
        line = end;
    }
    free(old);
    if (nextra)
        fwrite(extra, 1, nextra, a.fp);
    return fs_atomic_commit(&a, 0);
}

int parity_log_open(parity_log *p, const parity_opts *o, train_state *s, int start_epoch) {
    memset(p, 0, sizeof *p);
    if (!o || !o->sample_order)
        return 0;
    p->on = 1;
    p->per = ds_loader_num_samples(s->train);
    p->sums = calloc(2 * (size_t)s->replicas, sizeof *p->sums);
    int rc = p->sums ? 0 : err_set(ERR_NOMEM, "out of memory for the sample order");
    if (rc == 0 && s->w->rank == 0) {
        p->order = malloc((size_t)s->replicas * (size_t)(p->per ? p->per : 1) * sizeof *p->order);
        if (!p->order)
            rc = err_set(ERR_NOMEM, "out of memory for the sample order");
        else if (start_epoch > 1)
            rc = order_rewrite(s, start_epoch, NULL, 0);
    }
    return dist_agree(s->w, rc);
}

int parity_log_epoch(parity_log *p, train_state *s, int epoch) {
    if (!p->on)
        return 0;
    p->epoch = epoch;
    p->step = 0;
    p->len = 0;
    int rc = 0;
    for (int r = 0; s->w->rank == 0 && r < s->replicas && rc == 0; r++) {
        int64_t got = ds_sampler_indices(DS_TRAIN, s->ds->n[DS_TRAIN], s->replicas, r,
                                         (uint64_t)s->cfg->seed, epoch, p->order + r * p->per);
        if (got < 0)
            rc = (int)got;
    }
    return dist_agree(s->w, rc);
}

static int row_add(parity_log *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int row_add(parity_log *p, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->rows ? p->rows + p->len : NULL, p->rows ? p->cap - p->len : 0, fmt,
                          ap);
        va_end(ap);
        if (n < 0)
            return err_set(ERR_INTERNAL, "sample order: formatting failed");
        if (p->rows && p->len + (size_t)n < p->cap) {
            p->len += (size_t)n;
            return 0;
        }
        size_t cap = p->cap ? 2 * p->cap : 4096;
        while (cap <= p->len + (size_t)n)
            cap *= 2;
        char *r = realloc(p->rows, cap);
        if (!r)
            return err_set(ERR_NOMEM, "out of memory for the sample order");
        p->rows = r;
        p->cap = cap;
    }
}

int parity_log_step(parity_log *p, train_state *s, const double before[3], const double after[3]) {
    if (!p->on)
        return 0;
    const int R = s->replicas, b = s->cfg->local_batch_size;
    memset(p->sums, 0, 2 * (size_t)R * sizeof *p->sums);
    const double n = after[2] - before[2];
    if (s->grid.shard == 0) { /* one rank per replica contributes */
        p->sums[2 * s->replica] = n > 0 ? (after[0] - before[0]) / n : 0;
        p->sums[2 * s->replica + 1] = n > 0 ? (after[1] - before[1]) / n : 0;
    }
    dist_sum_doubles(s->w, p->sums, 2 * (size_t)R);
    int rc = 0;
    const int64_t lo = (int64_t)p->step * b;
    for (int r = 0; s->w->rank == 0 && r < R && rc == 0; r++) {
        rc = row_add(p, "%d,%d,%d,", p->epoch, p->step + 1, r);
        for (int64_t i = lo; rc == 0 && i < lo + b && i < p->per; i++)
            rc = row_add(p, "%s%s", i > lo ? " " : "",
                         s->ds->ids[DS_TRAIN][p->order[r * p->per + i]]);
        if (rc == 0)
            rc = row_add(p, ",%.17g,%.17g\n", p->sums[2 * r], p->sums[2 * r + 1]);
    }
    p->step++;
    return dist_agree(s->w, rc);
}

int parity_log_flush(parity_log *p, train_state *s) {
    if (!p->on)
        return 0;
    int rc = s->w->rank == 0 ? order_rewrite(s, 0, p->rows, p->len) : 0;
    p->len = 0;
    return dist_agree(s->w, rc);
}

void parity_log_free(parity_log *p) {
    MEM_FREE(p->order, p->sums, p->rows);
    memset(p, 0, sizeof *p);
}
