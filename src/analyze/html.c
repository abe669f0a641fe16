/* html: the self-contained HTML report (inline CSS and SVG, no script, no external resource):
 * a timeline of process-seconds per window by category, the access-size histogram, per-process
 * I/O bars, then findings, checklist and proposals. Written atomically. */
#include "analyze/report.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void an_html_escape(FILE *o, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '&': fputs("&amp;", o); break;
        case '"': fputs("&quot;", o); break;
        default: fputc(*s, o);
        }
    }
}

/* The short name of the many calls below. */
static void esc(FILE *o, const char *s) { an_html_escape(o, s); }

static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                     "#bab0ab", "#59a14f", "#edc948", "#b07aa1"};
static const char *const SERIES[] = {"read", "write", "metadata", "sync",
                                     "other I/O", "compute", "loader wait", "checkpoint"};

static void legend(FILE *o, int n, int y) {
    for (int k = 0; k < n; k++)
        fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>",
                60 + k * 95, y, COLORS[k], 74 + k * 95, y + 9, SERIES[k]);
}

/* The opening tag of an inline chart of w x h pixels. */
static void svg_open(FILE *o, int w, int h, const char *label) {
    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "role=\"img\" aria-label=\"%s\">",
            w, h, label);
}

static void timeline(FILE *o, const an_metrics *m) {
    const int W = 900, H = 260, L = 60, B = 220, T = 20;
    size_t n = m->nwindows;
    double mx = 0;
    for (size_t w = 0; w < n; w++) {
        const an_window *x = &m->windows[w];
        double s = x->compute_s + x->fetch_s + x->ckpt_s;
        for (int k = 0; k < AN_T_COUNT; k++)
            s += x->t_s[k];
        mx = fmax(mx, s);
    }
    if (mx <= 0)
        mx = 1;
    svg_open(o, W, H + 20, "timeline");
    fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>", L, B, W - 10, B);
    fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>", L, T, L, B);
    fprintf(o, "<text x=\"4\" y=\"%d\" font-size=\"11\">%.3g s</text>", T + 8, mx);
    fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\">time (window %.3g s, %.3g s total)</text>",
            L, B + 16, m->window_s, m->wall_s);
    double bw = n ? (double)(W - 10 - L) / (double)n : 1;
    for (size_t w = 0; w < n; w++) {
        const an_window *x = &m->windows[w];
        double v[8] = {x->t_s[0], x->t_s[1], x->t_s[2], x->t_s[3],
                       x->t_s[4], x->compute_s, x->fetch_s, x->ckpt_s};
        double y = B;
        for (int k = 0; k < 8; k++) {
            double h = v[k] / mx * (B - T);
            if (h <= 0)
                continue;
            y -= h;
            fprintf(o, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                       "<title>window %zu %s %.4f s</title></rect>",
                    L + w * bw, y, bw > 1.5 ? bw - 0.5 : bw, h, COLORS[k], w, SERIES[k], v[k]);
        }
    }
    legend(o, 8, H + 2);
    fputs("</svg>", o);
}

static void histogram(FILE *o, const an_metrics *m) {
    const int W = 900, H = 230, L = 60, B = 190, T = 20;
    uint64_t mx = 1;
    for (int k = 0; k < AN_NBUCKETS; k++) {
        if (m->hist_read[k] > mx)
            mx = m->hist_read[k];
        if (m->hist_write[k] > mx)
            mx = m->hist_write[k];
    }
    svg_open(o, W, H, "access sizes");
    fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>", L, B, W - 10, B);
    fprintf(o, "<text x=\"4\" y=\"%d\" font-size=\"11\">%llu ops</text>", T + 8,
            (unsigned long long)mx);
    double gw = (double)(W - 10 - L) / AN_NBUCKETS;
    for (int k = 0; k < AN_NBUCKETS; k++) {
        double x = L + k * gw;
        double hr = (double)m->hist_read[k] / (double)mx * (B - T);
        double hw = (double)m->hist_write[k] / (double)mx * (B - T);
        fprintf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                   "<title>%s reads: %llu</title></rect>",
                x + 4, B - hr, gw / 2 - 6, hr, COLORS[0], an_bucket_names[k],
                (unsigned long long)m->hist_read[k]);
        fprintf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                   "<title>%s writes: %llu</title></rect>",
                x + gw / 2, B - hw, gw / 2 - 6, hw, COLORS[1], an_bucket_names[k],
                (unsigned long long)m->hist_write[k]);
        fprintf(o, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\">%s</text>", x + 4, B + 14,
                an_bucket_names[k]);
    }
    legend(o, 2, B + 24);
    fputs("</svg>", o);
}

