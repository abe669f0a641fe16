/* report: the text and JSON renderings of the analysis report (see report.h). Every time figure
 * says what it sums: the wall-clock union of I/O intervals, the per-process unions summed over
 * processes, or call durations summed over threads. */
#include "analyze/report.h"

#include "core/err.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ text */

static void text_rule(FILE *out, const char *title) {
    fprintf(out, "\n== %s\n", title);
}

/* The first line, then a warning per damaged file, the clock skew and the left-out events. */
static void text_header(const an_trace *t, const an_metrics *m, FILE *out) {
    fprintf(out, "scaffold analyze: %zu file(s), %zu events, %zu process(es) on %zu host(s), "
                 "%zu thread(s), wall %.3f s\n",
            t->ninputs, t->n, m->nprocs, m->nhosts, m->nthreads, m->wall_s);
    for (size_t i = 0; i < t->ninputs; i++)
        if (t->inputs[i].note[0])
            fprintf(out, "  warning: %s: %s\n", t->inputs[i].path, t->inputs[i].note);
    if (t->clock_skew)
        fprintf(out, "  warning: clock skew between hosts: first timestamps spread %.1f s "
                     "(std-dev > 30 s); cross-host timing is unreliable\n",
                t->host_start_stddev_s);
    if (m->nignored_events)
        fprintf(out, "  note: %zu events on system paths (/usr/lib, /proc, python, ...) left out "
                     "(--include-system keeps them)\n",
                m->nignored_events);
}

/* Where the I/O time went: time, file system, ops, shape, interfaces, access pattern, sizes. */
static void text_io_summary(const an_metrics *m, FILE *out) {
    char b1[32], b2[32], b3[32];
    text_rule(out, "I/O summary");
    an_fmt_bytes((double)m->bytes_read, b1, sizeof b1);
    an_fmt_bytes((double)m->bytes_written, b2, sizeof b2);
    an_fmt_bytes(m->mean_xfer, b3, sizeof b3);
    fprintf(out, "  I/O time, wall-clock: %.3f s during which some process was in I/O (union of "
                 "all I/O intervals), %.1f%% of %.3f s wall\n",
            m->io_wall_union_s, m->wall_s > 0 ? 100 * m->io_wall_union_s / m->wall_s : 0, m->wall_s);
    fprintf(out, "  I/O time, per process: %.3f s summed over %zu process(es) of each one's union "
                 "of I/O intervals, %.1f%% of %.3f s process time%s\n",
            m->io_union_s, m->nprocs, 100 * m->io_share, m->proc_time_s,
            m->io_meaningful ? "" : "  -> NOT a meaningful share of the run: fixes cannot gain much");
    fprintf(out, "  time in I/O calls, summed over %zu thread(s): %.3f s = read %.3f s, write %.3f "
                 "s, metadata %.3f s, sync %.3f s, other %.3f s%s\n",
            m->nthreads, m->io_time_s, m->t_s[AN_T_READ], m->t_s[AN_T_WRITE], m->t_s[AN_T_META],
            m->t_s[AN_T_SYNC], m->t_s[AN_T_OTHER],
            m->io_time_s > m->io_union_s * 1.01 ? " (concurrent calls count once each)" : "");
    static const char *const how[] = {"nothing tells", "guessed from paths",
                                      "recorded by the tracer", "from --fs-type"};
    fprintf(out, "  file system: %s (%.0f%% of I/O time; %s)\n", m->fs_hint, 100 * m->fs_share,
            how[m->fs_how < 4 ? m->fs_how : 0]);
    fprintf(out, "  ops: read %llu, write %llu, metadata %llu, sync %llu; bytes read %s, written %s, "
                 "mean transfer %s\n",
            (unsigned long long)m->ops[AN_T_READ], (unsigned long long)m->ops[AN_T_WRITE],
            (unsigned long long)m->ops[AN_T_META], (unsigned long long)m->ops[AN_T_SYNC], b1, b2,
            b3);
    fprintf(out, "  shape: %s (%.0f%% of I/O time in metadata and < 64 KiB transfers)\n",
            m->op_count_bound ? "op-count-bound" : "bandwidth-bound",
            m->io_time_s > 0 ? 100 * (m->t_s[AN_T_META] + m->small_time_s) / m->io_time_s : 0);
    double tot = (double)(m->stdio_bytes + m->posix_bytes + m->mpiio_bytes);
    fprintf(out, "  interfaces: POSIX %llu ops, STDIO %llu ops (%.1f%% of bytes, %.3f s)\n",
            (unsigned long long)m->posix_ops, (unsigned long long)m->stdio_ops,
            tot > 0 ? 100 * (double)m->stdio_bytes / tot : 0, m->stdio_time_s);
    uint64_t rc = m->read_classified, wc = m->write_classified;
    fprintf(out, "  access pattern: reads %llu classified: %.0f%% consecutive, %.0f%% sequential, "
                 "%.0f%% random; writes %llu: %.0f%% / %.0f%% / %.0f%%\n",
            (unsigned long long)rc, rc ? 100.0 * (double)m->read_consec / (double)rc : 0,
            rc ? 100.0 * (double)m->read_seq / (double)rc : 0,
            rc ? 100.0 * (double)m->read_random / (double)rc : 0, (unsigned long long)wc,
            wc ? 100.0 * (double)m->write_consec / (double)wc : 0,
            wc ? 100.0 * (double)m->write_seq / (double)wc : 0,
            wc ? 100.0 * (double)m->write_random / (double)wc : 0);
    fprintf(out, "  access sizes (Darshan buckets, reads/writes):");
    for (int k = 0; k < AN_NBUCKETS; k++)
        if (m->hist_read[k] || m->hist_write[k])
            fprintf(out, " %s:%llu/%llu", an_bucket_names[k], (unsigned long long)m->hist_read[k],
                    (unsigned long long)m->hist_write[k]);
    fputc('\n', out);
}

