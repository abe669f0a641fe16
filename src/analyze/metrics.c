/* metrics: per-run, per-process, per-file and per-window I/O metrics (see metrics.h). */
#include "analyze/metrics.h"

#include "core/err.h"
#include "core/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const an_bucket_names[AN_NBUCKETS] = {"0-100",   "100-1K",  "1K-10K",  "10K-100K",
                                                  "100K-1M", "1M-4M",   "4M-10M",  "10M-100M",
                                                  "100M-1G", "1G+"};

int an_bucket_of(int64_t b) {
    static const int64_t ub[AN_NBUCKETS - 1] = {100,      1024,      10240,     102400,
                                                 1048576,  4194304,   10485760,  104857600,
                                                 1073741824};
    for (int i = 0; i < AN_NBUCKETS - 1; i++)
        if (b <= ub[i])
            return i;
    return AN_NBUCKETS - 1;
}

static int tclass(int op) {
    switch (op) {
    case AN_OP_READ: return AN_T_READ;
    case AN_OP_WRITE: return AN_T_WRITE;
    case AN_OP_META: return AN_T_META;
    case AN_OP_SYNC: return AN_T_SYNC;
    default: return AN_T_OTHER;
    }
}

/* Interval unions per (process, class), built in one pass over start-sorted events. */
enum { U_IO, U_COMPUTE, U_FETCH, U_CKPT, U_COMM, U_COUNT };

int an_spans_add(an_spans *l, int64_t s, int64_t e) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        if (mem_resize(&l->s, nc, sizeof *l->s) || mem_resize(&l->e, nc, sizeof *l->e))
            return ERR_NOMEM;
        l->cap = nc;
    }
    l->s[l->n] = s;
    l->e[l->n] = e;
    l->n++;
    return 0;
}

void an_spans_free(an_spans *l) {
    MEM_FREE(l->s, l->e);
}

/* Adds [s, e) to a union built from start-sorted spans: merged into the last one it overlaps. */
static int seg_add(an_spans *l, int64_t s, int64_t e) {
    if (l->n && s <= l->e[l->n - 1]) {
        if (e > l->e[l->n - 1])
            l->e[l->n - 1] = e;
        return 0;
    }
    return an_spans_add(l, s, e);
}

static double seg_total(const an_spans *l) {
    int64_t t = 0;
    for (size_t i = 0; i < l->n; i++)
        t += l->e[i] - l->s[i];
    return (double)t / 1e6;
}

static double seg_overlap(const an_spans *a, const an_spans *b) {
    size_t i = 0, j = 0;
    int64_t t = 0;
    while (i < a->n && j < b->n) {
        int64_t s = a->s[i] > b->s[j] ? a->s[i] : b->s[j];
        int64_t e = a->e[i] < b->e[j] ? a->e[i] : b->e[j];
        if (e > s)
            t += e - s;
        if (a->e[i] < b->e[j])
            i++;
        else
            j++;
    }
    return (double)t / 1e6;
}

