/* compare: run summaries and the keep/reject/inconclusive verdict (see compare.h). */
#include "analyze/compare.h"

#include "analyze/metrics.h"
#include "analyze/out.h"
#include "core/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const an_phase_names[AN_PH_COUNT] = {"setup", "warmup", "training", "after"};

int an_run_load(const char *path, const an_read_opts *opts, an_run *run) {
    memset(run, 0, sizeof *run);
    snprintf(run->label, sizeof run->label, "%s", path);
    char **files = NULL;
    size_t nf = 0;
    const char *p1[1] = {path};
    int rc = an_expand_inputs(p1, 1, &files, &nf);
    if (rc)
        return rc;
    an_trace t;
    rc = an_trace_read(&t, files, nf, opts);
    for (size_t i = 0; i < nf; i++)
        free(files[i]);
    free(files);
    if (rc) {
        an_trace_free(&t);
        return rc;
    }
    an_metrics m;
    rc = an_metrics_compute(&t, 0, &m);
    if (rc == 0)
        rc = an_work_compute(&t, &m, &run->work);
    if (rc) {
        an_metrics_free(&m);
        an_trace_free(&t);
        return rc;
    }
    for (size_t i = 0; i < t.ninputs; i++)
        if (t.inputs[i].note[0] && !run->warning[0])
            snprintf(run->warning, sizeof run->warning, "%s: %s", t.inputs[i].path,
                     t.inputs[i].note);
    run->wall_s = m.wall_s;
    run->time_s = run->work.annotated ? run->work.phase_s[AN_PH_TRAIN] : m.wall_s;
    run->epoch_mean_s = m.epoch_mean_s;
    run->epochs = m.epochs;
    run->io_time_s = m.io_union_s;
    run->io_bw = m.io_union_s > 0 ? (double)(m.bytes_read + m.bytes_written) / m.io_union_s : 0;
    run->ckpt_events = m.ckpt_events;
    run->ckpt_bytes = m.ckpt_bytes;
    run->bytes_read = m.bytes_read;
    run->bytes_written = m.bytes_written;
    run->events = t.n;
    for (size_t i = 0; i < t.n; i++) {
        if (t.op[i] == AN_OP_COMPUTE)
            run->compute_events++;
        uint32_t c = t.cat[i];
        const char *cn = an_strtab_get(&t.cats, c);
        int k;
        for (k = 0; k < run->ncats; k++)
            if (!strcmp(run->cat_name[k], cn))
                break;
        if (k == run->ncats) {
            if (run->ncats == AN_CMP_CATS)
                continue;
            snprintf(run->cat_name[k], sizeof run->cat_name[k], "%s", cn);
            run->ncats++;
        }
        run->cat_events[k]++;
    }
    an_metrics_free(&m);
    an_trace_free(&t);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double an_median(double *v, size_t n) {
    if (!n)
        return NAN;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median, min and max of v[0..n) (sorts v). */
static void stats(double *v, size_t n, double *med, double *mn, double *mx) {
    *med = an_median(v, n);
    *mn = n ? v[0] : NAN;
    *mx = n ? v[n - 1] : NAN;
}

void an_delta_of(const double *base, size_t nb, const double *cand, size_t nc, double min_noise,
                 an_delta *d) {
    double b[256], c[256];
    size_t kb = 0, kc = 0;
    for (size_t i = 0; i < nb && kb < 256; i++)
        if (base[i] > 0)
            b[kb++] = base[i];
    for (size_t i = 0; i < nc && kc < 256; i++)
        if (cand[i] > 0)
            c[kc++] = cand[i];
    d->med = d->lo = d->hi = d->noise = NAN;
    if (!kb || !kc)
        return;
    double bm, bl, bh, cm, cl, ch;
    stats(b, kb, &bm, &bl, &bh);
    stats(c, kc, &cm, &cl, &ch);
    /* The noise band: half the relative spread of either side's replicates, never below the
     * floor (a single replicate has no spread of its own). */
    d->noise = fmax(min_noise, fmax(0.5 * (bh - bl) / bm, 0.5 * (ch - cl) / cm));
    d->med = cm / bm - 1;
    d->lo = cl / bh - 1;
    d->hi = ch / bl - 1;
}

int an_delta_sign(const an_delta *d) {
    if (isnan(d->med))
        return 0;
    if (d->lo > 0 && d->med > d->noise)
        return 1;
    if (d->hi < 0 && d->med < -d->noise)
        return -1;
    return 0;
}

typedef double (*getter)(const an_run *);
/* A run summarised by hand (tests, older callers) may only have its wall time. */
static double g_time(const an_run *r) { return r->time_s > 0 ? r->time_s : r->wall_s; }
static double g_epoch(const an_run *r) { return r->epoch_mean_s; }
static double g_io(const an_run *r) { return r->io_time_s; }
static double g_bw(const an_run *r) { return r->io_bw; }

static void delta(const an_run *base, size_t nb, const an_run *cand, size_t nc, getter g,
                  double min_noise, an_delta *d) {
    double b[256], c[256];
    size_t kb = nb < 256 ? nb : 256, kc = nc < 256 ? nc : 256;
    for (size_t i = 0; i < kb; i++)
        b[i] = g(&base[i]);
    for (size_t i = 0; i < kc; i++)
        c[i] = g(&cand[i]);
    an_delta_of(b, kb, c, kc, min_noise, d);
}

/* Median over runs of a uint64 field at byte offset `off`. */
static double umed(const an_run *r, size_t n, size_t off) {
    double v[256];
    size_t k = n < 256 ? n : 256;
    for (size_t i = 0; i < k; i++)
        v[i] = (double)*(const uint64_t *)((const char *)&r[i] + off);
    return k ? an_median(v, k) : 0;
}

/* The largest I/O time over a side's runs (0: no run of the side has any I/O). */
static double io_max(const an_run *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].io_time_s > m)
            m = r[i].io_time_s;
    return m;
}