/* The I/O against the rest of the run: overlap, epochs, checkpoints, rank imbalance. */
static void text_io_context(const an_metrics *m, FILE *out) {
    char b1[32], b2[32];
    if (m->has_compute || m->has_fetch)
        fprintf(out, "  overlap: compute utilisation %.1f%%, unoverlapped I/O %.3f s (%.1f%% of I/O), "
                     "data-loader stall %.3f s (%.1f%% of process time)\n",
                100 * m->compute_util, m->unoverlapped_io_s,
                m->io_union_s > 0 ? 100 * m->unoverlapped_io_s / m->io_union_s : 0, m->stall_s,
                m->proc_time_s > 0 ? 100 * m->stall_s / m->proc_time_s : 0);
    else
        fprintf(out, "  overlap: no compute/data-loader annotations in the trace\n");
    if (m->epochs)
        fprintf(out, "  epochs: %llu, mean %.3f s (min %.3f, max %.3f, first %.3f, last %.3f)\n",
                (unsigned long long)m->epochs, m->epoch_mean_s, m->epoch_min_s, m->epoch_max_s,
                m->epoch_first_s, m->epoch_last_s);
    if (m->ckpt_time_s > 0 || m->ckpt_events) {
        an_fmt_bytes((double)m->ckpt_bytes, b1, sizeof b1);
        an_fmt_bytes(m->ckpt_bw, b2, sizeof b2);
        fprintf(out, "  checkpoints: %llu events, %s, %.3f s (%.1f%% of wall), %s/s\n",
                (unsigned long long)m->ckpt_events, b1, m->ckpt_time_s,
                m->wall_s > 0 ? 100 * m->ckpt_time_s / m->wall_s : 0, b2);
    }
    if (m->nprocs > 1)
        fprintf(out, "  ranks: I/O time outside checkpoints max %.3f s, median %.3f s, min %.3f s "
                     "(straggler ratio %.1f%%), byte imbalance %.1f%%\n",
                m->io_max_s, m->io_median_s, m->io_min_s, 100 * m->straggler_ratio,
                100 * m->bytes_imbalance);
}

/* The MPI section: time in MPI, the top calls and each rank's share. */
static void text_mpi(const an_trace *t, const an_metrics *m, FILE *out, int top) {
    char b1[32];
    text_rule(out, "MPI");
    fprintf(out, "  time in MPI calls: %.3f s summed over ranks, %.1f%% of their process time; "
                 "waiting for the last rank in collectives: %.3f s (%llu of %llu instances "
                 "seen on every member)\n",
            m->mpi_s, m->mpi_proc_time_s > 0 ? 100 * m->mpi_s / m->mpi_proc_time_s : 0,
            m->coll_wait_s, (unsigned long long)m->coll_complete,
            (unsigned long long)m->coll_instances);
    for (size_t k = 0; k < m->nmpi_calls && k < (size_t)top; k++) {
        const an_mpi_call *c = &m->mpi_calls[k];
        an_fmt_bytes((double)c->bytes, b1, sizeof b1);
        fprintf(out, "  %-26s %8llu calls %10.3f s %10s", an_strtab_get(&t->names, c->name),
                (unsigned long long)c->calls, c->time_s, b1);
        if (c->instances)
            fprintf(out, "  wait %.3f s, mean skew %.3f ms", c->wait_s,
                    1e3 * c->skew_sum_s / (double)c->instances);
        fputc('\n', out);
    }
    for (size_t p = 0; p < m->nprocs; p++) {
        const an_proc_stat *st = &m->procs[p];
        if (!st->mpi_calls)
            continue;
        char lab[64];
        an_proc_label(t, (uint32_t)p, lab, sizeof lab);
        fprintf(out, "  %-12s MPI %.3f s (%.1f%% of %.3f s), waiting %.3f s, last to arrive %llu "
                     "time(s)%s\n",
                lab, st->mpi_s, st->span_s > 0 ? 100 * st->mpi_s / st->span_s : 0, st->span_s,
                st->mpi_wait_s, (unsigned long long)st->mpi_last,
                st->cpu_want >= 0 ? (st->cpu_want >= 0.7 ? ", CPU-bound" : st->cpu_want <= 0.2 ? ", waiting" : "") : "");
    }
}