static void rank_bars(FILE *o, const an_trace *t, const an_metrics *m, int top) {
    size_t n = m->nprocs < (size_t)top ? m->nprocs : (size_t)top;
    const int L = 170, W = 900, RH = 16;
    int H = (int)n * (RH + 4) + 40;
    double mx = 0;
    for (size_t p = 0; p < m->nprocs; p++) {
        const an_proc_stat *s = &m->procs[p];
        mx = fmax(mx, s->t_s[0] + s->t_s[1] + s->t_s[2] + s->t_s[3] + s->t_s[4]);
    }
    if (mx <= 0)
        mx = 1;
    svg_open(o, W, H, "per-rank I/O");
    for (size_t p = 0; p < n; p++) {
        const an_proc_stat *s = &m->procs[p];
        char lab[64];
        an_proc_label(t, (uint32_t)p, lab, sizeof lab);
        int y = 10 + (int)p * (RH + 4);
        fprintf(o, "<text x=\"4\" y=\"%d\" font-size=\"11\">", y + 12);
        esc(o, lab);
        fputs("</text>", o);
        double x = L;
        for (int k = 0; k < AN_T_COUNT; k++) {
            double w = s->t_s[k] / mx * (W - L - 80);
            if (w <= 0)
                continue;
            fprintf(o, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">"
                       "<title>%s %.4f s</title></rect>",
                    x, y, w, RH, COLORS[k], SERIES[k], s->t_s[k]);
            x += w;
        }
        fprintf(o, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\">%.3f s</text>", x + 4, y + 12,
                s->t_s[0] + s->t_s[1] + s->t_s[2] + s->t_s[3] + s->t_s[4]);
    }
    legend(o, 5, H - 14);
    fputs("</svg>", o);
}