/* 1 if time x lies inside a segment of l (binary search). */
static int seg_contains(const an_spans *l, int64_t x) {
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l->e[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->n && l->s[lo] <= x && x <= l->e[lo];
}

typedef struct {
    int64_t pos;       /* tracked position, -1 unknown */
    int64_t last_end;  /* end of the previous read/write, -1 none since open */
    double meta_s;
    uint64_t metas;
    uint32_t fstat;    /* index in the per-file table */
} pfstate;

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

int an_is_ckpt_path(const char *p) {
    return strstr(p, "checkpoint") || strstr(p, "ckpt") || has_suffix(p, ".pt") ||
           has_suffix(p, ".pth") || has_suffix(p, ".safetensors");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_file_time(const void *a, const void *b) {
    const an_file_stat *x = a, *y = b;
    if (x->time_s != y->time_s)
        return x->time_s > y->time_s ? -1 : 1;
    return x->file < y->file ? -1 : x->file > y->file;
}

static double nice_window(double wall) {
    double target = wall / 60.0;
    if (target <= 1e-6)
        return 1e-3;
    double p = pow(10, floor(log10(target)));
    double steps[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (steps[i] * p >= target)
            return steps[i] * p;
    return 10 * p;
}

void an_metrics_free(an_metrics *m) {
    if (!m)
        return;
    MEM_FREE(m->procs, m->files, m->windows, m->mpi_calls);
    memset(m, 0, sizeof *m);
}

/* State shared by the passes of an_metrics_compute. */
typedef struct mctx {
    const an_trace *t;
    an_metrics *m;
    size_t np;
    an_spans *segs;      /* [np * U_COUNT] per-process unions */
    an_spans io_all;     /* wall-clock union of every process's I/O */
    int64_t *pfirst, *plast;
    uint32_t *fidx;     /* per file id: index in m->files, UINT32_MAX = none yet */
    pfstate *pf;        /* per (file, process) */
    size_t npf, cappf;
    an_imap pfmap;
    uint64_t *epochs_per_proc;
} mctx;

static int count_hosts_threads(mctx *c) {
    const an_trace *t = c->t;
    uint8_t *seen = calloc(t->hosts.n + 1, 1);
    if (!seen)
        return ERR_NOMEM;
    for (size_t p = 0; p < c->np; p++) {
        c->m->nhosts += !seen[t->procs[p].host];
        seen[t->procs[p].host] = 1;
        c->m->nthreads += t->procs[p].nthreads;
    }
    free(seen);
    return 0;
}

/* The per-file record of file id f (created on first use). */
static an_file_stat *file_stat(mctx *c, uint32_t f, uint32_t p) {
    an_metrics *m = c->m;
    if (c->fidx[f] == UINT32_MAX) {
        if (m->nfiles % 256 == 0) {
            an_file_stat *nf = realloc(m->files, (m->nfiles + 256) * sizeof *nf);
            if (!nf)
                return NULL;
            m->files = nf;
        }
        an_file_stat *fs = &m->files[m->nfiles];
        memset(fs, 0, sizeof *fs);
        fs->file = f;
        fs->first_proc = p;
        fs->nprocs = 1;
        fs->read_extent = -1;
        fs->is_ckpt = an_is_ckpt_path(an_strtab_get(&c->t->files, f));
        c->fidx[f] = (uint32_t)m->nfiles++;
    }
    return &m->files[c->fidx[f]];
}

/* The (file, process) state, created on first use. */
static pfstate *pf_state(mctx *c, uint32_t f, uint32_t p, an_file_stat *fs) {
    int ins = 0;
    uint32_t *slot = an_imap_get(&c->pfmap, ((uint64_t)p << 32) | f, (uint32_t)c->npf, &ins);
    if (!slot)
        return NULL;
    if (ins) {
        if (MEM_RESERVE(c->pf, c->cappf, c->npf, 1024))
            return NULL;
        c->pf[c->npf] = (pfstate){.pos = 0, .last_end = -1, .fstat = c->fidx[f]};
        c->npf++;
        if (fs->first_proc != p)
            fs->nprocs++; /* approximate beyond 2: counts new (file, process) records */
        return &c->pf[c->npf - 1];
    }
    return &c->pf[*slot];
}

/* Metadata event on a (file, process): stat counts and the position a seek/open/close sets. */
static void meta_event(mctx *c, size_t i, an_file_stat *fs, pfstate *ps, double d) {
    const an_trace *t = c->t;
    unsigned fl = t->flags[i];
    uint64_t n = an_calls(t, i);
    fs->metas += n;
    ps->meta_s += d;
    ps->metas += n;
    const char *nm = an_strtab_get(&t->names, t->name[i]);
    if (strstr(nm, "stat") || !strcmp(nm, "access") || !strcmp(nm, "faccessat")) {
        fs->stats += n;
        if (ps->metas > 1)
            c->m->repeated_stats += ps->metas - n > 0 ? n : n - 1;
    }
    if (fl & AN_F_AGG) {
        ps->pos = -1; /* calls folded together: the position is no longer known */
        ps->last_end = -1;
    } else if (fl & AN_F_SEEKPOS) {
        ps->pos = t->offset[i];
    } else if (t->offset[i] == 0 && strstr(nm, "open")) {
        fs->opens++;
        ps->pos = (fl & AN_F_APPEND) ? -1 : 0;
        ps->last_end = -1;
    } else if (strstr(nm, "close")) {
        ps->pos = 0;
        ps->last_end = -1;
    }
}

/* Read/write on a (file, process): bytes, and the access-pattern class of its offset
 * (Darshan: consecutive = where the previous access ended, sequential = at or after it, random =
 * before it; the first access of a stream is consecutive at offset 0, random elsewhere). */
static void data_event(mctx *c, size_t i, an_file_stat *fs, pfstate *ps) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    int op = t->op[i];
    int64_t b = t->bytes[i];
    if (op == AN_OP_READ) {
        fs->reads += an_calls(t, i);
        if (b > 0)
            fs->bytes_read += (uint64_t)b;
    } else {
        fs->writes += an_calls(t, i);
        if (b > 0)
            fs->bytes_written += (uint64_t)b;
    }
    if (t->flags[i] & AN_F_AGG) {
        ps->pos = ps->last_end = -1; /* no offsets: calls folded together */
        return;
    }
    int64_t off = t->offset[i] >= 0 ? t->offset[i] : ps->pos;
    if (off < 0 || b < 0) {
        if (t->offset[i] < 0)
            ps->pos = -1;
        return;
    }
    int kind; /* 0 consecutive, 1 sequential (gap), 2 random */
    if (ps->last_end < 0)
        kind = off == 0 ? 0 : 2;
    else if (off == ps->last_end)
        kind = 0;
    else if (off > ps->last_end)
        kind = 1;
    else
        kind = 2;
    fs->classified++;
    if (kind == 2)
        fs->random++;
    else {
        fs->seq++;
        if (kind == 0)
            fs->consec++;
    }
    uint64_t *cls = op == AN_OP_READ ? &m->read_classified : &m->write_classified;
    uint64_t *rnd = op == AN_OP_READ ? &m->read_random : &m->write_random;
    uint64_t *seq = op == AN_OP_READ ? &m->read_seq : &m->write_seq;
    uint64_t *con = op == AN_OP_READ ? &m->read_consec : &m->write_consec;
    (*cls)++;
    if (kind == 2) {
        (*rnd)++;
    } else {
        (*seq)++;
        *con += kind == 0;
    }
    /* saturated: a corrupt or hostile trace may carry byte counts near INT64_MAX */
    const int64_t end = b > INT64_MAX - off ? INT64_MAX : off + b;
    if (op == AN_OP_READ) {
        if (end > fs->read_extent)
            fs->read_extent = end;
        fs->bytes_read_known += (uint64_t)b;
    }
    ps->last_end = end;
    if (t->offset[i] < 0)
        ps->pos = end; /* read/write without an explicit offset move the position */
}

/* Totals of one I/O event: class times and counts, interfaces, sizes and histograms. */
static void io_totals(mctx *c, size_t i, double d) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    int op = t->op[i], tc = tclass(op);
    an_proc_stat *st = &m->procs[t->proc[i]];
    int64_t b = t->bytes[i];
    unsigned fl = t->flags[i];
    /* An aggregated record counts as the calls it folds, each of the mean size. */
    uint64_t n = an_calls(t, i);
    int64_t per = n > 1 && b > 0 ? b / (int64_t)n : b;
    m->nio_events++;
    m->t_s[tc] += d;
    m->ops[tc] += n;
    st->t_s[tc] += d;
    st->ops += n;
    if (fl & AN_F_STDIO) {
        m->stdio_ops += n;
        m->stdio_time_s += d;
    } else if (fl & AN_F_POSIX) {
        m->posix_ops += n;
        m->posix_time_s += d;
    }
    if ((op != AN_OP_READ && op != AN_OP_WRITE) || b < 0)
        return;
    if (op == AN_OP_READ) {
        m->bytes_read += (uint64_t)b;
        st->read_bytes += (uint64_t)b;
        m->hist_read[an_bucket_of(per)] += n;
    } else {
        m->bytes_written += (uint64_t)b;
        st->write_bytes += (uint64_t)b;
        m->hist_write[an_bucket_of(per)] += n;
    }
    m->data_ops_known_size += n;
    if (per <= 1048576)
        m->small_ops += n;
    if (per < 65536)
        m->small_time_s += d;
    if (fl & AN_F_STDIO)
        m->stdio_bytes += (uint64_t)b;
    else if (fl & AN_F_MPIIO)
        m->mpiio_bytes += (uint64_t)b;
    else
        m->posix_bytes += (uint64_t)b;
}

/* Pass 1 over the events: spans, unions, per-class totals, files, access patterns. */
static int pass_events(mctx *c) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    for (size_t i = 0; i < t->n; i++) {
        int op = t->op[i];
        uint32_t p = t->proc[i];
        int64_t s = t->ts[i], e = s + t->dur[i];
        if (op == AN_OP_TRACER)
            continue;
        if (s < c->pfirst[p])
            c->pfirst[p] = s;
        if (e > c->plast[p])
            c->plast[p] = e;
        if (e > m->t1_us)
            m->t1_us = e;
        an_spans *ps = &c->segs[(size_t)p * U_COUNT];
        int u = -1;
        switch (op) {
        case AN_OP_COMPUTE: m->has_compute = 1; u = U_COMPUTE; break;
        case AN_OP_FETCH: m->has_fetch = 1; u = U_FETCH; break;
        case AN_OP_CKPT: m->has_ckpt_annot = 1; m->ckpt_events++; u = U_CKPT; break;
        case AN_OP_COMM: u = U_COMM; break;
        case AN_OP_EPOCH: m->has_epochs = 1; c->epochs_per_proc[p]++; continue;
        default: break;
        }
        if (u >= 0) {
            if (seg_add(&ps[u], s, e))
                return ERR_NOMEM;
            continue;
        }
        if (!AN_IS_IO(op))
            continue;
        if (t->flags[i] & AN_F_IGNORED) {
            m->nignored_events++;
            continue;
        }
        if (op == AN_OP_PCTL)
            continue; /* fork/exec durations are process management, not I/O */
        double d = (double)(e - s) / 1e6;
        io_totals(c, i, d);
        if (seg_add(&ps[U_IO], s, e) || seg_add(&c->io_all, s, e))
            return ERR_NOMEM;
        uint32_t f = t->file[i];
        if (!f)
            continue;
        an_file_stat *fs = file_stat(c, f, p);
        if (!fs)
            return ERR_NOMEM;
        fs->ops += an_calls(t, i);
        fs->t_s[tclass(op)] += d;
        fs->time_s += d;
        pfstate *pst = pf_state(c, f, p, fs);
        if (!pst)
            return ERR_NOMEM;
        if (op == AN_OP_META)
            meta_event(c, i, fs, pst, d);
        else if (op == AN_OP_READ || op == AN_OP_WRITE)
            data_event(c, i, fs, pst);
    }
    for (int k = 0; k < AN_T_COUNT; k++)
        m->io_time_s += m->t_s[k];
    m->wall_s = (double)(m->t1_us - m->t0_us) / 1e6;
    m->io_wall_union_s = seg_total(&c->io_all);
    return 0;
}