/* The fired rules (info ones after the rest); returns how many are bottlenecks (neither
 * info nor guard), which the summary line counts. */
static size_t text_findings(const an_report *r, FILE *out) {
    text_rule(out, "Findings");
    size_t nb = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        const an_finding *f = &r->findings[i];
        if (!strcmp(f->severity, "info"))
            continue;
        nb += strcmp(f->severity, "guard") != 0;
        fprintf(out, "  [%s] %s (%s) -- %.1f%% of run time at stake, category %s\n", f->severity,
                f->rule->id, f->rule->source, f->stake_pct, f->category);
        fprintf(out, "      %s\n", f->message);
        for (int e = 0; e < f->nentities; e++)
            fprintf(out, "      - %s\n", f->entities[e]);
    }
    if (!nb)
        fprintf(out, "  none: no bottleneck rule fired\n");
    for (size_t i = 0; i < r->nfindings; i++)
        if (!strcmp(r->findings[i].severity, "info"))
            fprintf(out, "  [info] %s: %s\n", r->findings[i].rule->id, r->findings[i].message);
    return nb;
}

static void text_checklist(const an_report *r, FILE *out) {
    text_rule(out, "12-dimension checklist");
    for (int d = 0; d < AN_NDIMS; d++) {
        const an_check *c = &r->checklist[d];
        if (c->verdict == AN_V_APP)
            fprintf(out, "  %2d. %-52s APPLICABLE (~%.1f%% of run time): %s\n", c->dim, c->name,
                    c->impact_pct, c->reason);
        else if (c->verdict == AN_V_SYSTEM)
            fprintf(out, "  %2d. %-52s APPLICABLE FOR THE SYSTEM, NOT THE APPLICATION: %s\n", c->dim,
                    c->name, c->reason);
        else if (c->verdict == AN_V_MEASURED)
            fprintf(out, "  %2d. %-52s APPLIED & MEASURED: %s\n", c->dim, c->name, c->reason);
        else
            fprintf(out, "  %2d. %-52s not applicable: %s\n", c->dim, c->name, c->reason);
    }
}

static void text_proposals(const an_report *r, FILE *out) {
    text_rule(out, "Proposals (weighted score = 50% app impact + 50% system impact)");
    if (!r->nprops)
        fprintf(out, "  none: nothing to fix\n");
    else
        fprintf(out, "  %-3s %-38s %8s %8s %8s  %s\n", "#", "strategy", "app %", "sys %", "score",
                "source");
    for (size_t i = 0; i < r->nprops; i++) {
        const an_proposal *p = &r->props[i];
        char fsl[64];
        an_strategy_fs(p->s, fsl, sizeof fsl);
        fprintf(out, "  %-3zu %-38s %8.1f %8.1f %8.1f  %s\n", i + 1, p->s->name, p->app_pct,
                p->sys_pct, p->score, p->s->source);
        fprintf(out, "      %s (dimension %d; for %s; system: %s)\n", p->s->desc, p->s->dim,
                p->findings, p->sys_basis);
        if (p->system_only)
            fprintf(out, "      system-side benefit only: the application gains %.1f%% of run "
                         "time\n", p->app_pct);
        fprintf(out, "      privilege: %s; file systems: %s; apply: %s; rollback: %s\n",
                p->s->privilege, fsl, p->s->apply, p->s->rollback);
    }
}

