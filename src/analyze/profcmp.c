/* profcmp: profiles read from .cali files and compared with compare's guards (see profcmp.h). */
#include "analyze/profcmp.h"

#include "analyze/compare.h"
#include "analyze/out.h"
#include "core/cali.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/mem.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The keys that define the workload: runs that differ in one are different benchmarks. */
static const char *const workload_keys[6] = {"problem_scale",    "unet_base_channels",
                                             "n_categories",     "local_batch_size",
                                             "precision",        "dc_num_shards"};

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The .cali file a path names: itself, or the profile.cali of a profile or run folder. */
static int profile_file(const char *path, char *file, size_t cap) {
    if (ends_with(path, ".cali")) {
        snprintf(file, cap, "%s", path);
        return 1;
    }
    if (!fs_is_dir(path))
        return 0;
    const char *sep = ends_with(path, "/") ? "" : "/";
    snprintf(file, cap, "%s%sprofile.cali", path, sep);
    if (fs_exists(file))
        return 1;
    snprintf(file, cap, "%s%sprofile/profile.cali", path, sep);
    return fs_exists(file);
}

int an_prof_is_profile(const char *path) {
    char file[FS_PATH_MAX];
    return profile_file(path, file, sizeof file);
}

/* ---- loading ------------------------------------------------------------------------------ */

typedef struct acc {
    char *path;
    double time, excl, calls, total_calls;
    int records, has_incl, has_calls;
} acc;

typedef struct table {
    acc *a;
    size_t n, cap;
    size_t *slot; /* open addressing: index + 1, 0 = empty */
    size_t nslot;
} table;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static acc *table_get(table *t, const char *path) {
    if (2 * (t->n + 1) > t->nslot) {
        size_t ns = t->nslot ? 2 * t->nslot : 256;
        size_t *sl = calloc(ns, sizeof *sl);
        if (!sl)
            return NULL;
        for (size_t i = 0; i < t->n; i++) {
            size_t h = hash_str(t->a[i].path) & (ns - 1);
            while (sl[h])
                h = (h + 1) & (ns - 1);
            sl[h] = i + 1;
        }
        free(t->slot);
        t->slot = sl;
        t->nslot = ns;
    }
    size_t h = hash_str(path) & (t->nslot - 1);
    while (t->slot[h]) {
        acc *x = &t->a[t->slot[h] - 1];
        if (!strcmp(x->path, path))
            return x;
        h = (h + 1) & (t->nslot - 1);
    }
    if (MEM_RESERVE(t->a, t->cap, t->n, 256))
        return NULL;
    acc *x = &t->a[t->n];
    memset(x, 0, sizeof *x);
    x->path = strdup(path);
    if (!x->path)
        return NULL;
    t->slot[h] = ++t->n;
    return x;
}

static double num(const char *s) {
    return s ? strtod(s, NULL) : NAN;
}

static const char *first_of(const cali_file *f, const cali_ctx *c, const char *const *names,
                            int n) {
    for (int i = 0; i < n; i++) {
        const char *v = cali_ctx_value(f, c, names[i]);
        if (v)
            return v;
    }
    return NULL;
}

/* The calls per rank of the shallowest region whose path ends with `suffix`, or -1. */
static double calls_of(const an_prof_run *run, const char *suffix) {
    size_t best = (size_t)-1, depth = (size_t)-1;
    for (size_t i = 0; i < run->n; i++) {
        if (!ends_with(run->r[i].path, suffix))
            continue;
        const size_t len = strlen(run->r[i].path);
        if (len != strlen(suffix) && run->r[i].path[len - strlen(suffix) - 1] != '/')
            continue;
        size_t d = 0;
        for (const char *p = run->r[i].path; *p; p++)
            d += *p == '/';
        if (d < depth)
            best = i, depth = d;
    }
    return best == (size_t)-1 ? -1 : run->r[best].calls;
}

