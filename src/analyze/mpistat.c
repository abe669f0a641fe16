/* mpistat: the MPI side of the metrics (see metrics.h, an_metrics_mpi).
 *
 * Per call name and per process: calls, time and bytes in MPI. Blocking collectives are matched
 * across ranks: the k-th collective a process enters on a communicator (the tracer's comm id and
 * size, kept in the event's offset column) is instance k of that communicator on every member,
 * since MPI requires members to call collectives in the same order. In an instance seen on every
 * member, a rank waits from its arrival until the last arrival (capped at its call's duration);
 * the spread of arrivals is the skew. For each instance where ranks waited, the last rank's
 * events between the first arrival (or its previous MPI call, if later) and its own arrival say
 * what kept it (a checkpoint write,
 * other writes, reads, metadata, annotated compute, or nothing traced); the group (late process,
 * activity, collective) that accounts for the most waiting is the linked cause, reported as one
 * phenomenon with the wait. The measured phase (training epochs, else MPI_Init to MPI_Finalize,
 * else the whole run) decides whether bottlenecks can be ranked at all, and the counter samples
 * of the tracer's system-metrics sampler tell CPU-bound processes from waiting ones. */
#include "analyze/metrics.h"

#include "core/err.h"
#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

const char *const an_activity_names[AN_ACT_COUNT] = {
    "checkpoint writes", "writes", "reads", "metadata calls", "annotated compute",
    "work the trace does not show (compute, unannotated)"};

static int mpi_kind(const char *n) {
    static const char *const coll[] = {
        "MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Allgather",
        "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Gather",
        "MPI_Gatherv", "MPI_Scatter", "MPI_Scatterv", "MPI_Reduce_scatter",
        "MPI_Reduce_scatter_block", "MPI_Scan", "MPI_Exscan", NULL};
    for (const char *const *c = coll; *c; c++)
        if (!strcmp(n, *c))
            return AN_MPIK_COLL;
    if (!strncmp(n, "MPI_Wait", 8) || !strncmp(n, "MPI_Test", 8))
        return AN_MPIK_WAIT;
    if (!strncmp(n, "MPI_Init", 8))
        return AN_MPIK_INIT;
    if (!strcmp(n, "MPI_Finalize"))
        return AN_MPIK_FINALIZE;
    if (!strncmp(n, "MPI_File_", 9))
        return AN_MPIK_IO;
    return AN_MPIK_OTHER;
}

typedef struct {
    int64_t min_ts, max_ts;
    uint32_t late, n, size, name;
    double wait;
} inst;

typedef struct {
    size_t ev;       /* event index */
    uint32_t inst;
    int64_t prev_end; /* end of the process's previous MPI call, INT64_MIN none */
} coll_ev;

typedef struct {
    an_mpi_link l;
    double file_s[8]; /* unused slot guard */
} group;

static int cmp_call_time(const void *a, const void *b) {
    const an_mpi_call *x = a, *y = b;
    return x->time_s > y->time_s ? -1 : x->time_s < y->time_s ? 1 : (x->name > y->name) - (x->name < y->name);
}

/* Events of each process in time order: idx[start[p] .. start[p+1]). */
static int by_process(const an_trace *t, uint32_t **start_out, uint32_t **idx_out) {
    uint32_t *start = calloc(t->nprocs + 2, sizeof *start);
    uint32_t *idx = malloc((t->n ? t->n : 1) * sizeof *idx);
    if (!start || !idx) {
        free(start);
        free(idx);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < t->n; i++)
        start[t->proc[i] + 1]++;
    for (size_t p = 0; p < t->nprocs; p++)
        start[p + 1] += start[p];
    uint32_t *fill = malloc((t->nprocs + 1) * sizeof *fill);
    if (!fill) {
        free(start);
        free(idx);
        return ERR_NOMEM;
    }
    memcpy(fill, start, (t->nprocs + 1) * sizeof *fill);
    for (size_t i = 0; i < t->n; i++)
        idx[fill[t->proc[i]]++] = (uint32_t)i;
    free(fill);
    *start_out = start;
    *idx_out = idx;
    return 0;
}

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    int64_t s = a0 > b0 ? a0 : b0, e = a1 < b1 ? a1 : b1;
    return e > s ? e - s : 0;
}