/* Per-process unions and overlaps, and the run-level shares built from them. */
static void pass_unions(mctx *c) {
    an_metrics *m = c->m;
    double util_num = 0, util_den = 0;
    for (size_t p = 0; p < c->np; p++) {
        an_proc_stat *st = &m->procs[p];
        an_spans *ps = &c->segs[p * U_COUNT];
        st->span_s = c->pfirst[p] <= c->plast[p] ? (double)(c->plast[p] - c->pfirst[p]) / 1e6 : 0;
        st->io_s = seg_total(&ps[U_IO]);
        st->compute_s = seg_total(&ps[U_COMPUTE]);
        st->fetch_s = seg_total(&ps[U_FETCH]);
        st->ckpt_s = seg_total(&ps[U_CKPT]);
        st->comm_s = seg_total(&ps[U_COMM]);
        st->io_compute_overlap_s = seg_overlap(&ps[U_IO], &ps[U_COMPUTE]);
        st->fetch_compute_overlap_s = seg_overlap(&ps[U_FETCH], &ps[U_COMPUTE]);
        st->io_ckpt_overlap_s = seg_overlap(&ps[U_IO], &ps[U_CKPT]);
        st->unoverlapped_io_s = st->io_s - st->io_compute_overlap_s;
        st->stall_s = st->fetch_s - st->fetch_compute_overlap_s;
        st->io_nockpt_s = st->io_s - st->io_ckpt_overlap_s;
        st->epochs = c->epochs_per_proc[p];
        m->proc_time_s += st->span_s;
        m->io_union_s += st->io_s;
        m->compute_s += st->compute_s;
        m->fetch_s += st->fetch_s;
        m->stall_s += st->stall_s;
        m->unoverlapped_io_s += st->unoverlapped_io_s;
        m->io_compute_overlap_s += st->io_compute_overlap_s;
        if (st->compute_s > 0) {
            util_num += st->compute_s;
            util_den += st->span_s;
        }
        if (st->ckpt_s > m->ckpt_time_s)
            m->ckpt_time_s = st->ckpt_s;
    }
    m->compute_util = util_den > 0 ? util_num / util_den : 0;
    m->exposed_io_s = m->has_compute ? m->unoverlapped_io_s : m->io_union_s;
    m->io_share = m->proc_time_s > 0 ? m->io_union_s / m->proc_time_s : 0;
    m->io_meaningful = m->io_share >= 0.05;
}