static void text_top_procs(const an_trace *t, const an_metrics *m, FILE *out, int top) {
    char b1[32];
    text_rule(out, "Top processes by I/O time");
    /* Simple selection of the top processes. */
    size_t shown = 0;
    uint8_t *done = calloc(m->nprocs + 1, 1);
    while (done && shown < (size_t)top && shown < m->nprocs) {
        size_t best = SIZE_MAX;
        for (size_t p = 0; p < m->nprocs; p++)
            if (!done[p] && (best == SIZE_MAX || m->procs[p].io_s > m->procs[best].io_s))
                best = p;
        done[best] = 1;
        shown++;
        const an_proc_stat *st = &m->procs[best];
        char lab[64];
        an_proc_label(t, (uint32_t)best, lab, sizeof lab);
        an_fmt_bytes((double)(st->read_bytes + st->write_bytes), b1, sizeof b1);
        fprintf(out, "  %-24s io %.3f s (r %.3f w %.3f m %.3f) of %.3f s, %s, %llu ops\n", lab,
                st->io_s, st->t_s[AN_T_READ], st->t_s[AN_T_WRITE], st->t_s[AN_T_META], st->span_s,
                b1, (unsigned long long)st->ops);
    }
    free(done);
}

static void text_top_files(const an_trace *t, const an_metrics *m, FILE *out, int top) {
    char b1[32];
    text_rule(out, "Top files by I/O time");
    for (size_t k = 0; k < m->nfiles && k < (size_t)top; k++) {
        const an_file_stat *fs = &m->files[k];
        an_fmt_bytes((double)(fs->bytes_read + fs->bytes_written), b1, sizeof b1);
        fprintf(out, "  %.3f s  %8llu ops  %10s  %s%s\n", fs->time_s, (unsigned long long)fs->ops,
                b1, an_strtab_get(&t->files, fs->file), fs->nprocs > 1 ? " (shared)" : "");
    }
}

void an_report_text(const an_report *r, FILE *out, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    text_header(t, m, out);
    text_io_summary(m, out);
    text_io_context(m, out);
    if (m->has_mpi)
        text_mpi(t, m, out, top);
    fprintf(out, "  measured phase: %s, %.3f s\n", m->phase_what ? m->phase_what : "whole run",
            m->phase_s);
    size_t nb = text_findings(r, out);
    text_checklist(r, out);
    text_proposals(r, out);
    text_top_procs(t, m, out, top);
    text_top_files(t, m, out, top);
    fprintf(out, "\nsummary: %zu events, I/O %.1f%% of process time (per-process unions), %zu finding(s), top proposal: %s\n", t->n,
            100 * m->io_share, nb, r->nprops ? r->props[0].s->name : "none");
}

/* ------------------------------------------------------------------ JSON */