int an_report_html(const an_report *r, const char *path, int top) {
    fs_atomic a;
    if (fs_atomic_open(&a, path))
        return err_code();
    FILE *o = a.fp;
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    char b1[32], b2[32];
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>scaffold analyze report</title><style>"
          "body{font-family:sans-serif;margin:24px;color:#222}"
          "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 8px;"
          "font-size:13px;vertical-align:top}th{background:#eee}"
          ".critical{color:#b00;font-weight:bold}.high{color:#d60}.medium{color:#a80}"
          ".na{color:#777}h2{margin-top:28px}</style></head><body>\n",
          o);
    fputs("<h1>scaffold analyze report</h1>\n<p>", o);
    fprintf(o, "%zu trace file(s), %zu events, %zu process(es) on %zu host(s), wall %.3f s. ",
            t->ninputs, t->n, m->nprocs, m->nhosts, m->wall_s);
    an_fmt_bytes((double)m->bytes_read, b1, sizeof b1);
    an_fmt_bytes((double)m->bytes_written, b2, sizeof b2);
    fprintf(o, "I/O is <b>%.1f%%</b> of process time (per-process unions of I/O intervals, "
               "%.3f s summed over processes)%s; %.3f s wall-clock union; %.3f s in I/O calls "
               "summed over %zu threads; %s read, %s written; the I/O is %s, on %s.</p>\n",
            100 * m->io_share, m->io_union_s,
            m->io_meaningful ? "" : " (not a meaningful share of the run)", m->io_wall_union_s,
            m->io_time_s, m->nthreads, b1, b2,
            m->op_count_bound ? "op-count-bound" : "bandwidth-bound", m->fs_hint);
    for (size_t i = 0; i < t->ninputs; i++)
        if (t->inputs[i].note[0]) {
            fputs("<p class=\"high\">warning: ", o);
            esc(o, t->inputs[i].path);
            fputs(": ", o);
            esc(o, t->inputs[i].note);
            fputs("</p>\n", o);
        }
    fputs("<h2>Timeline by category</h2>\n", o);
    timeline(o, m);
    fputs("\n<h2>Access sizes (Darshan buckets)</h2>\n", o);
    histogram(o, m);
    fputs("\n<h2>I/O time per process</h2>\n", o);
    rank_bars(o, t, m, top);
    fputs("\n<h2>Findings</h2>\n<table><tr><th>severity</th><th>rule</th><th>source</th>"
          "<th>at stake</th><th>details</th></tr>\n",
          o);
    size_t nb = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        const an_finding *f = &r->findings[i];
        nb += strcmp(f->severity, "info") != 0;
        fprintf(o, "<tr><td class=\"%s\">%s</td><td>", f->severity, f->severity);
        esc(o, f->rule->id);
        fputs("</td><td>", o);
        esc(o, f->rule->source);
        fprintf(o, "</td><td>%.1f%%</td><td>", f->stake_pct);
        esc(o, f->message);
        for (int e = 0; e < f->nentities; e++) {
            fputs("<br>&bull; ", o);
            esc(o, f->entities[e]);
        }
        fputs("</td></tr>\n", o);
    }
    if (!r->nfindings)
        fputs("<tr><td colspan=\"5\">No rule fired.</td></tr>\n", o);
    fputs("</table>\n", o);
    fprintf(o, "<p>%zu bottleneck finding(s).</p>\n", nb);
    fputs("<h2>12-dimension checklist</h2>\n<table><tr><th>#</th><th>dimension</th>"
          "<th>verdict</th><th>impact</th><th>reason</th></tr>\n",
          o);
    for (int d = 0; d < AN_NDIMS; d++) {
        const an_check *c = &r->checklist[d];
        fprintf(o, "<tr><td>%d</td><td>", c->dim);
        esc(o, c->name);
        if (c->applicable)
            fprintf(o, "</td><td>%s</td><td>%.1f%%</td><td>", an_verdict_names[c->verdict],
                    c->impact_pct);
        else
            fputs("</td><td class=\"na\">not applicable</td><td></td><td>", o);
        esc(o, c->reason);
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<h2>Proposals</h2>\n<table><tr><th>#</th><th>strategy</th><th>description"
          "</th><th>app impact %</th><th>system impact %</th><th>weighted score</th><th>privilege"
          "</th><th>rollback</th><th>source</th></tr>\n",
          o);
    for (size_t i = 0; i < r->nprops; i++) {
        const an_proposal *p = &r->props[i];
        fprintf(o, "<tr><td>%zu</td><td>", i + 1);
        esc(o, p->s->name);
        fputs("</td><td>", o);
        esc(o, p->s->desc);
        if (p->system_only)
            fputs(" (system-side benefit only)", o);
        fprintf(o, "</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>", p->app_pct, p->sys_pct,
                p->score);
        esc(o, p->s->privilege);
        fputs("</td><td>", o);
        esc(o, p->s->rollback);
        fputs("</td><td>", o);
        esc(o, p->s->citation);
        fputs("</td></tr>\n", o);
    }
    if (!r->nprops)
        fputs("<tr><td colspan=\"9\">Nothing to propose.</td></tr>\n", o);
    fputs("</table>\n<p>Generated by scaffold analyze.</p>\n</body></html>\n", o);
    if (ferror(o)) {
        fs_atomic_abort(&a);
        return err_set(ERR_IO, "analyze: cannot write %s", path);
    }
    return fs_atomic_commit(&a, 0);
}