/* Spreads an event's duration over the windows it covers. */
static void window_add(an_metrics *m, int64_t a, int64_t z, int64_t wus, int kind) {
    size_t w0 = (size_t)(a / wus), w1 = (size_t)(z / wus);
    if (w0 >= m->nwindows)
        w0 = m->nwindows - 1;
    if (w1 >= m->nwindows)
        w1 = m->nwindows - 1;
    for (size_t w = w0; w <= w1; w++) {
        int64_t ws = (int64_t)w * wus, we = ws + wus;
        int64_t cs = a > ws ? a : ws, ce = z < we ? z : we;
        if (w == m->nwindows - 1 && z > ce)
            ce = z;
        double d = ce > cs ? (double)(ce - cs) / 1e6 : 0;
        an_window *win = &m->windows[w];
        if (kind < AN_T_COUNT)
            win->t_s[kind] += d;
        else if (kind == 10)
            win->compute_s += d;
        else if (kind == 11)
            win->fetch_s += d;
        else
            win->ckpt_s += d;
    }
}

/* Pass 2: checkpoint writes (inside checkpoint annotations, or to checkpoint-like files when the
 * application has no checkpoint annotation) and the time windows. */
static int pass_ckpt_windows(mctx *c, double window_s) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    m->window_s = window_s > 0 ? window_s : nice_window(m->wall_s);
    m->nwindows = (size_t)ceil(m->wall_s / m->window_s);
    if (m->nwindows < 1)
        m->nwindows = 1;
    if (m->nwindows > 100000)
        m->nwindows = 100000;
    m->windows = calloc(m->nwindows, sizeof *m->windows);
    double *ckpt_file_time = calloc(c->np + 1, sizeof *ckpt_file_time);
    if (!m->windows || !ckpt_file_time) {
        free(ckpt_file_time);
        return ERR_NOMEM;
    }
    int64_t wus = (int64_t)llround(m->window_s * 1e6);
    if (wus < 1)
        wus = 1;
    for (size_t i = 0; i < t->n; i++) {
        int op = t->op[i];
        uint32_t p = t->proc[i];
        int64_t s = t->ts[i], e = s + t->dur[i];
        int io = AN_IS_IO(op) && op != AN_OP_PCTL && !(t->flags[i] & AN_F_IGNORED);
        if (op == AN_OP_WRITE && io && t->bytes[i] > 0) {
            uint32_t f = t->file[i];
            int in_ckpt = m->has_ckpt_annot
                              ? seg_contains(&c->segs[(size_t)p * U_COUNT + U_CKPT], s)
                              : (f && m->files[c->fidx[f]].is_ckpt);
            if (in_ckpt) {
                m->ckpt_bytes += (uint64_t)t->bytes[i];
                m->procs[p].ckpt_write_bytes += (uint64_t)t->bytes[i];
                m->ckpt_write_time_s += (double)(e - s) / 1e6;
                ckpt_file_time[p] += (double)(e - s) / 1e6;
            }
        }
        int kind = io                     ? tclass(op)
                   : op == AN_OP_COMPUTE ? 10
                   : op == AN_OP_FETCH   ? 11
                   : op == AN_OP_CKPT    ? 12
                                         : -1;
        if (kind < 0)
            continue;
        if (io) {
            int64_t w0 = (s - m->t0_us) / wus;
            an_window *w = &m->windows[w0 < (int64_t)m->nwindows ? w0 : (int64_t)m->nwindows - 1];
            w->ops += an_calls(t, i);
            if (t->bytes[i] > 0) {
                if (op == AN_OP_READ)
                    w->bytes_read += (uint64_t)t->bytes[i];
                else if (op == AN_OP_WRITE)
                    w->bytes_written += (uint64_t)t->bytes[i];
            }
        }
        window_add(m, s - m->t0_us, e - m->t0_us, wus, kind);
    }
    if (!m->has_ckpt_annot) {
        /* No checkpoint annotation: the job-level checkpoint time is the slowest process's
         * time writing checkpoint-like files. */
        for (size_t p = 0; p < c->np; p++)
            if (ckpt_file_time[p] > m->ckpt_time_s)
                m->ckpt_time_s = ckpt_file_time[p];
    }
    free(ckpt_file_time);
    m->ckpt_bw = m->ckpt_time_s > 0 && m->ckpt_bytes ? (double)m->ckpt_bytes / m->ckpt_time_s : 0;
    return 0;
}

