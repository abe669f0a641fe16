/* merge: the reader's driver. Every file is one part, a large one several (byte ranges decoded
 * by different threads, see gunzip.c); the parts are loaded in parallel, each into its own
 * chunk. Then the lines cut at part boundaries are joined, the metadata of one file is shared
 * between its parts (an FH line in one part names the file of events in another), the chunks
 * are sorted in parallel and merged into one time-sorted set of global columns with global
 * string tables (k-way merge, ids remapped per chunk), and the per-trace facts are derived:
 * system-path flags, file-system classes, threads per process, clock skew. */
#include "analyze/reader_int.h"

#include "core/err.h"
#include "core/mem.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    chunk *chunks;
    size_t *order; /* chunk indices, largest part first */
    size_t nchunks;
    size_t next;
    int sort_phase; /* 0: load the parts, 1: sort the chunks */
    pthread_mutex_t mu;
} pool;

static int rank_from_filename(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *t = strstr(b, "trace-");
    if (!t)
        return -1;
    t += 6;
    char *end;
    long r = strtol(t, &end, 10);
    if (end == t || strncmp(end, "-of-", 4))
        return -1;
    return (int)r;
}

static void *worker(void *arg) {
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next++;
        pthread_mutex_unlock(&p->mu);
        if (i >= p->nchunks)
            break;
        chunk *c = &p->chunks[p->order[i]];
        if (p->sort_phase) {
            if (!c->oom && an_chunk_sort(c))
                c->oom = 1;
        } else {
            an_load_part(c);
            c->file_rank = rank_from_filename(c->in->path);
        }
    }
    return NULL;
}

/* Runs the pool's phase on nth threads (the caller is one of them). */
static void run_pool(pool *p, int nth) {
    p->next = 0;
    pthread_t *th = calloc((size_t)(nth > 1 ? nth - 1 : 1), sizeof *th);
    int started = 0;
    for (int i = 0; th && i < nth - 1; i++)
        if (pthread_create(&th[i], NULL, worker, p) == 0)
            started++;
    worker(p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
}

/* Joins the line cut between two parts of a file (the tail of one, the head of the next) and
 * parses it into the later part. */
static void join_parts(chunk *a, chunk *b) {
    if (!b->head && !a->tail)
        return;
    size_t n = a->tail_n + b->head_n;
    char *line = malloc(n + 1);
    if (!line) {
        b->oom = 1;
        return;
    }
    if (a->tail_n)
        memcpy(line, a->tail, a->tail_n);
    if (b->head_n)
        memcpy(line + a->tail_n, b->head, b->head_n);
    if (n)
        an_chunk_line(b, line, line + n);
    free(line);
}

/* Interns key ok of part o into part c as key k's resolved string (fs = 0) or file-system type
 * (fs = 1). 0, or -1 with c->oom set when out of memory. */
static int import_key(chunk *c, const chunk *o, uint32_t ok, uint32_t k, int fs) {
    uint32_t nk = an_strtab_intern(&c->keys, an_strtab_get(&o->keys, ok),
                                   an_strtab_len(&o->keys, ok));
    if (nk == AN_STR_NONE || an_chunk_key_cover(c, nk)) {
        c->oom = 1;
        return -1;
    }
    (fs ? c->fsof : c->resolved)[k] = nk;
    return 0;
}

/* Resolution of a part's unresolved keys (hashes defined by an FH/HH line in another part of
 * the same file): interns the resolved string and its file-system type into this part. */
static void share_metadata(chunk *c, chunk *group, int nparts) {
    for (uint32_t k = 1; k < c->keys.n && !c->oom; k++) {
        if (c->resolved[k] != k && c->fsof[k])
            continue;
        const char *s = an_strtab_get(&c->keys, k);
        size_t n = an_strtab_len(&c->keys, k);
        for (int j = 0; j < nparts; j++) {
            chunk *o = &group[j];
            if (o == c)
                continue;
            uint32_t ok = an_strtab_find(&o->keys, s, n);
            if (ok == AN_STR_NONE || ok >= o->nresolved)
                continue;
            if (c->resolved[k] == k && o->resolved[ok] != ok &&
                import_key(c, o, o->resolved[ok], k, 0))
                return;
            if (!c->fsof[k] && o->fsof[ok] && import_key(c, o, o->fsof[ok], k, 1))
                return;
            s = an_strtab_get(&c->keys, k); /* the arena may have moved */
        }
    }
    /* Ranks from a PR line in another part. */
    for (uint32_t i = 0; i < c->nprocs; i++)
        for (int j = 0; j < nparts && c->procs[i].rank < 0; j++)
            for (uint32_t q = 0; q < group[j].nprocs; q++)
                if (group[j].procs[q].pid == c->procs[i].pid && group[j].procs[q].rank >= 0)
                    c->procs[i].rank = group[j].procs[q].rank;
}

/* The executable's name from the start event's SH string: the basename of its first ';'-token
 * (dftracer's SH of the command line joins argv with ';'). */
static void set_exe(an_proc *p, const char *s, size_t n) {
    const char *e = memchr(s, ';', n);
    if (e)
        n = (size_t)(e - s);
    const char *b = s;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/')
            b = s + i + 1;
    n -= (size_t)(b - s);
    if (n >= sizeof p->exe)
        n = sizeof p->exe - 1;
    memcpy(p->exe, b, n);
    p->exe[n] = 0;
}

int an_is_launcher(const char *exe) {
    static const char *const L[] = {"mpirun", "mpiexec", "mpirun.openmpi", "mpiexec.openmpi",
                                    "mpirun.mpich", "mpiexec.mpich", "mpiexec.hydra", "orterun",
                                    "prterun", "prte", "prted", "orted", "srun", "slurmstepd",
                                    "hydra_pmi_proxy", "jsrun", "aprun", NULL};
    for (const char *const *l = L; *l; l++)
        if (!strcmp(exe, *l))
            return 1;
    return 0;
}

static int count_category(an_trace *t, const char *cat, size_t n, uint64_t records) {
    char low[128];
    if (n >= sizeof low)
        n = sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)cat[i]);
    uint32_t before = t->rec_cats.n;
    uint32_t id = an_strtab_intern(&t->rec_cats, low, n);
    if (id == AN_STR_NONE)
        return ERR_NOMEM;
    if (t->rec_cats.n != before || !t->rec_cat_n) {
        uint64_t *g = realloc(t->rec_cat_n, t->rec_cats.n * sizeof *g);
        if (!g)
            return ERR_NOMEM;
        for (uint32_t k = t->rec_cat_n ? before : 0; k < t->rec_cats.n; k++)
            g[k] = 0;
        t->rec_cat_n = g;
    }
    t->rec_cat_n[id] += records;
    t->records += records;
    return 0;
}