static int all_known(const an_run *r, size_t n, size_t off) {
    for (size_t i = 0; i < n; i++)
        if (!*(const int *)((const char *)&r[i] + off))
            return 0;
    return 1;
}

typedef struct {
    const char *name;
    size_t off;
} work_item;

void an_compare_work(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     an_compare_result *r) {
    r->does_less = 0;
    r->less[0] = r->datapath[0] = 0;
    r->app_units = 1;
    for (size_t i = 0; i < nb + nc; i++)
        if (!(i < nb ? &base[i] : &cand[i - nb])->work.annotated)
            r->app_units = 0;
    work_item items[8];
    size_t ni = 0;
#define ITEM(n, field) items[ni++] = (work_item){n, offsetof(an_run, field)}
    if (r->app_units) {
        ITEM("epochs", work.epochs);
        int sk0 = all_known(base, nb, offsetof(an_run, work.samples_known[0])) &&
                  all_known(cand, nc, offsetof(an_run, work.samples_known[0]));
        int sk1 = all_known(base, nb, offsetof(an_run, work.samples_known[1])) &&
                  all_known(cand, nc, offsetof(an_run, work.samples_known[1]));
        if (sk0)
            ITEM("training samples", work.samples[0]);
        else
            ITEM("training batches", work.batches[0]);
        if (sk1)
            ITEM("validation samples", work.samples[1]);
        else
            ITEM("validation batches", work.batches[1]);
        if (all_known(base, nb, offsetof(an_run, work.delivered_known)) &&
            all_known(cand, nc, offsetof(an_run, work.delivered_known)))
            ITEM("bytes delivered to the application", work.delivered_bytes);
        ITEM("checkpoint events", work.ckpt_events);
        ITEM("checkpoint bytes", work.ckpt_bytes);
        /* Optimizer steps are work only at the same samples per step: a larger batch takes
         * fewer steps for the same samples (a batch-size change, judged on samples). */
        double bs = umed(base, nb, offsetof(an_run, work.steps)),
               cs = umed(cand, nc, offsetof(an_run, work.steps));
        double bsa = umed(base, nb, offsetof(an_run, work.samples[0])),
               csa = umed(cand, nc, offsetof(an_run, work.samples[0]));
        if (!sk0 || bs <= 0 || cs <= 0 || fabs((csa / cs) / (bsa / bs) - 1) < 0.01)
            ITEM("optimizer steps", work.steps);
    } else {
        ITEM("bytes read", bytes_read);
        ITEM("bytes written", bytes_written);
        ITEM("checkpoint events", ckpt_events);
        ITEM("checkpoint bytes", ckpt_bytes);
        ITEM("epochs", epochs);
        ITEM("compute steps", compute_events);
    }
#undef ITEM
    /* Work counts are deterministic for a fixed configuration, so a 1% drop is already a
     * different amount of work. */
    size_t ll = 0;
    for (size_t k = 0; k < ni; k++) {
        double b = umed(base, nb, items[k].off), c = umed(cand, nc, items[k].off);
        if (b > 0 && c < 0.99 * b) {
            r->does_less = 1;
            int w = snprintf(r->less + ll, sizeof r->less - ll, "%s%s %.0f -> %.0f (%.1f%%)",
                             ll ? "; " : "", items[k].name, b, c, 100 * (c / b - 1));
            if (w > 0 && ll + (size_t)w < sizeof r->less)
                ll += (size_t)w;
        }
    }
    if (!r->app_units || r->does_less)
        return;
    /* Same application work with fewer file-system bytes: say so, it is a data-path change. */
    double br = 0, cr = 0, bw = 0, cw = 0;
    for (int ph = 0; ph < AN_PH_COUNT; ph++) {
        br += umed(base, nb, offsetof(an_run, work.fs_read[0]) + (size_t)ph * sizeof(uint64_t));
        cr += umed(cand, nc, offsetof(an_run, work.fs_read[0]) + (size_t)ph * sizeof(uint64_t));
        bw += umed(base, nb, offsetof(an_run, work.fs_written[0]) + (size_t)ph * sizeof(uint64_t));
        cw += umed(cand, nc, offsetof(an_run, work.fs_written[0]) + (size_t)ph * sizeof(uint64_t));
    }
    /* Reported when the file-system traffic fell by more than 5%: the work was the same. */
    char parts[2][120];
    int np = 0;
    const char *what[2] = {"read", "written"};
    double from[2] = {br, bw}, to[2] = {cr, cw};
    for (int k = 0; k < 2; k++)
        if (from[k] > 0 && to[k] < 0.95 * from[k]) {
            char b1[32], b2[32];
            an_fmt_bytes(from[k], b1, sizeof b1);
            an_fmt_bytes(to[k], b2, sizeof b2);
            snprintf(parts[np++], sizeof parts[0], "%s %s -> %s (%+.0f%%)", what[k], b1, b2,
                     100 * (to[k] / from[k] - 1));
        }
    if (np)
        snprintf(r->datapath, sizeof r->datapath,
                 "file-system bytes %s%s%s for the same application work: a data-path change "
                 "(e.g. a cache, the in-memory store, a dataset generated earlier), not less work",
                 parts[0], np > 1 ? ", " : "", np > 1 ? parts[1] : "");
}