/* What process p did in [w0, w1): time per activity; the file with the most I/O time. */
static void activity(const an_trace *t, const uint32_t *start, const uint32_t *idx, uint32_t p,
                     int64_t w0, int64_t w1, double act[AN_ACT_COUNT], uint32_t *file) {
    memset(act, 0, AN_ACT_COUNT * sizeof *act);
    *file = 0;
    uint32_t lo = start[p], hi = start[p + 1];
    /* first event that may overlap: events are time-sorted by start; annotations may start
     * before w0, so step back a little from the first start >= w0 */
    uint32_t a = lo, b = hi;
    while (a < b) {
        uint32_t mid = a + (b - a) / 2;
        if (t->ts[idx[mid]] < w0)
            a = mid + 1;
        else
            b = mid;
    }
    uint32_t first = a > lo + 64 ? a - 64 : lo;
    double ckpt_annot = 0, ckpt_io = 0, best_file = 0, traced = 0;
    for (uint32_t k = first; k < hi; k++) {
        size_t i = idx[k];
        if (t->ts[i] >= w1)
            break;
        int64_t ov = overlap(t->ts[i], t->ts[i] + t->dur[i], w0, w1);
        if (ov <= 0)
            continue;
        double d = (double)ov / 1e6;
        int op = t->op[i];
        uint32_t f = t->file[i];
        int ck = f && an_is_ckpt_path(an_strtab_get(&t->files, f));
        int cls = -1;
        if (op == AN_OP_CKPT) {
            ckpt_annot += d;
            continue;
        }
        if (op == AN_OP_COMPUTE)
            cls = AN_ACT_COMPUTE;
        else if (op == AN_OP_FETCH)
            cls = AN_ACT_READ;
        else if ((op == AN_OP_WRITE || op == AN_OP_SYNC || op == AN_OP_META) && ck)
            cls = AN_ACT_CKPT;
        else if (op == AN_OP_WRITE || op == AN_OP_SYNC)
            cls = AN_ACT_WRITE;
        else if (op == AN_OP_READ)
            cls = AN_ACT_READ;
        else if (op == AN_OP_META)
            cls = AN_ACT_META;
        if (cls < 0)
            continue;
        if (cls == AN_ACT_CKPT)
            ckpt_io += d;
        else
            act[cls] += d;
        traced += d;
        if (f && AN_IS_IO(op) && d > best_file) {
            best_file = d;
            *file = f;
        }
    }
    /* a checkpoint annotation holds the checkpoint's own writes: count the larger of the two */
    act[AN_ACT_CKPT] = ckpt_annot > ckpt_io ? ckpt_annot : ckpt_io;
    double window = (double)(w1 - w0) / 1e6;
    double known = act[AN_ACT_CKPT] + act[AN_ACT_WRITE] + act[AN_ACT_READ] + act[AN_ACT_META] +
                   act[AN_ACT_COMPUTE];
    act[AN_ACT_UNTRACED] = window > known ? window - known : 0;
}

static void cpu_pass(const an_trace *t, an_metrics *m) {
    for (size_t p = 0; p < m->nprocs; p++)
        m->procs[p].cpu_util = m->procs[p].cpu_want = -1;
    const unsigned need = (1u << AN_CTR_CPU_USER_US) | (1u << AN_CTR_CPU_SYS_US);
    size_t i = 0;
    while (i < t->nctrs) {
        uint32_t p = t->ctrs[i].proc;
        const an_counter *first = NULL, *last = NULL;
        for (; i < t->nctrs && t->ctrs[i].proc == p; i++)
            if ((t->ctrs[i].has & need) == need) {
                if (!first)
                    first = &t->ctrs[i];
                last = &t->ctrs[i];
            }
        if (!first || last == first || last->ts <= first->ts || p >= m->nprocs)
            continue;
        double cpu = (double)(last->v[AN_CTR_CPU_USER_US] - first->v[AN_CTR_CPU_USER_US] +
                              last->v[AN_CTR_CPU_SYS_US] - first->v[AN_CTR_CPU_SYS_US]);
        double wall = (double)(last->ts - first->ts);
        double u = cpu / wall;
        /* time runnable but not running counts as wanting the CPU (a busy node) */
        double want = u;
        unsigned rd = 1u << AN_CTR_RUN_DELAY_US;
        if ((first->has & rd) && (last->has & rd))
            want += (double)(last->v[AN_CTR_RUN_DELAY_US] - first->v[AN_CTR_RUN_DELAY_US]) / wall;
        m->procs[p].cpu_util = u < 0 ? 0 : u;
        m->procs[p].cpu_want = want < 0 ? 0 : want;
        m->has_cpu = 1;
        m->ncpu_procs++;
        if (want >= 0.7)
            m->ncpu_bound++;
        else if (want <= 0.2)
            m->ncpu_waiting++;
    }
}