/* Epochs: from the process with the most epoch events; durations from its events. */
static void pass_epochs(mctx *c) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    uint32_t best = 0;
    for (size_t p = 0; p < c->np; p++)
        if (c->epochs_per_proc[p] > c->epochs_per_proc[best])
            best = (uint32_t)p;
    if (!c->np || !c->epochs_per_proc[best])
        return;
    m->epochs = c->epochs_per_proc[best];
    double sum = 0;
    m->epoch_min_s = INFINITY;
    uint64_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->op[i] != AN_OP_EPOCH || t->proc[i] != best)
            continue;
        double d = (double)t->dur[i] / 1e6;
        sum += d;
        if (d < m->epoch_min_s)
            m->epoch_min_s = d;
        if (d > m->epoch_max_s)
            m->epoch_max_s = d;
        if (k == 0)
            m->epoch_first_s = d;
        m->epoch_last_s = d;
        k++;
    }
    m->epoch_mean_s = k ? sum / (double)k : 0;
}

/* Stragglers: processes doing I/O, their I/O time outside checkpoints; byte imbalance. */
static int pass_stragglers(mctx *c) {
    an_metrics *m = c->m;
    double *v = malloc((c->np + 1) * sizeof *v);
    if (!v)
        return ERR_NOMEM;
    size_t k = 0;
    double bmax = -1, bmin = INFINITY;
    for (size_t p = 0; p < c->np; p++) {
        an_proc_stat *st = &m->procs[p];
        if (st->ops == 0 || c->t->procs[p].launcher)
            continue; /* a launcher (mpirun, srun) is not a rank */
        v[k++] = st->io_nockpt_s;
        if (st->io_nockpt_s > m->io_max_s) {
            m->io_max_s = st->io_nockpt_s;
            m->straggler_proc = (uint32_t)p;
        }
        double bytes = (double)(st->read_bytes + st->write_bytes - st->ckpt_write_bytes);
        if (bytes > bmax) {
            bmax = bytes;
            m->bytes_max_proc = (uint32_t)p;
        }
        if (bytes < bmin) {
            bmin = bytes;
            m->bytes_min_proc = (uint32_t)p;
        }
    }
    if (k >= 2) {
        qsort(v, k, sizeof *v, cmp_double);
        m->io_min_s = v[0];
        m->io_median_s = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
        m->straggler_ratio = m->io_max_s > 0 ? (m->io_max_s - m->io_median_s) / m->io_max_s : 0;
        m->bytes_imbalance = bmax > 0 ? (bmax - bmin) / bmax : 0;
    }
    free(v);
    return 0;
}