void an_compare(const an_run *base, size_t nb, const an_run *cand, size_t nc, double min_noise,
                an_compare_result *r) {
    memset(r, 0, sizeof *r);
    an_compare_work(base, nb, cand, nc, r);
    r->time_basis = r->app_units ? "training phase" : "whole run";
    an_delta dt, de, di, dw;
    delta(base, nb, cand, nc, g_time, min_noise, &dt);
    delta(base, nb, cand, nc, g_epoch, min_noise, &de);
    delta(base, nb, cand, nc, g_io, min_noise, &di);
    delta(base, nb, cand, nc, g_bw, min_noise, &dw);
    r->noise = isnan(dt.noise) ? min_noise : dt.noise;
    r->wall_med = isnan(dt.med) ? 0 : dt.med;
    r->wall_lo = isnan(dt.lo) ? 0 : dt.lo;
    r->wall_hi = isnan(dt.hi) ? 0 : dt.hi;
    r->epoch_med = de.med;
    r->epoch_lo = de.lo;
    r->epoch_hi = de.hi;
    r->io_med = isnan(di.med) ? 0 : di.med;
    /* A side without any I/O has no percentage change to show (it is not "+0.0%"). */
    r->io_none = (io_max(base, nb) <= 0 ? 1 : 0) | (io_max(cand, nc) <= 0 ? 2 : 0);
    if (r->io_none)
        r->io_med = 0;
    int sign = an_delta_sign(&dt);
    int sys_gain = (!isnan(di.med) && di.med < -r->noise) || (!isnan(dw.med) && dw.med > r->noise);
    const char *t = r->time_basis;
    if (r->does_less) {
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "does less, not faster: the candidate does less work (%s); its %+.1f%% %s time "
                 "is not a speedup of the same work",
                 r->less, 100 * r->wall_med, t);
    } else if (sys_gain && r->wall_med > fmax(0.02, r->noise)) {
        /* A slowdown inside the noise band is not evidence of a cost to the application. */
        r->guard_triggered = 1;
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "non-degradation guard: the system side improved (I/O time %+.1f%%) but the "
                 "application is %.1f%% slower (> 2%% and beyond the noise band of +-%.1f%%)",
                 100 * r->io_med, 100 * r->wall_med, 100 * r->noise);
    } else {
        r->verdict = sign < 0 ? "keep" : sign > 0 ? "reject" : "inconclusive";
        int n = snprintf(r->reason, sizeof r->reason,
                         sign < 0   ? "same work, %s time %+.1f%% (range %+.1f%% .. %+.1f%%), "
                                      "entirely below the baseline noise band of +-%.1f%%"
                         : sign > 0 ? "regression: %s time %+.1f%% (range %+.1f%% .. %+.1f%%) "
                                      "beyond the noise band of +-%.1f%%"
                                    : "%s time %+.1f%% (range %+.1f%% .. %+.1f%%) is within the "
                                      "noise band of +-%.1f%%; run more replicates",
                         t, 100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi,
                         100 * r->noise);
        if (r->datapath[0] && n > 0 && (size_t)n < sizeof r->reason)
            snprintf(r->reason + n, sizeof r->reason - (size_t)n, "; %s", r->datapath);
    }
}