int an_prof_load(const char *path, an_prof_run *run) {
    memset(run, 0, sizeof *run);
    snprintf(run->label, sizeof run->label, "%s", path);
    if (!profile_file(path, run->file, sizeof run->file))
        return err_set(ERR_USAGE, "%s: not a profile (a .cali file, or a folder holding "
                                  "profile.cali or profile/profile.cali)",
                       path);
    cali_file f;
    int rc = cali_read(run->file, &f);
    if (rc)
        return rc;
    static const char *const incl_avg[] = {"avg#inclusive#sum#time.duration"};
    static const char *const incl_rank[] = {"inclusive#sum#time.duration",
                                            "sum#inclusive#sum#time.duration"};
    static const char *const excl_rank[] = {"sum#time.duration", "time.duration"};
    static const char *const calls_avg[] = {"avg#sum#rc.count", "avg#sum#region.count"};
    static const char *const calls_rank[] = {"sum#region.count", "sum#rc.count", "region.count",
                                             "count"};
    table t = {0};
    char p[4096];
    int maxrank = -1;
    for (size_t i = 0; i < f.nctx && rc == 0; i++) {
        const cali_ctx *c = &f.ctx[i];
        if (cali_ctx_path(&f, c, p, sizeof p) == 0)
            continue;
        const char *chan = cali_ctx_value(&f, c, "spot.channel");
        if (chan && strcmp(chan, "regionprofile"))
            continue; /* another spot channel's records */
        const char *avg = first_of(&f, c, incl_avg, 1);
        const char *inc = avg ? NULL : first_of(&f, c, incl_rank, 2);
        const char *exc = avg || inc ? NULL : first_of(&f, c, excl_rank, 2);
        if (!avg && !inc && !exc)
            continue;
        acc *x = table_get(&t, p);
        if (!x) {
            rc = err_set(ERR_NOMEM, "%s: out of memory", run->file);
            break;
        }
        const char *cl = avg ? first_of(&f, c, calls_avg, 2) : first_of(&f, c, calls_rank, 4);
        x->records++;
        if (avg || inc) {
            x->time += num(avg ? avg : inc);
            x->has_incl = 1;
        } else {
            x->excl += num(exc);
        }
        if (cl) {
            x->calls += num(cl);
            x->has_calls = 1;
        }
        const char *rk = cali_ctx_value(&f, c, "mpi.rank");
        if (rk && atoi(rk) > maxrank)
            maxrank = atoi(rk);
    }
    if (rc == 0 && t.n == 0)
        rc = err_set(ERR_FORMAT, "%s: no region times in it (a Caliper region profile has records "
                                 "with a region path and time.duration)",
                     run->file);
    if (rc == 0) {
        run->r = calloc(t.n, sizeof *run->r);
        if (!run->r)
            rc = err_set(ERR_NOMEM, "%s: out of memory", run->file);
    }
    for (size_t i = 0; rc == 0 && i < t.n; i++) {
        acc *x = &t.a[i];
        double time = x->time;
        if (!x->has_incl) { /* exclusive only: the region's and everything below it */
            const size_t len = strlen(x->path);
            time = 0;
            for (size_t j = 0; j < t.n; j++)
                if (!strncmp(t.a[j].path, x->path, len) &&
                    (t.a[j].path[len] == 0 || t.a[j].path[len] == '/'))
                    time += t.a[j].excl;
        }
        /* per-rank records (several per path) are averaged over the ranks that ran them */
        const double k = x->records > 1 ? x->records : 1;
        run->r[run->n++] = (an_prof_region){NULL, time / k, x->has_calls ? x->calls / k : -1};
    }
    for (size_t i = 0; rc == 0 && i < t.n; i++) { /* the paths move to the run */
        run->r[i].path = t.a[i].path;
        t.a[i].path = NULL;
    }
    for (size_t i = 0; i < t.n; i++)
        free(t.a[i].path);
    MEM_FREE(t.a, t.slot);
    if (rc) {
        cali_free(&f);
        an_prof_free(run);
        return rc;
    }
    const char *js = cali_global(&f, "jobsize");
    if (!js)
        js = cali_global(&f, "mpi.world.size");
    run->ranks = js ? atoi(js) : maxrank + 1 > 0 ? maxrank + 1 : 1;
    run->minibatch_time_s = num(cali_global(&f, "minibatch_time_s"));
    for (int k = 0; k < 6; k++) {
        const char *v = cali_global(&f, workload_keys[k]);
        snprintf(run->workload[k], sizeof run->workload[k], "%s", v ? v : "");
    }
    const char *gb = cali_global(&f, "global_batch_size");
    run->global_batch = gb && atof(gb) > 0 ? atof(gb) : run->ranks;
    cali_free(&f);
    run->steps = calls_of(run, "batch_loop/minibatch");
    if (run->steps < 0)
        run->steps = calls_of(run, "batch_loop/minibatch_time"); /* upstream's name */
    run->epochs = calls_of(run, "benchmark/epoch");
    run->val_batches = calls_of(run, "epoch/validation/forward");
    /* checkpoint writes run on rank 0 alone, so the average over the ranks that ran them is
     * the count (the writer thread's when saves are asynchronous) */
    double w = calls_of(run, "checkpoint/write"), wa = calls_of(run, "checkpoint_writer/write");
    run->ckpt_writes = w < 0 && wa < 0 ? -1 : (w > 0 ? w : 0) + (wa > 0 ? wa : 0);
    return 0;
}

