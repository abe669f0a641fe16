/* compare: run summaries and the keep/reject/inconclusive verdict (see compare.h). */
#include "analyze/compare.h"

#include "analyze/metrics.h"
#include "analyze/out.h"
#include "core/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (rc) {
        an_trace_free(&t);
        return rc;
    }
    for (size_t i = 0; i < t.ninputs; i++)
        if (t.inputs[i].note[0] && !run->warning[0])
            snprintf(run->warning, sizeof run->warning, "%s: %s", t.inputs[i].path,
                     t.inputs[i].note);
    run->wall_s = m.wall_s;
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

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef double (*getter)(const an_run *);
static double g_wall(const an_run *r) { return r->wall_s; }
static double g_epoch(const an_run *r) { return r->epoch_mean_s; }
static double g_io(const an_run *r) { return r->io_time_s; }
static double g_bw(const an_run *r) { return r->io_bw; }

/* Median, min and max of a field over runs. */
static void stats(const an_run *r, size_t n, getter g, double *med, double *mn, double *mx) {
    double v[256];
    size_t k = n < 256 ? n : 256;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (size_t i = 0; i < k; i++) {
        v[i] = g(&r[i]);
        if (v[i] < *mn)
            *mn = v[i];
        if (v[i] > *mx)
            *mx = v[i];
    }
    *med = k ? median(v, k) : 0;
}

static double umed(const an_run *r, size_t n, size_t off) {
    double v[256];
    size_t k = n < 256 ? n : 256;
    for (size_t i = 0; i < k; i++)
        v[i] = (double)*(const uint64_t *)((const char *)&r[i] + off);
    return k ? median(v, k) : 0;
}

void an_compare(const an_run *base, size_t nb, const an_run *cand, size_t nc, double min_noise,
                an_compare_result *r) {
    memset(r, 0, sizeof *r);
    double bm, bl, bh, cm, cl, ch;
    stats(base, nb, g_wall, &bm, &bl, &bh);
    stats(cand, nc, g_wall, &cm, &cl, &ch);
    /* The noise band: half the relative spread of either side's replicates, never below the
     * floor (a single replicate has no spread of its own). */
    double nbnd = bm > 0 ? 0.5 * (bh - bl) / bm : 0;
    double ncnd = cm > 0 ? 0.5 * (ch - cl) / cm : 0;
    r->noise = fmax(min_noise, fmax(nbnd, ncnd));
    r->wall_med = bm > 0 ? cm / bm - 1 : 0;
    r->wall_lo = bh > 0 ? cl / bh - 1 : 0;
    r->wall_hi = bl > 0 ? ch / bl - 1 : 0;
    double em, el, eh, fm, fl, fh;
    stats(base, nb, g_epoch, &em, &el, &eh);
    stats(cand, nc, g_epoch, &fm, &fl, &fh);
    if (em > 0 && fm > 0) {
        r->epoch_med = fm / em - 1;
        r->epoch_lo = eh > 0 ? fl / eh - 1 : 0;
        r->epoch_hi = el > 0 ? fh / el - 1 : 0;
    } else {
        r->epoch_med = r->epoch_lo = r->epoch_hi = NAN;
    }
    double im, il, ih, jm, jl, jh, wm, wl, wh, xm, xl, xh;
    stats(base, nb, g_io, &im, &il, &ih);
    stats(cand, nc, g_io, &jm, &jl, &jh);
    stats(base, nb, g_bw, &wm, &wl, &wh);
    stats(cand, nc, g_bw, &xm, &xl, &xh);
    r->io_med = im > 0 ? jm / im - 1 : 0;
    /* Guard 1: less work. Work counts are deterministic for a fixed configuration, so a 1%
     * drop is already a different amount of work. */
    struct {
        const char *name;
        size_t off;
    } work[] = {{"bytes read", offsetof(an_run, bytes_read)},
                {"bytes written", offsetof(an_run, bytes_written)},
                {"checkpoint events", offsetof(an_run, ckpt_events)},
                {"checkpoint bytes", offsetof(an_run, ckpt_bytes)},
                {"epochs", offsetof(an_run, epochs)},
                {"compute steps", offsetof(an_run, compute_events)}};
    size_t ll = 0;
    for (size_t k = 0; k < sizeof work / sizeof work[0]; k++) {
        double b = umed(base, nb, work[k].off), c = umed(cand, nc, work[k].off);
        if (b > 0 && c < 0.99 * b) {
            r->does_less = 1;
            int w = snprintf(r->less + ll, sizeof r->less - ll, "%s%s %.0f -> %.0f (%.1f%%)",
                             ll ? "; " : "", work[k].name, b, c, 100 * (c / b - 1));
            if (w > 0 && ll + (size_t)w < sizeof r->less)
                ll += (size_t)w;
        }
    }
    int faster = r->wall_hi < 0 && r->wall_med < -r->noise;
    int slower = r->wall_lo > 0 && r->wall_med > r->noise;
    int sys_gain = (im > 0 && r->io_med < -r->noise) || (wm > 0 && xm > wm * (1 + r->noise));
    if (r->does_less) {
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "does less, not faster: the candidate does less work (%s); its %+.1f%% wall "
                 "time is not a speedup of the same work",
                 r->less, 100 * r->wall_med);
    } else if (sys_gain && r->wall_med > 0.02) {
        r->guard_triggered = 1;
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "non-degradation guard: the system side improved (I/O time %+.1f%%) but the "
                 "application is %.1f%% slower (> 2%%)",
                 100 * r->io_med, 100 * r->wall_med);
    } else if (faster) {
        r->verdict = "keep";
        snprintf(r->reason, sizeof r->reason,
                 "same work, wall time %+.1f%% (range %+.1f%% .. %+.1f%%), entirely below the "
                 "baseline noise band of +-%.1f%%",
                 100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi, 100 * r->noise);
    } else if (slower) {
        r->verdict = "reject";
        snprintf(r->reason, sizeof r->reason,
                 "regression: wall time %+.1f%% (range %+.1f%% .. %+.1f%%) beyond the noise band "
                 "of +-%.1f%%",
                 100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi, 100 * r->noise);
    } else {
        r->verdict = "inconclusive";
        snprintf(r->reason, sizeof r->reason,
                 "wall time %+.1f%% (range %+.1f%% .. %+.1f%%) is within the noise band of "
                 "+-%.1f%%; run more replicates",
                 100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi, 100 * r->noise);
    }
}