/* Metadata per (file, process) record: Drishti's > 30 s count and the worst record. */
static void pass_meta_records(mctx *c) {
    an_metrics *m = c->m;
    for (size_t i = 0; i < c->npf; i++) {
        if (c->pf[i].meta_s > 30.0)
            m->meta_records_over_30s++;
        if (c->pf[i].meta_s > m->meta_max_record_s) {
            m->meta_max_record_s = c->pf[i].meta_s;
            m->meta_max_file = m->files[c->pf[i].fstat].file;
        }
    }
    for (size_t slot = 0; slot < c->pfmap.nslots; slot++) {
        if (c->pfmap.keys[slot] == UINT64_MAX)
            continue;
        const pfstate *s2 = &c->pf[c->pfmap.vals[slot]];
        if (s2->meta_s == m->meta_max_record_s && m->files[s2->fstat].file == m->meta_max_file)
            m->meta_max_proc = (uint32_t)(c->pfmap.keys[slot] >> 32);
    }
}

/* File kinds: redundant reads, shared files, HDF5/NetCDF, checkpoint files, and the file system
 * that carries the I/O (the class with the most I/O time; files on the tracer's own list of
 * system paths are already out). */
static void pass_files(mctx *c) {
    const an_trace *t = c->t;
    an_metrics *m = c->m;
    double time_by_fs[AN_FS_COUNT] = {0};
    uint32_t example[AN_FS_COUNT] = {0};
    for (size_t k = 0; k < m->nfiles; k++) {
        an_file_stat *fs = &m->files[k];
        const char *path = an_strtab_get(&t->files, fs->file);
        if (fs->read_extent >= 0 && (int64_t)fs->bytes_read_known > fs->read_extent)
            m->redundant_read_bytes += fs->bytes_read_known - (uint64_t)fs->read_extent;
        if (fs->nprocs > 1)
            m->nshared_files++;
        if (has_suffix(path, ".h5") || has_suffix(path, ".hdf5") || has_suffix(path, ".he5"))
            m->nhdf5_files++;
        if (has_suffix(path, ".nc") || has_suffix(path, ".nc4"))
            m->nnetcdf_files++;
        if (fs->is_ckpt && fs->writes)
            m->nckpt_files++;
        fs->fs = t->file_fs ? t->file_fs[fs->file] : AN_FS_UNKNOWN;
        /* Time, plus a trickle per byte and op so a trace without durations still votes. */
        double w = fs->time_s + 1e-12 * (double)(fs->bytes_read + fs->bytes_written + fs->ops);
        if (w > time_by_fs[fs->fs] || !example[fs->fs])
            example[fs->fs] = fs->file;
        time_by_fs[fs->fs] += w;
        if (fs->reads || fs->writes || fs->metas)
            m->nfiles_io++;
    }
    int best = AN_FS_UNKNOWN;
    double total = 0;
    for (int k = 0; k < AN_FS_COUNT; k++) {
        total += time_by_fs[k];
        if (k != AN_FS_UNKNOWN && time_by_fs[k] > time_by_fs[best])
            best = k;
    }
    /* Unknown only wins when nothing is known about any file. */
    if (best == AN_FS_UNKNOWN || time_by_fs[best] <= 0)
        best = AN_FS_UNKNOWN;
    m->fs = best;
    m->fs_hint = an_fs_names[best];
    m->fs_share = total > 0 ? time_by_fs[best] / total : 0;
    m->fs_example = example[best];
    m->fs_how = example[best] && t->file_fs_how ? t->file_fs_how[example[best]] : AN_FSHOW_NONE;
}