static int cmp_counter(const void *a, const void *b) {
    const an_counter *x = a, *y = b;
    if (x->proc != y->proc)
        return x->proc < y->proc ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static const char *const IGNORED_PATTERNS[] = {
    /* DFAnalyzer's IGNORED_FILE_PATTERNS: system and interpreter files, not the workload's. */
    "/dev/", "/etc/", "/gapps/python", "/lib/python", "/proc/", "/software/", "/sys/", "/usr/lib",
    "/usr/tce/backend", "/usr/tce/packages", "/venv", "__pycache__", "/usr/share/", "/usr/local/lib",
    "/site-packages/", "/dist-packages/",
    "/ompi.", /* Open MPI's session directory (shared-memory and topology files) */
    NULL};

static int is_system_path(const char *p) {
    for (const char *const *q = IGNORED_PATTERNS; *q; q++)
        if (strstr(p, *q))
            return 1;
    return 0;
}

typedef struct {
    uint32_t *name, *cat, *proc; /* per pair / per local proc */
    uint8_t *op, *flags;
    uint32_t *file;              /* per key: global file id, or AN_STR_NONE = unresolved yet */
} remap;

/* The chunks' counter samples with global process ids, in (process, time) order. */
static int merge_counters(an_trace *t, chunk *ch, size_t nc, const remap *rm) {
    size_t n = 0;
    for (size_t k = 0; k < nc; k++)
        n += ch[k].nctrs;
    if (!n)
        return 0;
    t->ctrs = malloc(n * sizeof *t->ctrs);
    if (!t->ctrs)
        return ERR_NOMEM;
    for (size_t k = 0; k < nc; k++)
        for (size_t i = 0; i < ch[k].nctrs; i++) {
            an_counter x = ch[k].ctrs[i];
            x.proc = rm[k].proc[x.proc];
            t->ctrs[t->nctrs++] = x;
        }
    qsort(t->ctrs, t->nctrs, sizeof *t->ctrs, cmp_counter);
    return 0;
}



/* Min-heap over chunk heads for the k-way merge. */
typedef struct {
    int64_t ts;
    uint32_t c;
} head;

static void heap_down(head *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && (h[l].ts < h[m].ts || (h[l].ts == h[m].ts && h[l].c < h[m].c)))
            m = l;
        if (r < n && (h[r].ts < h[m].ts || (h[r].ts == h[m].ts && h[r].c < h[m].c)))
            m = r;
        if (m == i)
            return;
        head t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

void an_trace_free(an_trace *t) {
    if (!t)
        return;
    MEM_FREE(t->ts, t->dur, t->offset, t->bytes, t->name, t->cat, t->file, t->proc, t->tid, t->op,
             t->flags, t->file_ignored, t->file_fstype, t->file_fs, t->file_fs_how, t->rec_cat_n,
             t->ctrs, t->procs);
    an_strtab *tabs[] = {&t->fstypes, &t->names, &t->cats, &t->files, &t->hosts, &t->rec_cats};
    for (size_t i = 0; i < sizeof tabs / sizeof *tabs; i++)
        an_strtab_free(tabs[i]);
    for (size_t i = 0; i < t->ninputs; i++)
        free(t->inputs[i].path);
    free(t->inputs);
    memset(t, 0, sizeof *t);
}

/* The file-system type an FH line recorded for file key fk, kept for global file gf. */
static int record_fstype(an_trace *t, const chunk *c, uint32_t fk, uint32_t gf) {
    if (MEM_COVER(t->file_fstype, t->nfile_fstype, gf, 256))
        return ERR_NOMEM;
    uint32_t k = fk < c->nresolved ? c->fsof[fk] : 0;
    if (!k || t->file_fstype[gf])
        return 0;
    uint32_t id = an_strtab_intern(&t->fstypes, an_strtab_get(&c->keys, k), an_strtab_len(&c->keys, k));
    if (id == AN_STR_NONE)
        return ERR_NOMEM;
    t->file_fstype[gf] = id;
    return 0;
}

/* Class of every file: a --fs-type override (longest prefix), else the type the tracer
 * recorded, else a guess from the path. */
static int classify_files(an_trace *t, const an_read_opts *o) {
    size_t nf = t->files.n + 1;
    t->file_fs = calloc(nf, 1);
    t->file_fs_how = calloc(nf, 1);
    if (!t->file_fs || !t->file_fs_how)
        return ERR_NOMEM;
    for (uint32_t f = 1; f < t->files.n; f++) {
        const char *path = an_strtab_get(&t->files, f);
        size_t pl = strlen(path), best = 0;
        int cls = -1;
        for (int i = 0; o && i < o->nfs_types; i++) {
            const char *spec = o->fs_types[i], *eq = strchr(spec, '=');
            size_t l = eq ? (size_t)(eq - spec) : 0;
            while (l > 1 && spec[l - 1] == '/')
                l--;
            if (!eq || l < best || pl < l || memcmp(path, spec, l) || (path[l] && path[l] != '/'))
                continue;
            int k = an_fs_class(eq + 1, strlen(eq + 1));
            if (k >= 0) {
                cls = k;
                best = l;
            }
        }
        if (cls >= 0) {
            t->file_fs[f] = (uint8_t)cls;
            t->file_fs_how[f] = AN_FSHOW_USER;
            continue;
        }
        uint32_t ft = f < t->nfile_fstype ? t->file_fstype[f] : 0;
        int k = ft ? an_fs_class(an_strtab_get(&t->fstypes, ft), an_strtab_len(&t->fstypes, ft)) : -1;
        if (k >= 0) {
            t->file_fs[f] = (uint8_t)k;
            t->file_fs_how[f] = AN_FSHOW_TRACE;
        } else {
            t->file_fs[f] = (uint8_t)an_fs_infer(path);
            t->file_fs_how[f] = t->file_fs[f] ? AN_FSHOW_PATH : AN_FSHOW_NONE;
        }
    }
    return 0;
}

/* Chunk index and position packed in one word of the merge order. */
#define SRC_SHIFT 40
#define SRC_MASK ((UINT64_C(1) << SRC_SHIFT) - 1)

typedef struct {
    an_trace *t;
    const chunk *ch;
    const remap *rm;
    const uint64_t *src;
    size_t lo, hi;
} copy_job;

/* Copies the merged events [lo, hi) into the global columns, remapping ids. */
static void *copy_range(void *arg) {
    copy_job *j = arg;
    an_trace *t = j->t;
    for (size_t o = j->lo; o < j->hi; o++) {
        uint64_t s = j->src[o];
        const chunk *c = &j->ch[s >> SRC_SHIFT];
        const remap *r = &j->rm[s >> SRC_SHIFT];
        size_t i = an_chunk_at(c, (size_t)(s & SRC_MASK));
        uint32_t pr = c->pair[i];
        uint32_t gf = r->file[c->filekey[i]];
        t->ts[o] = c->ts[i];
        t->dur[o] = c->dur[i];
        t->offset[o] = c->offset[i];
        t->bytes[o] = c->bytes[i];
        t->name[o] = r->name[pr];
        t->cat[o] = r->cat[pr];
        t->op[o] = r->op[pr];
        t->flags[o] = (uint8_t)(c->flags[i] | r->flags[pr] | (t->file_ignored[gf] ? AN_F_IGNORED : 0));
        t->file[o] = gf;
        t->proc[o] = r->proc[c->proc[i]];
        t->tid[o] = c->tid[i];
    }
    return NULL;
}

static void copy_parallel(an_trace *t, const chunk *ch, const remap *rm, const uint64_t *src,
                          int nth) {
    if (nth < 1 || t->n < 100000)
        nth = 1;
    if (nth > 16)
        nth = 16;
    copy_job jobs[16];
    pthread_t th[16];
    int started[16] = {0};
    for (int k = 0; k < nth; k++) {
        jobs[k] = (copy_job){t, ch, rm, src, t->n * (size_t)k / (size_t)nth,
                             t->n * (size_t)(k + 1) / (size_t)nth};
        if (k > 0)
            started[k] = pthread_create(&th[k], NULL, copy_range, &jobs[k]) == 0;
    }
    copy_range(&jobs[0]);
    for (int k = 1; k < nth; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            copy_range(&jobs[k]); /* no thread: do it here */
    }
}

/* Step 1: the event columns, sized for every chunk's events. */
static int alloc_columns(an_trace *t, size_t total) {
    size_t m = total ? total : 1;
    t->ts = malloc(m * sizeof *t->ts);
    t->dur = malloc(m * sizeof *t->dur);
    t->offset = malloc(m * sizeof *t->offset);
    t->bytes = malloc(m * sizeof *t->bytes);
    t->name = malloc(m * sizeof *t->name);
    t->cat = malloc(m * sizeof *t->cat);
    t->file = malloc(m * sizeof *t->file);
    t->proc = malloc(m * sizeof *t->proc);
    t->tid = malloc(m * sizeof *t->tid);
    t->op = malloc(m);
    t->flags = malloc(m);
    if (!t->ts || !t->dur || !t->offset || !t->bytes || !t->name || !t->cat || !t->file ||
        !t->proc || !t->tid || !t->op || !t->flags)
        return ERR_NOMEM;
    return 0;
}

/* The global processes so far: keys holds "host\x1fpid" (id - 1 = index in t->procs). */
typedef struct {
    an_strtab keys;
    size_t cap; /* of t->procs */
} proc_index;

/* Step 2a: a chunk's remap tables allocated, its (name, cat) pairs interned into the global
 * tables and its file keys marked unresolved. */
static int remap_pairs(an_trace *t, const chunk *c, remap *r) {
    r->name = malloc((c->npairs + 1) * sizeof *r->name);
    r->cat = malloc((c->npairs + 1) * sizeof *r->cat);
    r->op = malloc(c->npairs + 1);
    r->flags = malloc(c->npairs + 1);
    r->proc = malloc((c->nprocs + 1) * sizeof *r->proc);
    r->file = malloc((c->keys.n + 1) * sizeof *r->file);
    if (!r->name || !r->cat || !r->op || !r->flags || !r->proc || !r->file)
        return ERR_NOMEM;
    for (uint32_t i = 0; i < c->npairs; i++) {
        const pairinfo *pi = &c->pairs[i];
        r->name[i] = an_strtab_intern(&t->names, an_strtab_get(&c->names, pi->name),
                                      an_strtab_len(&c->names, pi->name));
        r->cat[i] = an_strtab_intern(&t->cats, an_strtab_get(&c->cats, pi->cat),
                                     an_strtab_len(&c->cats, pi->cat));
        if (r->name[i] == AN_STR_NONE || r->cat[i] == AN_STR_NONE)
            return ERR_NOMEM;
        r->op[i] = pi->op;
        r->flags[i] = pi->flags;
    }
    for (uint32_t i = 0; i < c->keys.n; i++)
        r->file[i] = AN_STR_NONE;
    return 0;
}

/* Step 2b: a chunk's processes mapped to global ones (one per host and pid), with their rank,
 * record count and executable. */
static int remap_procs(an_trace *t, const chunk *c, remap *r, proc_index *px) {
    for (uint32_t i = 0; i < c->nprocs; i++) {
        const lproc *lp = &c->procs[i];
        uint32_t hk = lp->hostkey < c->nresolved ? c->resolved[lp->hostkey] : lp->hostkey;
        const char *host = an_strtab_get(&c->keys, hk);
        size_t hl = an_strtab_len(&c->keys, hk);
        uint32_t hid = an_strtab_intern(&t->hosts, host, hl);
        char key[600];
        int kl = snprintf(key, sizeof key, "%.*s\x1f%lld", (int)(hl > 500 ? 500 : hl), host,
                          (long long)lp->pid);
        uint32_t before = px->keys.n;
        uint32_t gid = an_strtab_intern(&px->keys, key, (size_t)kl);
        if (hid == AN_STR_NONE || gid == AN_STR_NONE)
            return ERR_NOMEM;
        gid -= 1; /* prockeys id 0 is "" */
        if (px->keys.n != before) {
            if (MEM_RESERVE(t->procs, px->cap, t->nprocs, 16))
                return ERR_NOMEM;
            t->procs[t->nprocs++] = (an_proc){.host = hid, .pid = lp->pid, .rank = -1};
        }
        int rank = lp->rank >= 0 ? lp->rank : (c->nprocs == 1 ? c->file_rank : -1);
        if (rank >= 0)
            t->procs[gid].rank = rank;
        t->procs[gid].records += lp->records;
        if (lp->exekey && (!t->procs[gid].exe[0] || lp->exe_ts > t->procs[gid].exe_ts)) {
            t->procs[gid].exe_ts = lp->exe_ts;
            uint32_t ek = lp->exekey < c->nresolved ? c->resolved[lp->exekey] : lp->exekey;
            set_exe(&t->procs[gid], an_strtab_get(&c->keys, ek), an_strtab_len(&c->keys, ek));
        }
        r->proc[i] = gid;
    }
    return 0;
}

/* Step 2: per-chunk remap tables (pairs -> global name/cat/op, local procs -> global procs)
 * and the records per category; launchers lose their rank. */
static int remap_chunks(an_trace *t, chunk *ch, size_t nc, remap *rm) {
    proc_index px = {.cap = 16};
    if (an_strtab_init(&px.keys))
        return ERR_NOMEM;
    int rc = ERR_NOMEM;
    t->procs = malloc(px.cap * sizeof *t->procs);
    if (!t->procs)
        goto out;
    for (size_t k = 0; k < nc; k++) {
        chunk *c = &ch[k];
        if (remap_pairs(t, c, &rm[k]) || remap_procs(t, c, &rm[k], &px))
            goto out;
        /* Records per category, lower-cased as dftracer_stats prints them. */
        for (uint32_t i = 0; i < c->npairs; i++)
            if (c->pairs[i].records &&
                count_category(t, an_strtab_get(&c->cats, c->pairs[i].cat),
                               an_strtab_len(&c->cats, c->pairs[i].cat), c->pairs[i].records))
                goto out;
    }
    /* Launchers (mpirun, srun, orted...) are not ranks: an env-derived rank on them is dropped. */
    for (size_t p = 0; p < t->nprocs; p++)
        if (an_is_launcher(t->procs[p].exe)) {
            t->procs[p].launcher = 1;
            t->procs[p].rank = -1;
        }
    rc = 0;
out:
    an_strtab_free(&px.keys);
    return rc;
}

/* Step 3: global file ids for every key an event uses (chunk order: deterministic), their
 * file-system classes and system-path flags, all before the events are copied. */
static int map_files(an_trace *t, chunk *ch, size_t nc, remap *rm, const an_read_opts *opts) {
    for (size_t k = 0; k < nc; k++) {
        chunk *c = &ch[k];
        for (uint32_t fk = 1; fk < c->keys.n; fk++) {
            if (!c->key_used || !c->key_used[fk])
                continue;
            uint32_t rk = fk < c->nresolved ? c->resolved[fk] : fk;
            uint32_t gf = an_strtab_intern(&t->files, an_strtab_get(&c->keys, rk),
                                           an_strtab_len(&c->keys, rk));
            if (gf == AN_STR_NONE || record_fstype(t, c, fk, gf))
                return ERR_NOMEM;
            rm[k].file[fk] = gf;
        }
        rm[k].file[0] = 0;
    }
    if (classify_files(t, opts))
        return ERR_NOMEM;
    t->file_ignored = calloc(t->files.n + 1, 1);
    if (!t->file_ignored)
        return ERR_NOMEM;
    for (uint32_t f = 1; f < t->files.n; f++)
        t->file_ignored[f] = (uint8_t)(is_system_path(an_strtab_get(&t->files, f)) &&
                                       !opts->include_system);
    return 0;
}

/* Step 4: k-way merge by timestamp into src, an order of (chunk, index); ties keep file order,
 * so the result is deterministic. Returns the number of events ordered. */
static size_t merge_order(const chunk *ch, size_t nc, head *heap, size_t *pos, uint64_t *src) {
    size_t hn = 0;
    for (size_t k = 0; k < nc; k++)
        if (ch[k].n)
            heap[hn++] = (head){.ts = ch[k].ts[an_chunk_at(&ch[k], 0)], .c = (uint32_t)k};
    for (size_t i = hn; i-- > 0;)
        heap_down(heap, hn, i);
    size_t o = 0;
    while (hn) {
        uint32_t k = heap[0].c;
        const chunk *c = &ch[k];
        size_t i = pos[k];
        /* The run of this chunk that stays ahead of the next chunk's head. */
        int64_t limit = INT64_MAX;
        if (hn > 1) {
            limit = heap[1].ts;
            if (hn > 2 && heap[2].ts < limit)
                limit = heap[2].ts;
        }
        do
            src[o++] = (uint64_t)k << SRC_SHIFT | i++;
        while (i < c->n && c->ts[an_chunk_at(c, i)] < limit);
        pos[k] = i;
        if (i < c->n)
            heap[0].ts = c->ts[an_chunk_at(c, i)];
        else
            heap[0] = heap[--hn];
        heap_down(heap, hn, 0);
    }
    return o;
}

/* Step 5: threads per process, the chunks' thread sets mapped to global processes. */
static int count_threads(an_trace *t, const chunk *ch, size_t nc, const remap *rm) {
    an_imap tids;
    if (an_imap_init(&tids, 1024))
        return ERR_NOMEM;
    for (size_t k = 0; k < nc; k++) {
        const an_imap *ct = &ch[k].threads;
        for (uint32_t slot = 0; slot < ct->nslots; slot++) {
            if (ct->keys[slot] == UINT64_MAX)
                continue;
            uint32_t gp = rm[k].proc[ct->keys[slot] >> 32];
            int ins = 0;
            if (!an_imap_get(&tids, ((uint64_t)gp << 32) | (uint32_t)ct->keys[slot], 0, &ins)) {
                an_imap_free(&tids);
                return ERR_NOMEM;
            }
            if (ins)
                t->procs[gp].nthreads++;
        }
    }
    an_imap_free(&tids);
    return 0;
}

/* Step 6: clock skew, the spread of each host's first timestamp (DFAnalyzer warns above 30 s). */
static int clock_skew(an_trace *t, const chunk *ch, size_t nc, const remap *rm) {
    if (t->hosts.n <= 2 || !t->n)
        return 0;
    size_t nh = t->hosts.n;
    int64_t *first = malloc(nh * sizeof *first);
    if (!first)
        return ERR_NOMEM;
    for (size_t h = 0; h < nh; h++)
        first[h] = INT64_MAX;
    for (size_t k = 0; k < nc; k++)
        for (uint32_t p = 0; ch[k].proc_first && p < ch[k].nprocs; p++) {
            uint32_t h = t->procs[rm[k].proc[p]].host;
            if (ch[k].proc_first[p] < first[h])
                first[h] = ch[k].proc_first[p];
        }
    double sum = 0, sum2 = 0;
    int k = 0;
    for (size_t h = 0; h < nh; h++)
        if (first[h] != INT64_MAX) {
            double v = (double)(first[h] - t->ts[0]) / 1e6;
            sum += v;
            sum2 += v * v;
            k++;
        }
    free(first);
    if (k >= 2) {
        double mean = sum / k, var = sum2 / k - mean * mean;
        t->host_start_stddev_s = var > 0 ? sqrt(var) : 0;
        t->clock_skew = t->host_start_stddev_s > 30.0;
    }
    return 0;
}

static void free_remaps(remap *rm, size_t nc) {
    for (size_t k = 0; rm && k < nc; k++)
        MEM_FREE(rm[k].name, rm[k].cat, rm[k].op, rm[k].flags, rm[k].proc, rm[k].file);
    free(rm);
}

/* The chunks merged into t's global columns, one step after the other (see each step above). */
static int merge_chunks(an_trace *t, chunk *ch, size_t nc, const an_read_opts *opts, int nth) {
    size_t total = 0;
    for (size_t i = 0; i < nc; i++)
        total += ch[i].n;
    if (an_strtab_init(&t->names) || an_strtab_init(&t->cats) || an_strtab_init(&t->files) ||
        an_strtab_init(&t->hosts) || an_strtab_init(&t->fstypes) || an_strtab_init(&t->rec_cats))
        return ERR_NOMEM;
    remap *rm = calloc(nc ? nc : 1, sizeof *rm);
    head *heap = malloc((nc ? nc : 1) * sizeof *heap);
    size_t *pos = calloc(nc ? nc : 1, sizeof *pos);
    uint64_t *src = NULL;
    int rc = ERR_NOMEM;
    if (alloc_columns(t, total) || !rm || !heap || !pos)
        goto out;
    if (remap_chunks(t, ch, nc, rm) || merge_counters(t, ch, nc, rm) ||
        map_files(t, ch, nc, rm, opts))
        goto out;
    src = malloc((total ? total : 1) * sizeof *src);
    if (!src)
        goto out;
    t->n = merge_order(ch, nc, heap, pos, src);
    copy_parallel(t, ch, rm, src, nth);
    if (count_threads(t, ch, nc, rm) || clock_skew(t, ch, nc, rm))
        goto out;
    rc = 0;
out:
    free_remaps(rm, nc);
    MEM_FREE(heap, pos, src);
    if (rc)
        err_set(ERR_NOMEM, "analyze: out of memory merging %zu events", total);
    return rc;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Largest part first, so the last part to finish is a small one. */
static const chunk *sort_chunks;
static int cmp_part_size(const void *a, const void *b) {
    const chunk *x = &sort_chunks[*(const size_t *)a], *y = &sort_chunks[*(const size_t *)b];
    int64_t sx = x->range_end - x->range_start, sy = y->range_end - y->range_start;
    return sx > sy ? -1 : sx < sy ? 1 : (x < y ? -1 : x > y);
}

/* Appends one problem to a file's note ("; " between problems), so each is said once. */
static void note_add(an_input *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(an_input *in, const char *fmt, ...) {
    size_t n = strlen(in->note);
    if (n + 4 >= sizeof in->note)
        return;
    if (n) {
        memcpy(in->note + n, "; ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->note + n, sizeof in->note - n, fmt, ap);
    va_end(ap);
}

/* What happened to each file, summed over its parts (line numbers made file-wide). */
static void sum_inputs(an_trace *t, chunk *ch, size_t nc) {
    for (size_t k = 0; k < nc; k++) {
        chunk *c = &ch[k];
        an_input *in = c->in;
        if (c->malformed && !in->malformed)
            in->first_bad_line = in->lines + c->first_bad_line;
        if (c->out_of_range && !in->out_of_range)
            in->first_oor_line = in->lines + c->first_oor_line;
        in->events += c->n;
        in->lines += c->lines;
        in->malformed += c->malformed;
        in->out_of_range += c->out_of_range;
        in->members += c->members;
        in->unknown_meta += c->unknown_meta;
        in->calls += c->calls;
        in->num_events += c->num_events;
        in->has_end |= c->has_end;
        in->has_count |= c->has_count;
        in->shape2 |= c->shape2;
        in->ours |= c->ours;
        in->truncated |= c->truncated;
        in->empty |= c->empty;
        in->failed |= c->failed;
        if (c->note[0] && !in->note[0])
            snprintf(in->note, sizeof in->note, "%s", c->note);
        t->total_lines += c->lines;
        t->total_malformed += c->malformed;
        t->out_of_range += c->out_of_range;
        t->metadata_events += c->metadata;
    }
    for (size_t i = 0; i < t->ninputs; i++) {
        an_input *in = &t->inputs[i];
        if (in->malformed)
            note_add(in, "%llu malformed line(s) skipped, first at line %llu",
                     (unsigned long long)in->malformed, (unsigned long long)in->first_bad_line);
        if (in->out_of_range)
            note_add(in, "%llu event(s) with an out-of-range number (beyond int64, a negative "
                         "duration, a time beyond 2^61 us) skipped, first at line %llu",
                     (unsigned long long)in->out_of_range, (unsigned long long)in->first_oor_line);
        /* The end record says how many events the process wrote before it (dftracer 2.x, and
         * our tracer in both shapes; an aggregated record stands for its dft_cnt calls): fewer
         * read means the file lost some (a damaged member). dftracer 1.x numbered metadata
         * lines too, so its count is not checked. */
        int known = in->shape2 || in->ours;
        if (in->has_count && known) {
            uint64_t want = in->num_events + 1, got = in->calls + in->out_of_range;
            if (got < want)
                note_add(in, "short: the end record counts %llu event(s), %llu read",
                         (unsigned long long)want, (unsigned long long)got);
        } else if (known && !in->has_end && !in->empty && !in->failed && in->calls) {
            note_add(in, "no end record: the process did not finish writing this file (killed, "
                         "or still running); its events up to the cut are used");
        }
    }
}

int an_trace_read(an_trace *t, char *const *files, size_t nfiles, const an_read_opts *opts) {
    static const an_read_opts dflt = {0};
    if (!opts)
        opts = &dflt;
    memset(t, 0, sizeof *t);
    struct timespec ts0;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    int nth = opts->threads > 0 ? opts->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1)
        nth = 1;
    t->inputs = calloc(nfiles ? nfiles : 1, sizeof *t->inputs);
    int *nparts = calloc(nfiles ? nfiles : 1, sizeof *nparts);
    int64_t *sizes = calloc(nfiles ? nfiles : 1, sizeof *sizes);
    size_t nc = 0;
    if (t->inputs && nparts && sizes)
        for (size_t i = 0; i < nfiles; i++) {
            nparts[i] = an_plan_parts(files[i], nth, opts->part_bytes, &sizes[i]);
            nc += (size_t)nparts[i];
        }
    chunk *ch = calloc(nc ? nc : 1, sizeof *ch);
    size_t *order = calloc(nc ? nc : 1, sizeof *order);
    int rc = 0;
    if (!t->inputs || !nparts || !sizes || !ch || !order) {
        rc = err_set(ERR_NOMEM, "analyze: out of memory");
        goto out;
    }
    t->ninputs = nfiles;
    size_t k = 0;
    for (size_t i = 0; i < nfiles; i++) {
        t->inputs[i].path = strdup(files[i]);
        if (!t->inputs[i].path) {
            rc = err_set(ERR_NOMEM, "analyze: out of memory");
            goto out;
        }
        for (int j = 0; j < nparts[i]; j++, k++) {
            if (an_chunk_init(&ch[k], &t->inputs[i])) {
                rc = err_set(ERR_NOMEM, "analyze: out of memory");
                goto out;
            }
            ch[k].part = j;
            ch[k].nparts = nparts[i];
            ch[k].range_start = sizes[i] / nparts[i] * j;
            ch[k].range_end = j + 1 < nparts[i] ? sizes[i] / nparts[i] * (j + 1) : sizes[i];
            order[k] = k;
        }
    }
    sort_chunks = ch;
    qsort(order, nc, sizeof *order, cmp_part_size);
    pool p = {.chunks = ch, .order = order, .nchunks = nc};
    pthread_mutex_init(&p.mu, NULL);
    run_pool(&p, nth < (int)nc ? nth : (int)nc);
    double t1 = seconds_since(&ts0);
    /* Lines cut between parts, and metadata shared between the parts of a file. */
    for (k = 0; k < nc; k++) {
        if (ch[k].part > 0)
            join_parts(&ch[k - 1], &ch[k]);
        if (ch[k].nparts > 1) {
            chunk *group = &ch[k - ch[k].part];
            share_metadata(&ch[k], group, ch[k].nparts);
        }
    }
    p.sort_phase = 1;
    run_pool(&p, nth < (int)nc ? nth : (int)nc);
    pthread_mutex_destroy(&p.mu);
    double t2 = seconds_since(&ts0);
    t->phase_s[0] = t1;
    t->phase_s[1] = t2 - t1;
    sum_inputs(t, ch, nc);
    int oom = 0;
    for (k = 0; k < nc; k++)
        oom |= ch[k].oom;
    if (oom)
        rc = err_set(ERR_NOMEM, "analyze: out of memory reading the traces");
    else
        rc = merge_chunks(t, ch, nc, opts, nth);
    if (!rc && t->n == 0) {
        char names[512] = "";
        size_t off = 0;
        for (size_t i = 0; i < nfiles && off < sizeof names - 80; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s (%s)", i ? "; " : "",
                                    t->inputs[i].path,
                                    t->inputs[i].note[0] ? t->inputs[i].note
                                    : t->inputs[i].empty ? "empty file" : "no events");
        rc = err_set(ERR_FORMAT,
                     "analyze: no trace event could be read from %zu file(s): %s; expected "
                     "dftracer JSON lines (1.x {\"name\":..,\"ts\":..,\"ph\":\"X\"} or 2.x "
                     "{\"name\":..,\"ts\":..,\"ph\":1})",
                     nfiles, names);
    }
out:
    for (k = 0; ch && k < nc; k++)
        an_chunk_free(&ch[k]);
    MEM_FREE(ch, order, nparts, sizes);
    t->load_seconds
 = seconds_since(&ts0);
    t->phase_s[2] = t->load_seconds - t->phase_s[0] - t->phase_s[1];
    return rc;
}

void an_proc_label(const an_trace *t, uint32_t proc, char *buf, size_t cap) {
    const an_proc *p = &t->procs[proc];
    if (p->rank >= 0)
        snprintf(buf, cap, "rank %d", p->rank);
    else {
        const char *h = an_strtab_get(&t->hosts, p->host);
        snprintf(buf, cap, "%s%s%lld", h, h[0] ? ":" : "pid ", (long long)p->pid);
    }
}