void an_prof_free(an_prof_run *run) {
    for (size_t i = 0; i < run->n; i++)
        free(run->r[i].path);
    free(run->r);
    run->r = NULL;
    run->n = 0;
}

/* ---- comparing ---------------------------------------------------------------------------- */

static const an_prof_region *find(const an_prof_run *run, const char *path) {
    for (size_t i = 0; i < run->n; i++)
        if (!strcmp(run->r[i].path, path))
            return &run->r[i];
    return NULL;
}

/* The run's largest region: its whole time. */
static double whole(const an_prof_run *run) {
    double m = 0;
    for (size_t i = 0; i < run->n; i++)
        if (!strchr(run->r[i].path, '/') && run->r[i].time > m)
            m = run->r[i].time;
    return m;
}

static double batch_loop_per_step(const an_prof_run *run) {
    double t = -1;
    for (size_t i = 0; i < run->n; i++)
        if (ends_with(run->r[i].path, "/batch_loop") && run->r[i].time > t)
            t = run->r[i].time;
    return t > 0 && run->steps > 0 ? t / run->steps : NAN;
}

static double median_of(double *v, size_t n) {
    return n ? an_median(v, n) : NAN;
}

/* Median over a side's runs of get(run). */
typedef double (*run_get)(const an_prof_run *, const void *);
static double side_median(const an_prof_run *r, size_t n, run_get g, const void *arg) {
    double v[256];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 256; i++) {
        double x = g(&r[i], arg);
        if (!isnan(x))
            v[k++] = x;
    }
    return median_of(v, k);
}

/* A count of work that guard 2 compares: the run's field at `off` (-1: unknown), in samples when
 * it counts minibatches (batches per rank times the global batch: the same per rank on 1 rank
 * and on 8). */
typedef struct work_item {
    const char *name;
    size_t off;
    int samples;
} work_item;

static double get_work(const an_prof_run *r, const void *a) {
    const work_item *w = a;
    const double v = *(const double *)((const char *)r + w->off);
    return v >= 0 ? (w->samples ? v * r->global_batch : v) : NAN;
}
/* calls per minibatch of the region at path (0 when the run lacks it) */
static double get_calls_per_step(const an_prof_run *r, const void *a) {
    const an_prof_region *x = find(r, a);
    if (r->steps <= 0)
        return NAN;
    return x ? (x->calls >= 0 ? x->calls / r->steps : NAN) : 0;
}

static void add_less(an_prof_result *r, const char *what) {
    size_t ll = strlen(r->less);
    snprintf(r->less + ll, sizeof r->less - ll, "%s%s", ll ? "; " : "", what);
}