/* "1.2 MiB" for known bytes, "?" otherwise. */
static const char *opt_bytes(int known, uint64_t b, char *buf, size_t cap) {
    if (!known)
        return "?";
    an_fmt_bytes((double)b, buf, cap);
    return buf;
}

static void side_text(const char *name, const an_run *r, size_t n, FILE *out) {
    fprintf(out, "%s (%zu run%s):\n", name, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        const an_work *w = &r[i].work;
        char b1[32], b2[32];
        an_fmt_bytes((double)r[i].bytes_read, b1, sizeof b1);
        an_fmt_bytes((double)r[i].bytes_written, b2, sizeof b2);
        fprintf(out, "  %s: wall %.3f s, %llu epochs (mean %.3f s), I/O %.3f s, read %s, written "
                     "%s, %llu checkpoint events, %llu compute steps\n",
                r[i].label, r[i].wall_s, (unsigned long long)r[i].epochs, r[i].epoch_mean_s,
                r[i].io_time_s, b1, b2, (unsigned long long)r[i].ckpt_events,
                (unsigned long long)r[i].compute_events);
        if (w->annotated) {
            char s0[32] = "?", s1[32] = "?", b3[32], b4[32];
            if (w->samples_known[0])
                snprintf(s0, sizeof s0, "%llu", (unsigned long long)w->samples[0]);
            if (w->samples_known[1])
                snprintf(s1, sizeof s1, "%llu", (unsigned long long)w->samples[1]);
            an_fmt_bytes((double)w->ckpt_bytes, b4, sizeof b4);
            fprintf(out, "    work: %llu epochs, %llu optimizer steps, training %llu batches "
                         "(%s samples), validation %llu batches (%s samples), delivered %s, "
                         "%llu checkpoints (%s)\n",
                    (unsigned long long)w->epochs, (unsigned long long)w->steps,
                    (unsigned long long)w->batches[0], s0, (unsigned long long)w->batches[1], s1,
                    opt_bytes(w->delivered_known, w->delivered_bytes, b3, sizeof b3),
                    (unsigned long long)w->ckpt_events, b4);
            fputs("    phases:", out);
            for (int ph = 0; ph < AN_PH_COUNT; ph++) {
                an_fmt_bytes((double)w->fs_read[ph], b1, sizeof b1);
                an_fmt_bytes((double)w->fs_written[ph], b2, sizeof b2);
                fprintf(out, "%s %s %.3f s (read %s, written %s)", ph ? ";" : "",
                        an_phase_names[ph], w->phase_s[ph], b1, b2);
            }
            fputc('\n', out);
        } else {
            fputs("    work: no epoch annotations; measured in file-system bytes\n", out);
        }
        fputs("    events:", out);
        for (int k = 0; k < r[i].ncats; k++)
            fprintf(out, " %s=%llu", r[i].cat_name[k], (unsigned long long)r[i].cat_events[k]);
        fputc('\n', out);
        if (r[i].warning[0])
            fprintf(out, "    warning: %s\n", r[i].warning);
    }
}