/* The measured phase: the training phase (first epoch start to last epoch end), else the longest
 * MPI_Init end to MPI_Finalize start of a process, else the whole run. */
static void phase_pass(const an_trace *t, an_metrics *m, const int64_t *init_end,
                       const int64_t *fin_start) {
    int64_t e0 = INT64_MAX, e1 = INT64_MIN;
    for (size_t i = 0; i < t->n; i++)
        if (t->op[i] == AN_OP_EPOCH) {
            if (t->ts[i] < e0)
                e0 = t->ts[i];
            if (t->ts[i] + t->dur[i] > e1)
                e1 = t->ts[i] + t->dur[i];
        }
    if (e0 < e1) {
        m->phase_s = (double)(e1 - e0) / 1e6;
        m->phase_what = "training phase (first epoch start to last epoch end)";
        return;
    }
    double best = -1;
    for (size_t p = 0; init_end && p < t->nprocs; p++)
        if (init_end[p] != INT64_MIN && fin_start[p] != INT64_MIN && fin_start[p] > init_end[p] &&
            (double)(fin_start[p] - init_end[p]) / 1e6 > best)
            best = (double)(fin_start[p] - init_end[p]) / 1e6;
    if (best >= 0) {
        m->phase_s = best;
        m->phase_what = "MPI phase (MPI_Init end to MPI_Finalize start)";
        return;
    }
    m->phase_s = m->wall_s;
    m->phase_what = "whole run";
}

/* The working state of the MPI passes: per name (kind, row in m->mpi_calls), per process
 * (MPI_Init end, MPI_Finalize start, end of its last MPI call), the collective events and the
 * collective instances they belong to. */
typedef struct {
    int8_t *kind;
    int32_t *callix;
    int64_t *init_end, *fin_start, *last_end;
    coll_ev *ce;
    size_t nce, cap;
    inst *in;
    size_t nin, capin;
    an_imap comms, seqs, insts; /* comm id -> index; (proc, comm) -> next seq; (comm, seq) -> inst */
} mpi_state;

static int state_init(mpi_state *s, const an_trace *t) {
    memset(s, 0, sizeof *s);
    size_t nn = t->names.n + 1;
    s->kind = malloc(nn);
    s->callix = malloc(nn * sizeof *s->callix);
    s->init_end = malloc((t->nprocs + 1) * sizeof *s->init_end);
    s->fin_start = malloc((t->nprocs + 1) * sizeof *s->fin_start);
    s->last_end = malloc((t->nprocs + 1) * sizeof *s->last_end);
    if (!s->kind || !s->callix || !s->init_end || !s->fin_start || !s->last_end ||
        an_imap_init(&s->comms, 16) || an_imap_init(&s->seqs, 64) || an_imap_init(&s->insts, 1024))
        return ERR_NOMEM;
    for (size_t k = 0; k < nn; k++) {
        s->kind[k] = -1;
        s->callix[k] = -1;
    }
    for (size_t p = 0; p < t->nprocs; p++)
        s->init_end[p] = s->fin_start[p] = s->last_end[p] = INT64_MIN;
    return 0;
}

static void state_free(mpi_state *s) {
    MEM_FREE(s->kind, s->callix, s->init_end, s->fin_start, s->last_end, s->ce, s->in);
    an_imap_free(&s->comms);
    an_imap_free(&s->seqs);
    an_imap_free(&s->insts);
}

/* The row of call name nm in m->mpi_calls, added on its first event; NULL when out of memory. */
static an_mpi_call *call_row(const an_trace *t, an_metrics *m, mpi_state *s, uint32_t nm) {
    if (s->kind[nm] < 0)
        s->kind[nm] = (int8_t)mpi_kind(an_strtab_get(&t->names, nm));
    if (s->callix[nm] < 0) {
        if (m->nmpi_calls % 32 == 0) {
            an_mpi_call *nc = realloc(m->mpi_calls, (m->nmpi_calls + 32) * sizeof *nc);
            if (!nc)
                return NULL;
            m->mpi_calls = nc;
        }
        m->mpi_calls[m->nmpi_calls] = (an_mpi_call){.name = nm, .kind = s->kind[nm]};
        s->callix[nm] = (int32_t)m->nmpi_calls++;
    }
    return &m->mpi_calls[s->callix[nm]];
}