/* Guard 2: the work of both sides. */
static void work_check(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                       an_prof_result *r) {
    static const work_item items[4] = {
        {"epochs", offsetof(an_prof_run, epochs), 0},
        {"training samples", offsetof(an_prof_run, steps), 1},
        {"validation samples", offsetof(an_prof_run, val_batches), 1},
        {"checkpoint writes", offsetof(an_prof_run, ckpt_writes), 0}};
    for (int k = 0; k < 4; k++) {
        double b = side_median(base, nb, get_work, &items[k]),
               c = side_median(cand, nc, get_work, &items[k]);
        r->work_known |= !isnan(b);
        if (b > 0 && (isnan(c) || c < 0.99 * b)) {
            char m[160];
            snprintf(m, sizeof m, "%s %.0f -> %.0f", items[k].name, b, isnan(c) ? 0 : c);
            r->does_less = 1;
            add_less(r, m);
        }
    }
    /* every region of the baseline's training step: its calls per minibatch (communication is
     * not work: one rank has none of it) */
    if (!r->per_step)
        return;
    int shown = 0;
    for (size_t i = 0; i < base[0].n; i++) {
        const char *p = base[0].r[i].path;
        if (!strstr(p, "batch_loop/minibatch/") || strstr(p, "/MPI_") || strstr(p, "halo_wait") ||
            strstr(p, "_allreduce"))
            continue;
        double b = side_median(base, nb, get_calls_per_step, p),
               c = side_median(cand, nc, get_calls_per_step, p);
        if (b > 0 && !isnan(c) && c < 0.99 * b) {
            r->does_less = 1;
            char m[400];
            snprintf(m, sizeof m, "%s: %.2f -> %.2f calls per minibatch",
                     strstr(p, "minibatch/") + 10, b, c);
            if (shown++ < 3)
                add_less(r, m);
        }
    }
    if (shown > 3) {
        size_t ll = strlen(r->less);
        snprintf(r->less + ll, sizeof r->less - ll, "; and %d more regions of the step", shown - 3);
    }
}

static double get_headline(const an_prof_run *r, const void *a) {
    const int basis = *(const int *)a;
    return basis == 0 ? r->minibatch_time_s : basis == 1 ? batch_loop_per_step(r) : whole(r);
}

typedef struct rarg {
    const char *path;
    int per_step;
} rarg;

static double get_region(const an_prof_run *r, const void *a) {
    const rarg *x = a;
    const an_prof_region *g = find(r, x->path);
    if (!g)
        return NAN;
    return x->per_step ? g->time / r->steps : g->time;
}

static int by_abs_change(const void *x, const void *y) {
    const an_prof_change *a = x, *b = y;
    const double da = fabs(a->cand - a->base), db = fabs(b->cand - b->base);
    return (da < db) - (da > db);
}