void an_compare_text(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out) {
    side_text("baseline", base, nb, out);
    side_text("candidate", cand, nc, out);
    fprintf(out, "%s time: %+.1f%% (range %+.1f%% .. %+.1f%%), noise band +-%.1f%%\n",
            r->time_basis, 100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi,
            100 * r->noise);
    if (!isnan(r->epoch_med))
        fprintf(out, "epoch time: %+.1f%% (range %+.1f%% .. %+.1f%%)\n", 100 * r->epoch_med,
                100 * r->epoch_lo, 100 * r->epoch_hi);
    if (r->io_none == 3)
        fprintf(out, "I/O time: neither side has I/O events\n");
    else if (r->io_none)
        fprintf(out, "I/O time: the %s has no I/O events (%s: %.3f s): no percentage change\n",
                r->io_none == 1 ? "baseline" : "candidate", r->io_none == 1 ? "candidate" : "baseline",
                io_max(r->io_none == 1 ? cand : base, r->io_none == 1 ? nc : nb));
    else
        fprintf(out, "I/O time: %+.1f%%\n", 100 * r->io_med);
    if (r->does_less)
        fprintf(out, "work: candidate does less: %s\n", r->less);
    else if (r->app_units)
        fprintf(out, "work: same (epochs, samples, steps, bytes delivered, checkpoints)%s%s\n",
                r->datapath[0] ? "; " : "", r->datapath);
    else
        fprintf(out, "work: same (bytes, checkpoints, epochs, steps)\n");
    fprintf(out, "verdict: %s%s -- %s\n", r->verdict,
            r->does_less ? " (does less, not faster)" : r->guard_triggered ? " (guard)" : "",
            r->reason);
}