/* Collective event i of process p: the k-th on its communicator is instance k there (see the
 * top of the file); updates the instance's arrivals and records the event. */
static int number_collective(const an_trace *t, mpi_state *s, size_t i, uint32_t p, uint32_t nm) {
    int ins;
    uint32_t *ci = an_imap_get(&s->comms, (uint64_t)t->offset[i], s->comms.n, &ins);
    if (!ci)
        return ERR_NOMEM;
    uint32_t cidx = *ci;
    uint32_t *sq = an_imap_get(&s->seqs, (uint64_t)p << 32 | cidx, 0, &ins);
    if (!sq)
        return ERR_NOMEM;
    uint32_t seq = (*sq)++;
    uint32_t *ii = an_imap_get(&s->insts, (uint64_t)cidx << 32 | seq, (uint32_t)s->nin, &ins);
    if (!ii)
        return ERR_NOMEM;
    uint32_t k = *ii;
    if (ins) {
        if (MEM_RESERVE(s->in, s->capin, s->nin, 256))
            return ERR_NOMEM;
        s->in[s->nin++] = (inst){t->ts[i], t->ts[i], p, 0, (uint32_t)(t->offset[i] & 0xffffff), nm, 0};
    }
    inst *x = &s->in[k];
    x->n++;
    if (t->ts[i] < x->min_ts)
        x->min_ts = t->ts[i];
    if (t->ts[i] >= x->max_ts) {
        x->max_ts = t->ts[i];
        x->late = p;
    }
    if (MEM_RESERVE(s->ce, s->cap, s->nce, 256))
        return ERR_NOMEM;
    s->ce[s->nce++] = (coll_ev){i, k, s->last_end[p]};
    return 0;
}

/* Pass 1: per call and process; collectives numbered per (process, communicator). */
static int pass_calls(const an_trace *t, an_metrics *m, mpi_state *s) {
    for (size_t i = 0; i < t->n; i++) {
        if (t->op[i] != AN_OP_MPI && !((t->flags[i] & AN_F_MPIIO) && AN_IS_IO(t->op[i])))
            continue;
        uint32_t nm = t->name[i], p = t->proc[i];
        an_mpi_call *c = call_row(t, m, s, nm);
        if (!c)
            return ERR_NOMEM;
        double d = (double)t->dur[i] / 1e6;
        c->calls += an_calls(t, i);
        c->time_s += d;
        if (t->bytes[i] > 0)
            c->bytes += (uint64_t)t->bytes[i];
        m->has_mpi = 1;
        m->mpi_s += d;
        m->procs[p].mpi_s += d;
        m->procs[p].mpi_calls += an_calls(t, i);
        int64_t end = t->ts[i] + t->dur[i];
        if (s->kind[nm] == AN_MPIK_INIT)
            s->init_end[p] = end;
        else if (s->kind[nm] == AN_MPIK_FINALIZE && s->fin_start[p] == INT64_MIN)
            s->fin_start[p] = t->ts[i];
        if (s->kind[nm] == AN_MPIK_COLL && t->op[i] == AN_OP_MPI && t->offset[i] >= 0 &&
            !(t->flags[i] & AN_F_AGG) && number_collective(t, s, i, p, nm))
            return ERR_NOMEM;
        if (end > s->last_end[p])
            s->last_end[p] = end;
    }
    return 0;
}

/* Pass 2: waits in instances seen on every member; the skew of each. */
static void pass_waits(const an_trace *t, an_metrics *m, mpi_state *s) {
    m->coll_instances = s->nin;
    for (size_t k = 0; k < s->nin; k++) {
        const inst *x = &s->in[k];
        if (x->n == x->size && x->size > 1) {
            m->coll_complete++;
            m->procs[x->late].mpi_last++;
            an_mpi_call *c = &m->mpi_calls[s->callix[x->name]];
            c->instances++;
            c->skew_sum_s += (double)(x->max_ts - x->min_ts) / 1e6;
        }
    }
    for (size_t j = 0; j < s->nce; j++) {
        inst *x = &s->in[s->ce[j].inst];
        if (x->n != x->size || x->size < 2)
            continue;
        size_t i = s->ce[j].ev;
        int64_t w = x->max_ts - t->ts[i];
        if (w > t->dur[i])
            w = t->dur[i];
        if (w <= 0)
            continue;
        double ws = (double)w / 1e6;
        x->wait += ws;
        m->coll_wait_s += ws;
        m->procs[t->proc[i]].mpi_wait_s += ws;
        m->mpi_calls[s->callix[t->name[i]]].wait_s += ws;
    }
}