int an_prof_compare(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                    double min_noise, an_prof_result *r) {
    memset(r, 0, sizeof *r);
    /* guard 1: one workload */
    r->same_workload = 1;
    for (int k = 0; k < 6; k++) {
        const char *b = base[0].workload[k], *c = cand[0].workload[k];
        if (*b && *c && strcmp(b, c)) {
            size_t ll = strlen(r->workload_diff);
            snprintf(r->workload_diff + ll, sizeof r->workload_diff - ll, "%s%s %s -> %s",
                     ll ? ", " : "", workload_keys[k], b, c);
            r->same_workload = 0;
        }
    }
    /* the compared time */
    int all_mb = 1, all_steps = 1;
    for (size_t i = 0; i < nb + nc; i++) {
        const an_prof_run *x = i < nb ? &base[i] : &cand[i - nb];
        all_mb &= !isnan(x->minibatch_time_s) && x->minibatch_time_s > 0;
        all_steps &= x->steps > 0;
    }
    r->per_step = all_steps;
    int basis = all_mb ? 0 : all_steps && !isnan(batch_loop_per_step(&base[0])) ? 1 : 2;
    static const char *const basis_name[3] = {"median minibatch time", "batch loop per minibatch",
                                              "whole run"};
    r->time_basis = basis_name[basis];
    double hb[256], hc[256];
    size_t kb = nb < 256 ? nb : 256, kc = nc < 256 ? nc : 256;
    for (size_t i = 0; i < kb; i++)
        hb[i] = get_headline(&base[i], &basis);
    for (size_t i = 0; i < kc; i++)
        hc[i] = get_headline(&cand[i], &basis);
    an_delta d;
    an_delta_of(hb, kb, hc, kc, min_noise, &d);
    r->noise = isnan(d.noise) ? min_noise : d.noise;
    r->med = d.med;
    r->lo = d.lo;
    r->hi = d.hi;
    work_check(base, nb, cand, nc, r);
    /* the regions that changed */
    const double ref = side_median(base, nb, get_headline, &basis);
    const double floor_s = 0.001 * (isnan(ref) ? 0 : ref);
    size_t cap = 0;
    for (size_t i = 0; i < nb + nc; i++)
        cap += (i < nb ? base[i] : cand[i - nb]).n;
    r->ch = calloc(cap ? cap : 1, sizeof *r->ch);
    if (!r->ch)
        return err_set(ERR_NOMEM, "compare: out of memory");
    for (size_t i = 0; i < nb + nc; i++) {
        const an_prof_run *x = i < nb ? &base[i] : &cand[i - nb];
        for (size_t j = 0; j < x->n; j++) {
            const char *p = x->r[j].path;
            int seen = 0;
            for (size_t k = 0; k < r->nch && !seen; k++)
                seen = !strcmp(r->ch[k].path, p);
            for (size_t q = 0; q < i && !seen; q++) /* already considered from an earlier run */
                seen = find(q < nb ? &base[q] : &cand[q - nb], p) != NULL;
            if (seen)
                continue;
            const rarg ra = {p, r->per_step};
            double vb[256], vc[256];
            size_t mb = 0, mc = 0;
            for (size_t q = 0; q < kb; q++)
                if (!isnan(vb[mb] = get_region(&base[q], &ra)))
                    mb++;
            for (size_t q = 0; q < kc; q++)
                if (!isnan(vc[mc] = get_region(&cand[q], &ra)))
                    mc++;
            an_prof_change c = {p, median_of(vb, mb), median_of(vc, mc), NAN, NAN, NAN, 0};
            if (mb && mc) {
                an_delta dd;
                an_delta_of(vb, mb, vc, mc, min_noise, &dd);
                c.med = dd.med;
                c.lo = dd.lo;
                c.hi = dd.hi;
                if (!an_delta_sign(&dd) || fabs(c.cand - c.base) < floor_s)
                    continue;
            } else {
                c.only = mb ? 1 : 2;
                if ((mb ? c.base : c.cand) < floor_s)
                    continue;
            }
            r->ch[r->nch++] = c;
        }
    }
    qsort(r->ch, r->nch, sizeof *r->ch, by_abs_change);
    /* the verdict */
    const int sign = an_delta_sign(&d);
    if (!r->same_workload) {
        r->verdict = "inconclusive";
        snprintf(r->reason, sizeof r->reason,
                 "different workloads (%s): the regions that changed are shown, but one is not a "
                 "faster run of the other",
                 r->workload_diff);
    } else if (r->does_less) {
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "does less, not faster: the candidate does less work (%s); its %+.1f%% %s is "
                 "not a speedup of the same work",
                 r->less, 100 * r->med, r->time_basis);
    } else if (isnan(d.med)) {
        r->verdict = "inconclusive";
        snprintf(r->reason, sizeof r->reason, "no %s on both sides", r->time_basis);
    } else {
        r->verdict = sign < 0 ? "keep" : sign > 0 ? "reject" : "inconclusive";
        snprintf(r->reason, sizeof r->reason,
                 sign < 0   ? "same work, %s %+.1f%% (range %+.1f%% .. %+.1f%%), entirely below "
                              "the baseline noise band of +-%.1f%%"
                 : sign > 0 ? "regression: %s %+.1f%% (range %+.1f%% .. %+.1f%%) beyond the "
                              "noise band of +-%.1f%%"
                            : "%s %+.1f%% (range %+.1f%% .. %+.1f%%) is within the noise band of "
                              "+-%.1f%%; run more replicates",
                 r->time_basis, 100 * r->med, 100 * r->lo, 100 * r->hi, 100 * r->noise);
    }
    return 0;
}