static void side_text(const char *name, const an_run *r, size_t n, FILE *out) {
    fprintf(out, "%s (%zu run%s):\n", name, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        char b1[32], b2[32];
        an_fmt_bytes((double)r[i].bytes_read, b1, sizeof b1);
        an_fmt_bytes((double)r[i].bytes_written, b2, sizeof b2);
        fprintf(out, "  %s: wall %.3f s, %llu epochs (mean %.3f s), I/O %.3f s, read %s, written "
                     "%s, %llu checkpoint events, %llu compute steps\n",
                r[i].label, r[i].wall_s, (unsigned long long)r[i].epochs, r[i].epoch_mean_s,
                r[i].io_time_s, b1, b2, (unsigned long long)r[i].ckpt_events,
                (unsigned long long)r[i].compute_events);
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
    fprintf(out, "wall time: %+.1f%% (range %+.1f%% .. %+.1f%%), noise band +-%.1f%%\n",
            100 * r->wall_med, 100 * r->wall_lo, 100 * r->wall_hi, 100 * r->noise);
    if (!isnan(r->epoch_med))
        fprintf(out, "epoch time: %+.1f%% (range %+.1f%% .. %+.1f%%)\n", 100 * r->epoch_med,
                100 * r->epoch_lo, 100 * r->epoch_hi);
    fprintf(out, "I/O time: %+.1f%%\n", 100 * r->io_med);
    if (r->does_less)
        fprintf(out, "work: candidate does less: %s\n", r->less);
    else
        fprintf(out, "work: same (bytes, checkpoints, epochs, steps)\n");
    fprintf(out, "verdict: %s%s -- %s\n", r->verdict,
            r->does_less ? " (does less, not faster)" : r->guard_triggered ? " (guard)" : "",
            r->reason);
}

static void side_json(an_jw *w, const char *key, const an_run *r, size_t n) {
    an_jw_arr(w, key);
    for (size_t i = 0; i < n; i++) {
        an_jw_obj(w, NULL);
        an_jw_str(w, "run", r[i].label);
        an_jw_num(w, "wall_s", r[i].wall_s);
        an_jw_num(w, "epoch_mean_s", r[i].epoch_mean_s);
        an_jw_num(w, "io_time_s", r[i].io_time_s);
        an_jw_u64(w, "epochs", r[i].epochs);
        an_jw_u64(w, "checkpoint_events", r[i].ckpt_events);
        an_jw_u64(w, "checkpoint_bytes", r[i].ckpt_bytes);
        an_jw_u64(w, "bytes_read", r[i].bytes_read);
        an_jw_u64(w, "bytes_written", r[i].bytes_written);
        an_jw_u64(w, "compute_steps", r[i].compute_events);
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
    an_jw_num(&w, "noise_band", r->noise);
    delta_json(&w, "wall_delta", r->wall_med, r->wall_lo, r->wall_hi);
    delta_json(&w, "epoch_delta", r->epoch_med, r->epoch_lo, r->epoch_hi);
    an_jw_num(&w, "io_delta", r->io_med);
    an_jw_str(&w, "less", r->less);
    an_jw_str(&w, "reason", r->reason);
    an_jw_end(&w, '}');
    fputc('\n', out);
}