static void work_json(an_jw *w, const an_work *k) {
    an_jw_obj(w, "work");
    an_jw_bool(w, "annotated", k->annotated);
    an_jw_u64(w, "epochs", k->epochs);
    an_jw_u64(w, "optimizer_steps", k->steps);
    static const char *const split[2] = {"training", "validation"};
    for (int i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_batches", split[i]);
        an_jw_u64(w, key, k->batches[i]);
        snprintf(key, sizeof key, "%s_samples", split[i]);
        an_jw_num(w, key, k->samples_known[i] ? (double)k->samples[i] : NAN);
    }
    an_jw_num(w, "delivered_bytes", k->delivered_known ? (double)k->delivered_bytes : NAN);
    an_jw_u64(w, "checkpoint_events", k->ckpt_events);
    an_jw_u64(w, "checkpoint_bytes", k->ckpt_bytes);
    an_jw_obj(w, "phases");
    for (int ph = 0; ph < AN_PH_COUNT; ph++) {
        an_jw_obj(w, an_phase_names[ph]);
        an_jw_num(w, "time_s", k->phase_s[ph]);
        an_jw_u64(w, "fs_bytes_read", k->fs_read[ph]);
        an_jw_u64(w, "fs_bytes_written", k->fs_written[ph]);
        an_jw_end(w, '}');
    }
    an_jw_end(w, '}');
    an_jw_end(w, '}');
}

static void side_json(an_jw *w, const char *key, const an_run *r, size_t n) {
    an_jw_arr(w, key);
    for (size_t i = 0; i < n; i++) {
        an_jw_obj(w, NULL);
        an_jw_str(w, "run", r[i].label);
        an_jw_num(w, "wall_s", r[i].wall_s);
        an_jw_num(w, "time_s", r[i].time_s);
        an_jw_num(w, "epoch_mean_s", r[i].epoch_mean_s);
        an_jw_num(w, "io_time_s", r[i].io_time_s);
        an_jw_u64(w, "epochs", r[i].epochs);
        an_jw_u64(w, "checkpoint_events", r[i].ckpt_events);
        an_jw_u64(w, "checkpoint_bytes", r[i].ckpt_bytes);
        an_jw_u64(w, "bytes_read", r[i].bytes_read);
        an_jw_u64(w, "bytes_written", r[i].bytes_written);
        an_jw_u64(w, "compute_steps", r[i].compute_events);
        work_json(w, &r[i].work);
        an_jw_obj(w, "events");
        for (int k = 0; k < r[i].ncats; k++)
            an_jw_u64(w, r[i].cat_name[k], r[i].cat_events[k]);
        an_jw_end(w, '}');
        an_jw_str(w, "warning", r[i].warning);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void delta_json(an_jw *w, const char *key, double med, double lo, double hi) {
    an_jw_obj(w, key);
    an_jw_num(w, "median", med);
    an_jw_num(w, "low", lo);
    an_jw_num(w, "high", hi);
    an_jw_end(w, '}');
}

void an_compare_json(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out) {
    an_jw w;
    an_jw_init(&w, out);
    an_jw_obj(&w, NULL);
    an_jw_str(&w, "tool", "scaffold compare");
    side_json(&w, "baseline", base, nb);
    side_json(&w, "candidate", cand, nc);
    an_jw_str(&w, "verdict", r->verdict);
    an_jw_bool(&w, "does_less", r->does_less);
    an_jw_bool(&w, "guard_triggered", r->guard_triggered);
    an_jw_str(&w, "work_units", r->app_units ? "application" : "file-system bytes");
    an_jw_str(&w, "time_basis", r->time_basis);
    an_jw_num(&w, "noise_band", r->noise);
    delta_json(&w, "wall_delta", r->wall_med, r->wall_lo, r->wall_hi);
    delta_json(&w, "epoch_delta", r->epoch_med, r->epoch_lo, r->epoch_hi);
    an_jw_num(&w, "io_delta", r->io_none ? NAN : r->io_med);
    an_jw_str(&w, "io_note", r->io_none == 3 ? "neither side has I/O events"
                             : r->io_none == 1 ? "the baseline has no I/O events"
                             : r->io_none == 2 ? "the candidate has no I/O events" : "");
    an_jw_str(&w, "less", r->less);
    an_jw_str(&w, "data_path", r->datapath);
    an_jw_str(&w, "reason", r->reason);
    an_jw_end(&w, '}');
    fputc('\n', out);
}