void an_prof_result_free(an_prof_result *r) {
    free(r->ch);
    r->ch = NULL;
    r->nch = 0;
}

/* ---- output ------------------------------------------------------------------------------- */

#define AN_PROF_TEXT_ROWS 30

static void side_text(const char *name, const an_prof_run *r, size_t n, FILE *out) {
    fprintf(out, "%s (%zu profile%s):\n", name, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "  %s: %d rank(s)", r[i].file, r[i].ranks);
        for (int k = 0; k < 6; k++)
            if (r[i].workload[k][0])
                fprintf(out, ", %s %s", workload_keys[k], r[i].workload[k]);
        fputc('\n', out);
        fputs("    work:", out);
        if (r[i].epochs >= 0)
            fprintf(out, " %.0f epochs,", r[i].epochs);
        if (r[i].steps >= 0)
            fprintf(out, " %.0f training samples (%.0f minibatches per rank),",
                    r[i].steps * r[i].global_batch, r[i].steps);
        if (r[i].val_batches >= 0)
            fprintf(out, " %.0f validation samples,", r[i].val_batches * r[i].global_batch);
        if (r[i].ckpt_writes >= 0)
            fprintf(out, " %.0f checkpoint writes,", r[i].ckpt_writes);
        fprintf(out, " %zu regions", r[i].n);
        if (!isnan(r[i].minibatch_time_s))
            fprintf(out, "; median minibatch time %.4f s", r[i].minibatch_time_s);
        fputc('\n', out);
    }
}

void an_prof_text(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                  const an_prof_result *r, FILE *out) {
    side_text("baseline", base, nb, out);
    side_text("candidate", cand, nc, out);
    if (!r->same_workload)
        fprintf(out, "workload: different (%s)\n", r->workload_diff);
    else
        fputs("workload: same (problem_scale, unet_base_channels, n_categories, local_batch_size, "
              "precision, dc_num_shards, where the profiles record them)\n",
              out);
    if (r->does_less)
        fprintf(out, "work: candidate does less: %s\n", r->less);
    else if (!r->work_known)
        fputs("work: unknown (the baseline has none of scaffold's epoch, minibatch, validation "
              "or checkpoint regions): the time alone is compared\n",
              out);
    else
        fputs("work: same (epochs, training and validation samples, checkpoint writes, calls per "
              "minibatch of every region of the step)\n",
              out);
    fprintf(out, "%s: %+.1f%% (range %+.1f%% .. %+.1f%%), noise band +-%.1f%%\n", r->time_basis,
            100 * r->med, 100 * r->lo, 100 * r->hi, 100 * r->noise);
    const char *unit = r->per_step ? "s per minibatch" : "s per run";
    if (!r->nch) {
        fprintf(out, "regions that changed: none beyond the noise band (times in %s)\n", unit);
    } else {
        size_t w = 6;
        for (size_t i = 0; i < r->nch; i++)
            if (strlen(r->ch[i].path) > w)
                w = strlen(r->ch[i].path);
        w = w > 90 ? 90 : w;
        fprintf(out, "regions that changed beyond the noise band (time per rank, %s; largest "
                     "change first):\n",
                unit);
        fprintf(out, "  %-*s %12s %12s %9s\n", (int)w, "region", "baseline", "candidate",
                "change");
        const size_t shown = r->nch < AN_PROF_TEXT_ROWS ? r->nch : AN_PROF_TEXT_ROWS;
        for (size_t i = 0; i < shown; i++) {
            const an_prof_change *c = &r->ch[i];
            char chg[32];
            if (c->only == 1)
                snprintf(chg, sizeof chg, "gone");
            else if (c->only == 2)
                snprintf(chg, sizeof chg, "new");
            else if (c->base < 1e-6 || fabs(c->med) >= 100)
                snprintf(chg, sizeof chg, "x%.3g", c->cand / c->base);
            else
                snprintf(chg, sizeof chg, "%+.1f%%", 100 * c->med);
            char b[24] = "-", k[24] = "-";
            if (c->only != 2)
                snprintf(b, sizeof b, "%.6f", c->base);
            if (c->only != 1)
                snprintf(k, sizeof k, "%.6f", c->cand);
            fprintf(out, "  %-*s %12s %12s %9s\n", (int)w, c->path, b, k, chg);
        }
        if (shown < r->nch)
            fprintf(out, "  (%zu more; --json lists every one)\n", r->nch - shown);
    }
    fprintf(out, "verdict: %s%s -- %s\n", r->verdict,
            r->does_less ? " (does less, not faster)" : "", r->reason);
}