static void json_inputs(an_jw *w, const an_trace *t) {
    an_jw_arr(w, "inputs");
    for (size_t i = 0; i < t->ninputs; i++) {
        const an_input *in = &t->inputs[i];
        an_jw_obj(w, NULL);
        an_jw_str(w, "path", in->path);
        an_jw_u64(w, "events", in->events);
        an_jw_u64(w, "lines", in->lines);
        an_jw_u64(w, "malformed", in->malformed);
        an_jw_u64(w, "gzip_members", in->members);
        an_jw_bool(w, "truncated", in->truncated);
        an_jw_bool(w, "failed", in->failed);
        an_jw_u64(w, "unknown_metadata", in->unknown_meta);
        an_jw_u64(w, "out_of_range", in->out_of_range);
        an_jw_bool(w, "empty", in->empty);
        an_jw_str(w, "shape", in->shape2 ? "2.x" : in->lines ? "1.x" : "");
        an_jw_u64(w, "calls", in->calls);
        an_jw_bool(w, "end_record", in->has_end);
        if (in->has_count)
            an_jw_u64(w, "end_num_events", in->num_events);
        an_jw_str(w, "note", in->note);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void json_u64s(an_jw *w, const char *key, const uint64_t *v, int n) {
    an_jw_arr(w, key);
    for (int k = 0; k < n; k++)
        an_jw_u64(w, NULL, v[k]);
    an_jw_end(w, ']');
}

static void json_pattern(an_jw *w, const char *key, uint64_t cls, uint64_t con, uint64_t seq,
                         uint64_t rnd) {
    an_jw_obj(w, key);
    an_jw_u64(w, "classified", cls);
    an_jw_u64(w, "consecutive", con);
    an_jw_u64(w, "sequential", seq);
    an_jw_u64(w, "random", rnd);
    an_jw_end(w, '}');
}

static void json_io(an_jw *w, const an_metrics *m) {
    static const char *const tn[AN_T_COUNT] = {"read", "write", "metadata", "sync", "other"};
    an_jw_obj(w, "io");
    an_jw_num(w, "share", m->io_share);
    an_jw_bool(w, "meaningful", m->io_meaningful);
    an_jw_num(w, "union_s", m->io_union_s);
    an_jw_num(w, "wall_union_s", m->io_wall_union_s);
    an_jw_num(w, "summed_s", m->io_time_s);
    an_jw_obj(w, "labels");
    an_jw_str(w, "union_s", "per-process unions of I/O intervals, summed over processes; "
                            "share = union_s / process_time_s");
    an_jw_str(w, "wall_union_s", "wall-clock union of every I/O interval of the job");
    an_jw_str(w, "summed_s", "durations of I/O calls summed over threads (time_s splits it)");
    an_jw_end(w, '}');
    an_jw_obj(w, "time_s");
    for (int k = 0; k < AN_T_COUNT; k++)
        an_jw_num(w, tn[k], m->t_s[k]);
    an_jw_end(w, '}');
    an_jw_obj(w, "ops");
    for (int k = 0; k < AN_T_COUNT; k++)
        an_jw_u64(w, tn[k], m->ops[k]);
    an_jw_end(w, '}');
    an_jw_u64(w, "bytes_read", m->bytes_read);
    an_jw_u64(w, "bytes_written", m->bytes_written);
    an_jw_num(w, "mean_transfer", m->mean_xfer);
    an_jw_str(w, "shape", m->op_count_bound ? "op-count-bound" : "bandwidth-bound");
    an_jw_obj(w, "stdio");
    an_jw_u64(w, "ops", m->stdio_ops);
    an_jw_u64(w, "bytes", m->stdio_bytes);
    an_jw_num(w, "time_s", m->stdio_time_s);
    an_jw_end(w, '}');
    an_jw_obj(w, "posix");
    an_jw_u64(w, "ops", m->posix_ops);
    an_jw_u64(w, "bytes", m->posix_bytes);
    an_jw_end(w, '}');
    an_jw_obj(w, "histogram");
    an_jw_arr(w, "buckets");
    for (int k = 0; k < AN_NBUCKETS; k++)
        an_jw_str(w, NULL, an_bucket_names[k]);
    an_jw_end(w, ']');
    json_u64s(w, "read", m->hist_read, AN_NBUCKETS);
    json_u64s(w, "write", m->hist_write, AN_NBUCKETS);
    an_jw_end(w, '}');
    an_jw_obj(w, "access_pattern");
    json_pattern(w, "read", m->read_classified, m->read_consec, m->read_seq, m->read_random);
    json_pattern(w, "write", m->write_classified, m->write_consec, m->write_seq, m->write_random);
    an_jw_end(w, '}');
    an_jw_end(w, '}');
}

static void json_findings(an_jw *w, const an_report *r) {
    an_jw_arr(w, "findings");
    for (size_t i = 0; i < r->nfindings; i++) {
        const an_finding *f = &r->findings[i];
        an_jw_obj(w, NULL);
        an_jw_str(w, "id", f->rule->id);
        an_jw_str(w, "source", f->rule->source);
        an_jw_str(w, "citation", f->rule->citation);
        an_jw_str(w, "severity", f->severity);
        an_jw_str(w, "category", f->category);
        an_jw_num(w, "value", f->value);
        an_jw_num(w, "threshold", f->rule->threshold);
        an_jw_num(w, "stake_pct", f->stake_pct);
        an_jw_str(w, "message", f->message);
        an_jw_arr(w, "entities");
        for (int e = 0; e < f->nentities; e++)
            an_jw_str(w, NULL, f->entities[e]);
        an_jw_end(w, ']');
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_str(w, "not_evaluated", r->skipped ? r->skipped : "");
}

static void json_checklist_proposals(an_jw *w, const an_report *r) {
    an_jw_arr(w, "checklist");
    for (int d = 0; d < AN_NDIMS; d++) {
        const an_check *c = &r->checklist[d];
        an_jw_obj(w, NULL);
        an_jw_i64(w, "dim", c->dim);
        an_jw_str(w, "name", c->name);
        an_jw_str(w, "verdict", an_verdict_names[c->verdict]);
        an_jw_num(w, "impact_pct", c->applicable ? c->impact_pct : 0);
        an_jw_num(w, "system_impact_pct", c->applicable ? c->sys_pct : 0);
        an_jw_str(w, "reason", c->reason);
        if (c->lever) {
            const an_lever *l = c->lever;
            an_jw_obj(w, "lever");
            an_jw_str(w, "name", l->name);
            an_jw_str(w, "value", l->value);
            an_jw_str(w, "verdict", l->verdict);
            an_jw_num(w, "gain", l->gain);
            an_jw_num(w, "band", l->band);
            an_jw_str(w, "reason", l->reason);
            an_jw_end(w, '}');
        }
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "proposals");
    for (size_t i = 0; i < r->nprops; i++) {
        const an_proposal *p = &r->props[i];
        an_jw_obj(w, NULL);
        an_jw_u64(w, "rank", i + 1);
        an_jw_str(w, "strategy", p->s->name);
        an_jw_str(w, "key", p->s->key);
        an_jw_str(w, "description", p->s->desc);
        an_jw_i64(w, "dimension", p->s->dim);
        an_jw_num(w, "app_impact_pct", p->app_pct);
        an_jw_num(w, "system_impact_pct", p->sys_pct);
        an_jw_num(w, "weighted_score", p->score);
        an_jw_str(w, "source", p->s->source);
        an_jw_str(w, "citation", p->s->citation);
        an_jw_str(w, "for", p->findings);
        an_jw_str(w, "system_basis", p->sys_basis);
        an_jw_bool(w, "system_only", p->system_only);
        an_jw_str(w, "checklist_verdict", an_verdict_names[r->checklist[p->s->dim - 1].verdict]);
        char fsl[64];
        an_strategy_fs(p->s, fsl, sizeof fsl);
        an_jw_str(w, "filesystems", fsl);
        an_jw_str(w, "privilege", p->s->privilege);
        an_jw_str(w, "apply", p->s->apply);
        an_jw_str(w, "rollback", p->s->rollback);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void json_tables(an_jw *w, const an_report *r, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    an_jw_arr(w, "processes");
    for (size_t p = 0; p < m->nprocs && p < (size_t)(top * 20); p++) {
        const an_proc_stat *st = &m->procs[p];
        char lab[64];
        an_proc_label(t, (uint32_t)p, lab, sizeof lab);
        an_jw_obj(w, NULL);
        an_jw_str(w, "label", lab);
        an_jw_i64(w, "pid", t->procs[p].pid);
        an_jw_i64(w, "rank", t->procs[p].rank);
        an_jw_str(w, "exe", t->procs[p].exe);
        an_jw_bool(w, "launcher", t->procs[p].launcher);
        an_jw_u64(w, "records", t->procs[p].records);
        an_jw_num(w, "mpi_s", st->mpi_s);
        an_jw_num(w, "mpi_wait_s", st->mpi_wait_s);
        an_jw_u64(w, "mpi_calls", st->mpi_calls);
        an_jw_u64(w, "mpi_last_arrivals", st->mpi_last);
        an_jw_num(w, "cpu_util", st->cpu_util >= 0 ? st->cpu_util : NAN);
        an_jw_num(w, "cpu_want", st->cpu_want >= 0 ? st->cpu_want : NAN);
        an_jw_str(w, "cpu_class", st->cpu_want < 0 ? "" : st->cpu_want >= 0.7 ? "cpu-bound"
                                  : st->cpu_want <= 0.2 ? "waiting" : "mixed");
        an_jw_num(w, "io_s", st->io_s);
        an_jw_num(w, "io_outside_checkpoint_s", st->io_nockpt_s);
        an_jw_num(w, "read_s", st->t_s[AN_T_READ]);
        an_jw_num(w, "write_s", st->t_s[AN_T_WRITE]);
        an_jw_num(w, "metadata_s", st->t_s[AN_T_META]);
        an_jw_num(w, "span_s", st->span_s);
        an_jw_num(w, "compute_s", st->compute_s);
        an_jw_num(w, "stall_s", st->stall_s);
        an_jw_u64(w, "bytes_read", st->read_bytes);
        an_jw_u64(w, "bytes_written", st->write_bytes);
        an_jw_u64(w, "ops", st->ops);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "files");
    for (size_t k = 0; k < m->nfiles && k < (size_t)top; k++) {
        const an_file_stat *fs = &m->files[k];
        an_jw_obj(w, NULL);
        an_jw_str(w, "path", an_strtab_get(&t->files, fs->file));
        an_jw_num(w, "time_s", fs->time_s);
        an_jw_num(w, "metadata_s", fs->t_s[AN_T_META]);
        an_jw_u64(w, "ops", fs->ops);
        an_jw_u64(w, "bytes_read", fs->bytes_read);
        an_jw_u64(w, "bytes_written", fs->bytes_written);
        an_jw_u64(w, "random", fs->random);
        an_jw_u64(w, "classified", fs->classified);
        an_jw_u64(w, "processes", fs->nprocs);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_obj(w, "windows");
    an_jw_num(w, "width_s", m->window_s);
    an_jw_arr(w, "rows");
    for (size_t k = 0; k < m->nwindows; k++) {
        const an_window *win = &m->windows[k];
        an_jw_arr(w, NULL);
        for (int c = 0; c < AN_T_COUNT; c++)
            an_jw_num(w, NULL, win->t_s[c]);
        an_jw_num(w, NULL, win->compute_s);
        an_jw_num(w, NULL, win->fetch_s);
        an_jw_num(w, NULL, win->ckpt_s);
        an_jw_u64(w, NULL, win->bytes_read);
        an_jw_u64(w, NULL, win->bytes_written);
        an_jw_end(w, ']');
    }
    an_jw_end(w, ']');
    static const char *const cols[] = {"read_s",    "write_s", "metadata_s",   "sync_s",
                                       "other_s",   "compute_s", "fetch_s",    "checkpoint_s",
                                       "bytes_read", "bytes_written"};
    an_jw_arr(w, "columns");
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++)
        an_jw_str(w, NULL, cols[k]);
    an_jw_end(w, ']');
    an_jw_end(w, '}');
}

static void json_run(an_jw *w, const an_trace *t, const an_metrics *m) {
    an_jw_obj(w, "run");
    an_jw_u64(w, "events", t->n);
    an_jw_u64(w, "processes", m->nprocs);
    an_jw_u64(w, "hosts", m->nhosts);
    an_jw_u64(w, "threads", m->nthreads);
    an_jw_u64(w, "files", m->nfiles_io);
    an_jw_num(w, "wall_s", m->wall_s);
    an_jw_num(w, "process_time_s", m->proc_time_s);
    an_jw_bool(w, "clock_skew", t->clock_skew);
    an_jw_num(w, "host_start_stddev_s", t->host_start_stddev_s);
    an_jw_u64(w, "ignored_system_events", m->nignored_events);
    an_jw_num(w, "load_seconds", t->load_seconds);
    an_jw_end(w, '}');
}

/* Records as dftracer_stats counts them (every line but metadata; an aggregated record is one),
 * per lower-cased category and per pid, to compare with it. */
static void json_records(an_jw *w, const an_trace *t) {
    an_jw_obj(w, "records");
    an_jw_u64(w, "total", t->records);
    an_jw_u64(w, "out_of_range_skipped", t->out_of_range);
    an_jw_obj(w, "by_category");
    for (uint32_t k = 1; k < t->rec_cats.n; k++)
        an_jw_u64(w, an_strtab_get(&t->rec_cats, k), t->rec_cat_n[k]);
    if (t->rec_cats.n && t->rec_cat_n && t->rec_cat_n[0])
        an_jw_u64(w, "", t->rec_cat_n[0]);
    an_jw_end(w, '}');
    an_jw_obj(w, "by_pid");
    for (size_t p = 0; p < t->nprocs; p++) {
        size_t q = 0;
        while (q < p && t->procs[q].pid != t->procs[p].pid)
            q++;
        if (q < p)
            continue; /* one entry per pid (several hosts may share one) */
        uint64_t sum = 0;
        for (q = p; q < t->nprocs; q++)
            if (t->procs[q].pid == t->procs[p].pid)
                sum += t->procs[q].records;
        char k[32];
        snprintf(k, sizeof k, "%lld", (long long)t->procs[p].pid);
        an_jw_u64(w, k, sum);
    }
    an_jw_end(w, '}');
    an_jw_end(w, '}');
}

/* The MPI object: totals, every call's row and the linked cause of the collective waits. */
static void json_mpi(an_jw *w, const an_trace *t, const an_metrics *m) {
    an_jw_obj(w, "mpi");
    an_jw_bool(w, "present", m->has_mpi);
    an_jw_num(w, "time_s", m->mpi_s);
    an_jw_num(w, "share_of_process_time", m->mpi_proc_time_s > 0 ? m->mpi_s / m->mpi_proc_time_s : 0);
    an_jw_num(w, "collective_wait_s", m->coll_wait_s);
    an_jw_u64(w, "collective_instances", m->coll_instances);
    an_jw_u64(w, "complete_instances", m->coll_complete);
    an_jw_arr(w, "calls");
    for (size_t k = 0; k < m->nmpi_calls; k++) {
        const an_mpi_call *c = &m->mpi_calls[k];
        an_jw_obj(w, NULL);
        an_jw_str(w, "name", an_strtab_get(&t->names, c->name));
        an_jw_u64(w, "calls", c->calls);
        an_jw_num(w, "time_s", c->time_s);
        an_jw_u64(w, "bytes", c->bytes);
        an_jw_num(w, "wait_s", c->wait_s);
        an_jw_u64(w, "instances", c->instances);
        an_jw_num(w, "mean_skew_s", c->instances ? c->skew_sum_s / (double)c->instances : 0);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    if (m->link.instances) {
        char lab[64];
        an_proc_label(t, m->link.proc, lab, sizeof lab);
        an_jw_obj(w, "linked_cause");
        an_jw_str(w, "process", lab);
        an_jw_i64(w, "rank", t->procs[m->link.proc].rank);
        an_jw_str(w, "activity", an_activity_names[m->link.activity]);
        an_jw_str(w, "collective", an_strtab_get(&t->names, m->link.coll));
        an_jw_str(w, "file", m->link.file ? an_strtab_get(&t->files, m->link.file) : "");
        an_jw_u64(w, "instances", m->link.instances);
        an_jw_u64(w, "waited_instances", m->link.waited_instances);
        an_jw_num(w, "wait_s", m->link.wait_s);
        an_jw_num(w, "activity_s", m->link.activity_s);
        an_jw_end(w, '}');
    }
    an_jw_end(w, '}');
}

/* The smaller objects that put the I/O in context: phase, CPU, file system, overlap,
 * checkpoints, epochs, stragglers. */
static void json_context(an_jw *w, const an_trace *t, const an_metrics *m) {
    an_jw_obj(w, "phase");
    an_jw_str(w, "what", m->phase_what ? m->phase_what : "whole run");
    an_jw_num(w, "seconds", m->phase_s);
    an_jw_end(w, '}');
    an_jw_obj(w, "cpu");
    an_jw_bool(w, "present", m->has_cpu);
    an_jw_u64(w, "processes", m->ncpu_procs);
    an_jw_u64(w, "cpu_bound", m->ncpu_bound);
    an_jw_u64(w, "waiting", m->ncpu_waiting);
    an_jw_end(w, '}');
    static const char *const how[] = {"none", "path", "trace", "user"};
    an_jw_obj(w, "filesystem");
    an_jw_str(w, "class", m->fs_hint);
    an_jw_num(w, "share_of_io_time", m->fs_share);
    an_jw_str(w, "how", how[m->fs_how < 4 ? m->fs_how : 0]);
    an_jw_str(w, "example", m->fs_example ? an_strtab_get(&t->files, m->fs_example) : "");
    an_jw_end(w, '}');
    an_jw_obj(w, "overlap");
    an_jw_bool(w, "has_compute", m->has_compute);
    an_jw_bool(w, "has_fetch", m->has_fetch);
    an_jw_num(w, "compute_util", m->compute_util);
    an_jw_num(w, "unoverlapped_io_s", m->unoverlapped_io_s);
    an_jw_num(w, "loader_stall_s", m->stall_s);
    an_jw_end(w, '}');
    an_jw_obj(w, "checkpoint");
    an_jw_u64(w, "events", m->ckpt_events);
    an_jw_u64(w, "bytes", m->ckpt_bytes);
    an_jw_num(w, "time_s", m->ckpt_time_s);
    an_jw_num(w, "bandwidth_Bps", m->ckpt_bw);
    an_jw_num(w, "share_of_wall", m->wall_s > 0 ? m->ckpt_time_s / m->wall_s : 0);
    an_jw_end(w, '}');
    an_jw_obj(w, "epochs");
    an_jw_u64(w, "count", m->epochs);
    an_jw_num(w, "mean_s", m->epoch_mean_s);
    an_jw_num(w, "min_s", m->epochs ? m->epoch_min_s : 0);
    an_jw_num(w, "max_s", m->epoch_max_s);
    an_jw_end(w, '}');
    an_jw_obj(w, "stragglers");
    an_jw_num(w, "ratio", m->straggler_ratio);
    an_jw_num(w, "io_max_s", m->io_max_s);
    an_jw_num(w, "io_median_s", m->io_median_s);
    an_jw_num(w, "bytes_imbalance", m->bytes_imbalance);
    an_jw_end(w, '}');
}

void an_report_json(const an_report *r, FILE *out, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    an_jw w;
    an_jw_init(&w, out);
    an_jw_obj(&w, NULL);
    an_jw_str(&w, "tool", "scaffold analyze");
    an_jw_i64(&w, "format", 1);
    json_inputs(&w, t);
    json_run(&w, t, m);
    json_records(&w, t);
    json_io(&w, m);
    json_mpi(&w, t, m);
    json_context(&w, t, m);
    json_findings(&w, r);
    json_checklist_proposals(&w, r);
    json_tables(&w, r, top);
    an_jw_end(&w, '}');
    fputc('\n', out);
}
