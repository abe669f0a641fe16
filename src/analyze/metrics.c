/* metrics: per-run, per-process, per-file and per-window I/O metrics (see metrics.h). */
#include "analyze/metrics.h"

#include "core/err.h"

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

typedef struct {
    int64_t *s, *e;
    size_t n, cap;
} seglist;

static int seg_add(seglist *l, int64_t s, int64_t e) {
    if (l->n && s <= l->e[l->n - 1]) {
        if (e > l->e[l->n - 1])
            l->e[l->n - 1] = e;
        return 0;
    }
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        int64_t *ns = realloc(l->s, nc * sizeof *ns);
        if (!ns)
            return ERR_NOMEM;
        l->s = ns;
        int64_t *ne = realloc(l->e, nc * sizeof *ne);
        if (!ne)
            return ERR_NOMEM;
        l->e = ne;
        l->cap = nc;
    }
    l->s[l->n] = s;
    l->e[l->n] = e;
    l->n++;
    return 0;
}

static double seg_total(const seglist *l) {
    int64_t t = 0;
    for (size_t i = 0; i < l->n; i++)
        t += l->e[i] - l->s[i];
    return (double)t / 1e6;
}

static double seg_overlap(const seglist *a, const seglist *b) {
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
static int seg_contains(const seglist *l, int64_t x) {
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

static int is_ckpt_path(const char *p) {
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
    free(m->procs);
    free(m->files);
    free(m->windows);
    memset(m, 0, sizeof *m);
}

int an_metrics_compute(const an_trace *t, double window_s, an_metrics *m) {
    memset(m, 0, sizeof *m);
    int rc = ERR_NOMEM;
    size_t np = t->nprocs;
    seglist *segs = calloc(np * U_COUNT + 1, sizeof *segs);
    m->procs = calloc(np + 1, sizeof *m->procs);
    int64_t *pfirst = malloc((np + 1) * sizeof *pfirst), *plast = malloc((np + 1) * sizeof *plast);
    uint32_t *fidx = malloc((t->files.n + 1) * sizeof *fidx);
    pfstate *pf = NULL;
    size_t npf = 0, cappf = 0;
    an_imap pfmap = {0};
    uint64_t *epochs_per_proc = calloc(np + 1, sizeof *epochs_per_proc);
    if (!segs || !m->procs || !pfirst || !plast || !fidx || !epochs_per_proc ||
        an_imap_init(&pfmap, 1024))
        goto out;
    m->nprocs = np;
    for (size_t p = 0; p < np; p++) {
        pfirst[p] = INT64_MAX;
        plast[p] = INT64_MIN;
    }
    for (uint32_t f = 0; f <= t->files.n; f++)
        fidx[f] = UINT32_MAX;
    m->nevents = t->n;
    m->t0_us = t->n ? t->ts[0] : 0;
    m->t1_us = m->t0_us;
    /* Hosts actually used by processes. */
    {
        uint8_t *seen = calloc(t->hosts.n + 1, 1);
        if (!seen)
            goto out;
        for (size_t p = 0; p < np; p++)
            if (!seen[t->procs[p].host]) {
                seen[t->procs[p].host] = 1;
                m->nhosts++;
            }
        free(seen);
        for (size_t p = 0; p < np; p++)
            m->nthreads += t->procs[p].nthreads;
    }
    /* Pass 1: spans, unions, per-class totals, files, access patterns. */
    for (size_t i = 0; i < t->n; i++) {
        int op = t->op[i];
        uint32_t p = t->proc[i];
        int64_t s = t->ts[i], e = s + t->dur[i];
        if (op == AN_OP_TRACER)
            continue;
        if (s < pfirst[p])
            pfirst[p] = s;
        if (e > plast[p])
            plast[p] = e;
        if (e > m->t1_us)
            m->t1_us = e;
        seglist *ps = &segs[(size_t)p * U_COUNT];
        an_proc_stat *st = &m->procs[p];
        switch (op) {
        case AN_OP_COMPUTE:
            m->has_compute = 1;
            if (seg_add(&ps[U_COMPUTE], s, e))
                goto out;
            continue;
        case AN_OP_FETCH:
            m->has_fetch = 1;
            if (seg_add(&ps[U_FETCH], s, e))
                goto out;
            continue;
        case AN_OP_CKPT:
            m->has_ckpt_annot = 1;
            m->ckpt_events++;
            if (seg_add(&ps[U_CKPT], s, e))
                goto out;
            continue;
        case AN_OP_COMM:
            if (seg_add(&ps[U_COMM], s, e))
                goto out;
            continue;
        case AN_OP_EPOCH:
            m->has_epochs = 1;
            epochs_per_proc[p]++;
            continue;
        default:
            break;
        }
        if (!AN_IS_IO(op))
            continue;
        if (t->flags[i] & AN_F_IGNORED) {
            m->nignored_events++;
            continue;
        }
        if (op == AN_OP_PCTL)
            continue; /* fork/exec durations are process management, not I/O */
        m->nio_events++;
        int tc = tclass(op);
        double d = (double)(e - s) / 1e6;
        m->t_s[tc] += d;
        m->ops[tc]++;
        st->t_s[tc] += d;
        st->ops++;
        if (seg_add(&ps[U_IO], s, e))
            goto out;
        int64_t b = t->bytes[i];
        unsigned fl = t->flags[i];
        if (fl & AN_F_STDIO) {
            m->stdio_ops++;
            m->stdio_time_s += d;
        } else if (fl & AN_F_POSIX) {
            m->posix_ops++;
            m->posix_time_s += d;
        }
        if ((op == AN_OP_READ || op == AN_OP_WRITE) && b >= 0) {
            if (op == AN_OP_READ) {
                m->bytes_read += (uint64_t)b;
                st->read_bytes += (uint64_t)b;
                m->hist_read[an_bucket_of(b)]++;
            } else {
                m->bytes_written += (uint64_t)b;
                st->write_bytes += (uint64_t)b;
                m->hist_write[an_bucket_of(b)]++;
            }
            m->data_ops_known_size++;
            if (b <= 1048576)
                m->small_ops++;
            if (b < 65536)
                m->small_time_s += d;
            if (fl & AN_F_STDIO)
                m->stdio_bytes += (uint64_t)b;
            else if (fl & AN_F_MPIIO)
                m->mpiio_bytes += (uint64_t)b;
            else
                m->posix_bytes += (uint64_t)b;
        }
        uint32_t f = t->file[i];
        if (!f)
            continue;
        /* Per-file record. */
        if (fidx[f] == UINT32_MAX) {
            if (m->nfiles % 256 == 0) {
                an_file_stat *nf = realloc(m->files, (m->nfiles + 256) * sizeof *nf);
                if (!nf)
                    goto out;
                m->files = nf;
            }
            an_file_stat *fs = &m->files[m->nfiles];
            memset(fs, 0, sizeof *fs);
            fs->file = f;
            fs->first_proc = p;
            fs->nprocs = 1;
            fs->read_extent = -1;
            fs->is_ckpt = is_ckpt_path(an_strtab_get(&t->files, f));
            fidx[f] = (uint32_t)m->nfiles++;
        }
        an_file_stat *fs = &m->files[fidx[f]];
        fs->ops++;
        fs->t_s[tc] += d;
        fs->time_s += d;
        /* Per (file, process) state: position tracking and metadata time. */
        int ins = 0;
        uint32_t *slot = an_imap_get(&pfmap, ((uint64_t)p << 32) | f, (uint32_t)npf, &ins);
        if (!slot)
            goto out;
        if (ins) {
            if (npf == cappf) {
                size_t nc = cappf ? cappf * 2 : 1024;
                pfstate *n2 = realloc(pf, nc * sizeof *n2);
                if (!n2)
                    goto out;
                pf = n2;
                cappf = nc;
            }
            pf[npf] = (pfstate){.pos = 0, .last_end = -1, .fstat = fidx[f]};
            npf++;
            if (fs->first_proc != p)
                fs->nprocs++; /* approximate beyond 2: counts new (file, process) records */
        }
        pfstate *ps2 = &pf[*slot];
        if (op == AN_OP_META) {
            fs->metas++;
            ps2->meta_s += d;
            ps2->metas++;
            const char *nm = an_strtab_get(&t->names, t->name[i]);
            if (strstr(nm, "stat") || !strcmp(nm, "access") || !strcmp(nm, "faccessat")) {
                fs->stats++;
                if (ps2->metas > 1)
                    m->repeated_stats++;
            }
            if (fl & AN_F_SEEKPOS) {
                ps2->pos = t->offset[i];
            } else if (t->offset[i] == 0 && !(fl & AN_F_SEEKPOS) && strstr(nm, "open")) {
                fs->opens++;
                ps2->pos = (fl & AN_F_APPEND) ? -1 : 0;
                ps2->last_end = -1;
            } else if (strstr(nm, "close")) {
                ps2->pos = 0;
                ps2->last_end = -1;
            }
            continue;
        }
        if (op != AN_OP_READ && op != AN_OP_WRITE)
            continue;
        if (op == AN_OP_READ) {
            fs->reads++;
            if (b > 0)
                fs->bytes_read += (uint64_t)b;
        } else {
            fs->writes++;
            if (b > 0)
                fs->bytes_written += (uint64_t)b;
        }
        int64_t off = t->offset[i] >= 0 ? t->offset[i] : ps2->pos;
        if (off < 0 || b < 0) {
            if (t->offset[i] < 0)
                ps2->pos = -1;
            continue;
        }
        int kind; /* 0 consecutive, 1 sequential (gap), 2 random */
        if (ps2->last_end < 0)
            kind = off == 0 ? 0 : 2;
        else if (off == ps2->last_end)
            kind = 0;
        else if (off > ps2->last_end)
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
        if (op == AN_OP_READ) {
            m->read_classified++;
            if (kind == 2)
                m->read_random++;
            else {
                m->read_seq++;
                m->read_consec += kind == 0;
            }
            if (off + b > fs->read_extent)
                fs->read_extent = off + b;
            fs->bytes_read_known += (uint64_t)b;
        } else {
            m->write_classified++;
            if (kind == 2)
                m->write_random++;
            else {
                m->write_seq++;
                m->write_consec += kind == 0;
            }
        }
        ps2->last_end = off + b;
        if (t->offset[i] < 0)
            ps2->pos = off + b; /* read/write without an explicit offset move the position */
    }
    m->io_time_s = 0;
    for (int k = 0; k < AN_T_COUNT; k++)
        m->io_time_s += m->t_s[k];
    m->wall_s = (double)(m->t1_us - m->t0_us) / 1e6;
    /* Per-process unions and overlaps. */
    double util_num = 0, util_den = 0;
    for (size_t p = 0; p < np; p++) {
        an_proc_stat *st = &m->procs[p];
        seglist *ps = &segs[p * U_COUNT];
        st->span_s = pfirst[p] <= plast[p] ? (double)(plast[p] - pfirst[p]) / 1e6 : 0;
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
        st->epochs = epochs_per_proc[p];
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
    /* Pass 2: checkpoint writes (inside checkpoint annotations, or to checkpoint-like files
     * when the application has no checkpoint annotation), and the time windows. */
    m->window_s = window_s > 0 ? window_s : nice_window(m->wall_s);
    m->nwindows = (size_t)ceil(m->wall_s / m->window_s);
    if (m->nwindows < 1)
        m->nwindows = 1;
    if (m->nwindows > 100000)
        m->nwindows = 100000;
    m->windows = calloc(m->nwindows, sizeof *m->windows);
    if (!m->windows)
        goto out;
    double *ckpt_file_time = calloc(np + 1, sizeof *ckpt_file_time);
    if (!ckpt_file_time)
        goto out;
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
            int in_ckpt = m->has_ckpt_annot ? seg_contains(&segs[(size_t)p * U_COUNT + U_CKPT], s)
                                            : (f && m->files[fidx[f]].is_ckpt);
            if (in_ckpt) {
                m->ckpt_bytes += (uint64_t)t->bytes[i];
                m->procs[p].ckpt_write_bytes += (uint64_t)t->bytes[i];
                m->ckpt_write_time_s += (double)(e - s) / 1e6;
                ckpt_file_time[p] += (double)(e - s) / 1e6;
            }
        }
        /* Windows: spread the duration over the windows it covers. */
        int kind = -1;
        if (io)
            kind = tclass(op);
        else if (op == AN_OP_COMPUTE)
            kind = 10;
        else if (op == AN_OP_FETCH)
            kind = 11;
        else if (op == AN_OP_CKPT)
            kind = 12;
        if (kind < 0)
            continue;
        int64_t a = s - m->t0_us, z = e - m->t0_us;
        size_t w0 = (size_t)(a / wus), w1 = (size_t)(z / wus);
        if (w0 >= m->nwindows)
            w0 = m->nwindows - 1;
        if (w1 >= m->nwindows)
            w1 = m->nwindows - 1;
        if (io) {
            an_window *w = &m->windows[w0];
            w->ops++;
            if (t->bytes[i] > 0) {
                if (op == AN_OP_READ)
                    w->bytes_read += (uint64_t)t->bytes[i];
                else if (op == AN_OP_WRITE)
                    w->bytes_written += (uint64_t)t->bytes[i];
            }
        }
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
    if (!m->has_ckpt_annot) {
        /* No checkpoint annotation: the job-level checkpoint time is the slowest process's
         * time writing checkpoint-like files. */
        for (size_t p = 0; p < np; p++)
            if (ckpt_file_time[p] > m->ckpt_time_s)
                m->ckpt_time_s = ckpt_file_time[p];
    }
    free(ckpt_file_time);
    m->ckpt_bw = m->ckpt_time_s > 0 && m->ckpt_bytes ? (double)m->ckpt_bytes / m->ckpt_time_s : 0;
    /* Epochs: from the process with the most epoch events; durations from its events. */
    {
        uint32_t best = 0;
        for (size_t p = 0; p < np; p++)
            if (epochs_per_proc[p] > epochs_per_proc[best])
                best = (uint32_t)p;
        if (np && epochs_per_proc[best]) {
            m->epochs = epochs_per_proc[best];
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
    }
    /* Stragglers: processes doing I/O, their I/O time outside checkpoints. */
    {
        double *v = malloc((np + 1) * sizeof *v);
        if (!v)
            goto out;
        size_t k = 0;
        double bmax = -1, bmin = INFINITY;
        for (size_t p = 0; p < np; p++) {
            an_proc_stat *st = &m->procs[p];
            if (st->ops == 0)
                continue;
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
    }
    /* Metadata records, redundant reads, shared files, file kinds, FS hint. */
    for (size_t i = 0; i < npf; i++) {
        if (pf[i].meta_s > 30.0)
            m->meta_records_over_30s++;
        if (pf[i].meta_s > m->meta_max_record_s) {
            m->meta_max_record_s = pf[i].meta_s;
            m->meta_max_file = m->files[pf[i].fstat].file;
        }
    }
    {
        /* The process of the worst (file, process) metadata record. */
        for (size_t slot = 0; slot < pfmap.nslots; slot++) {
            if (pfmap.keys[slot] == UINT64_MAX)
                continue;
            const pfstate *s2 = &pf[pfmap.vals[slot]];
            if (s2->meta_s == m->meta_max_record_s && m->files[s2->fstat].file == m->meta_max_file)
                m->meta_max_proc = (uint32_t)(pfmap.keys[slot] >> 32);
        }
    }
    uint64_t bytes_by_fs[6] = {0};
    static const char *const fsn[6] = {"lustre", "gpfs", "nfs", "tmpfs", "local", "unknown"};
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
        int fsk = 5;
        if (strstr(path, "lustre") || !strncmp(path, "/p/", 3))
            fsk = 0;
        else if (strstr(path, "gpfs") || strstr(path, "/gs/"))
            fsk = 1;
        else if (strstr(path, "nfs") || !strncmp(path, "/home/", 6) || !strncmp(path, "/g/g", 4))
            fsk = 2;
        else if (!strncmp(path, "/dev/shm", 8))
            fsk = 3;
        else if (!strncmp(path, "/tmp", 4) || !strncmp(path, "/scratch", 8) ||
                 !strncmp(path, "/local", 6) || !strncmp(path, "/mnt/", 5))
            fsk = 4;
        bytes_by_fs[fsk] += fs->bytes_read + fs->bytes_written + fs->ops;
        if (fs->reads || fs->writes || fs->metas)
            m->nfiles_io++;
    }
    {
        int best = 5;
        uint64_t bb = 0;
        for (int k = 0; k < 5; k++)
            if (bytes_by_fs[k] > bb) {
                bb = bytes_by_fs[k];
                best = k;
            }
        m->fs_hint = fsn[best];
    }
    /* Op-count-bound versus bandwidth-bound: where does the I/O time go? Metadata and
     * sub-64 KiB transfers are latency/op-rate limited; large transfers are bandwidth limited. */
    {
        uint64_t data_ops = m->ops[AN_T_READ] + m->ops[AN_T_WRITE];
        m->mean_xfer = data_ops ? (double)(m->bytes_read + m->bytes_written) / (double)data_ops : 0;
        double opbound = m->t_s[AN_T_META] + m->small_time_s;
        m->op_count_bound = m->io_time_s > 0 && opbound > 0.5 * m->io_time_s;
    }
    qsort(m->files, m->nfiles, sizeof *m->files, cmp_file_time);
    rc = 0;
out:
    if (segs)
        for (size_t k = 0; k < np * U_COUNT; k++) {
            free(segs[k].s);
            free(segs[k].e);
        }
    free(segs);
    free(pfirst);
    free(plast);
    free(fidx);
    free(pf);
    free(epochs_per_proc);
    an_imap_free(&pfmap);
    if (rc) {
        an_metrics_free(m);
        err_set(ERR_NOMEM, "analyze: out of memory computing metrics");
    }
    return rc;
}