/* Op-count-bound versus bandwidth-bound: where does the I/O time go? Metadata and sub-64 KiB
 * transfers are latency/op-rate limited; large transfers are bandwidth limited. */
static void pass_shape(mctx *c) {
    an_metrics *m = c->m;
    uint64_t data_ops = m->ops[AN_T_READ] + m->ops[AN_T_WRITE];
    m->mean_xfer = data_ops ? (double)(m->bytes_read + m->bytes_written) / (double)data_ops : 0;
    double opbound = m->t_s[AN_T_META] + m->small_time_s;
    m->op_count_bound = m->io_time_s > 0 && opbound > 0.5 * m->io_time_s;
}

static void mctx_free(mctx *c) {
    if (c->segs)
        for (size_t k = 0; k < c->np * U_COUNT; k++)
            an_spans_free(&c->segs[k]);
    an_spans_free(&c->io_all);
    MEM_FREE(c->segs, c->pfirst, c->plast, c->fidx, c->pf, c->epochs_per_proc);
    an_imap_free(&c->pfmap);
}

int an_metrics_compute(const an_trace *t, double window_s, an_metrics *m) {
    memset(m, 0, sizeof *m);
    mctx c = {.t = t, .m = m, .np = t->nprocs};
    size_t np = t->nprocs;
    c.segs = calloc(np * U_COUNT + 1, sizeof *c.segs);
    m->procs = calloc(np + 1, sizeof *m->procs);
    c.pfirst = malloc((np + 1) * sizeof *c.pfirst);
    c.plast = malloc((np + 1) * sizeof *c.plast);
    c.fidx = malloc((t->files.n + 1) * sizeof *c.fidx);
    c.epochs_per_proc = calloc(np + 1, sizeof *c.epochs_per_proc);
    int rc = ERR_NOMEM;
    if (!c.segs || !m->procs || !c.pfirst || !c.plast || !c.fidx || !c.epochs_per_proc ||
        an_imap_init(&c.pfmap, 1024))
        goto out;
    m->nprocs = np;
    for (size_t p = 0; p < np; p++) {
        c.pfirst[p] = INT64_MAX;
        c.plast[p] = INT64_MIN;
    }
    for (uint32_t f = 0; f <= t->files.n; f++)
        c.fidx[f] = UINT32_MAX;
    m->nevents = t->n;
    m->t0_us = t->n ? t->ts[0] : 0;
    m->t1_us = m->t0_us;
    if (count_hosts_threads(&c) || pass_events(&c))
        goto out;
    pass_unions(&c);
    if (pass_ckpt_windows(&c, window_s))
        goto out;
    pass_epochs(&c);
    if (pass_stragglers(&c))
        goto out;
    pass_meta_records(&c);
    pass_files(&c);
    pass_shape(&c);
    if (an_metrics_mpi(t, m))
        goto out;
    if (m->nfiles)
        qsort(m->files, m->nfiles, sizeof *m->files, cmp_file_time);
    rc = 0;
out:
    mctx_free(&c);
    if (rc) {
        an_metrics_free(m);
        err_set(ERR_NOMEM, "analyze: out of memory computing metrics");
    }
    return rc;
}