/* The group (late process, activity, collective) in gr[0..*ngr), added if new; NULL when out of
 * memory. */
static group *find_group(group **gr, size_t *ngr, size_t *capgr, uint32_t proc, int what,
                         uint32_t coll) {
    size_t g = 0;
    while (g < *ngr && !((*gr)[g].l.proc == proc && (*gr)[g].l.activity == what &&
                         (*gr)[g].l.coll == coll))
        g++;
    if (g == *ngr) {
        if (MEM_RESERVE(*gr, *capgr, *ngr, 16))
            return NULL;
        memset(&(*gr)[*ngr], 0, sizeof **gr);
        (*gr)[*ngr].l = (an_mpi_link){.proc = proc, .activity = what, .coll = coll};
        (*ngr)++;
    }
    return &(*gr)[g];
}

/* Pass 3: what the last arriver did before each instance where ranks waited; the group that
 * accounts for the most waiting becomes m->link. */
static int pass_link(const an_trace *t, an_metrics *m, mpi_state *s) {
    uint32_t *start = NULL, *idx = NULL;
    group *gr = NULL;
    size_t ngr = 0, capgr = 0;
    int rc = ERR_NOMEM;
    if (by_process(t, &start, &idx))
        goto out;
    for (size_t j = 0; j < s->nce; j++) {
        inst *x = &s->in[s->ce[j].inst];
        size_t i = s->ce[j].ev;
        if (x->wait <= 0 || t->proc[i] != x->late || t->ts[i] != x->max_ts)
            continue;
        x->wait = -x->wait; /* counted once */
        /* What made it late: its time between the first arrival (the others were ready)
         * and its own, after its previous MPI call. */
        int64_t w0 = s->ce[j].prev_end > x->min_ts ? s->ce[j].prev_end : x->min_ts;
        double act[AN_ACT_COUNT];
        uint32_t file;
        activity(t, start, idx, x->late, w0, x->max_ts, act, &file);
        int best = AN_ACT_UNTRACED;
        for (int a = 0; a < AN_ACT_COUNT; a++)
            if (act[a] > act[best])
                best = a;
        group *g = find_group(&gr, &ngr, &capgr, x->late, best, x->name);
        if (!g)
            goto out;
        g->l.instances++;
        g->l.wait_s += -x->wait;
        g->l.activity_s += act[best];
        if (file && !g->l.file)
            g->l.file = file;
        m->link.waited_instances++;
    }
    size_t bg = 0;
    for (size_t g = 1; g < ngr; g++)
        if (gr[g].l.wait_s > gr[bg].l.wait_s)
            bg = g;
    if (ngr) {
        uint64_t wi = m->link.waited_instances;
        m->link = gr[bg].l;
        m->link.waited_instances = wi;
    }
    rc = 0;
out:
    MEM_FREE(gr, start, idx);
    return rc;
}

int an_metrics_mpi(const an_trace *t, an_metrics *m) {
    cpu_pass(t, m);
    mpi_state s;
    int rc = ERR_NOMEM;
    if (state_init(&s, t) || pass_calls(t, m, &s))
        goto out;
    phase_pass(t, m, s.init_end, s.fin_start);
    if (!m->has_mpi) {
        rc = 0;
        goto out;
    }
    for (size_t p = 0; p < t->nprocs; p++)
        if (m->procs[p].mpi_calls)
            m->mpi_proc_time_s += m->procs[p].span_s;
    pass_waits(t, m, &s);
    if (m->coll_wait_s > 0 && pass_link(t, m, &s))
        goto out;
    if (m->nmpi_calls)
        qsort(m->mpi_calls, m->nmpi_calls, sizeof *m->mpi_calls, cmp_call_time);
    rc = 0;
out:
    state_free(&s);
    return rc;
}