static void side_json(an_jw *w, const char *key, const an_prof_run *r, size_t n) {
    an_jw_arr(w, key);
    for (size_t i = 0; i < n; i++) {
        an_jw_obj(w, NULL);
        an_jw_str(w, "profile", r[i].file);
        an_jw_i64(w, "ranks", r[i].ranks);
        an_jw_num(w, "minibatch_time_s", r[i].minibatch_time_s);
        an_jw_num(w, "epochs", r[i].epochs >= 0 ? r[i].epochs : NAN);
        an_jw_num(w, "training_minibatches_per_rank", r[i].steps >= 0 ? r[i].steps : NAN);
        an_jw_num(w, "validation_batches_per_rank",
                  r[i].val_batches >= 0 ? r[i].val_batches : NAN);
        an_jw_num(w, "checkpoint_writes", r[i].ckpt_writes >= 0 ? r[i].ckpt_writes : NAN);
        an_jw_obj(w, "workload");
        for (int k = 0; k < 6; k++)
            if (r[i].workload[k][0])
                an_jw_str(w, workload_keys[k], r[i].workload[k]);
        an_jw_end(w, '}');
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

void an_prof_json(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                  const an_prof_result *r, FILE *out) {
    an_jw w;
    an_jw_init(&w, out);
    an_jw_obj(&w, NULL);
    an_jw_str(&w, "tool", "scaffold compare");
    an_jw_str(&w, "kind", "profiles");
    side_json(&w, "baseline", base, nb);
    side_json(&w, "candidate", cand, nc);
    an_jw_str(&w, "verdict", r->verdict);
    an_jw_bool(&w, "does_less", r->does_less);
    an_jw_bool(&w, "work_known", r->work_known);
    an_jw_bool(&w, "same_workload", r->same_workload);
    an_jw_str(&w, "workload_difference", r->workload_diff);
    an_jw_str(&w, "time_basis", r->time_basis);
    an_jw_num(&w, "noise_band", r->noise);
    an_jw_obj(&w, "time_delta");
    an_jw_num(&w, "median", r->med);
    an_jw_num(&w, "low", r->lo);
    an_jw_num(&w, "high", r->hi);
    an_jw_end(&w, '}');
    an_jw_str(&w, "region_time_unit", r->per_step ? "s per minibatch" : "s per run");
    an_jw_arr(&w, "changed_regions");
    for (size_t i = 0; i < r->nch; i++) {
        const an_prof_change *c = &r->ch[i];
        an_jw_obj(&w, NULL);
        an_jw_str(&w, "region", c->path);
        an_jw_num(&w, "baseline", c->only == 2 ? NAN : c->base);
        an_jw_num(&w, "candidate", c->only == 1 ? NAN : c->cand);
        an_jw_num(&w, "change", c->only ? NAN : c->med);
        an_jw_str(&w, "status", c->only == 1 ? "gone" : c->only == 2 ? "new" : "changed");
        an_jw_end(&w, '}');
    }
    an_jw_end(&w, ']');
    an_jw_str(&w, "less", r->less);
    an_jw_str(&w, "reason", r->reason);
    an_jw_end(&w, '}');
    fputc('\n', out);
}
