/* prof: region table, per-thread stacks and trees, timeline buffers (see prof.h). */
#include "core/prof.h"

#include "core/err.h"
#include "core/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int prof_on_;

/* ---- the name table ----------------------------------------------------------------------- */

typedef struct name_entry {
    char name[PROF_NAME_MAX];
    prof_kind kind;
} name_entry;

static name_entry names[PROF_MAX_IDS] = {
#define PROF_INIT(id, nm, k, what) [PROF_##id] = {nm, k},
    PROF_REGIONS(PROF_INIT)
#undef PROF_INIT
};
static int nnames = PROF_NFIXED; /* published with release stores */
static int other_id = -1;
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;

static int find_name(const char *name, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i].name, name))
            return i;
    return -1;
}

/* Adds a name (names_mu held). -1 when the table is full. */
static int add_name(const char *name, prof_kind kind) {
    int n = nnames;
    if (n >= PROF_MAX_IDS)
        return -1;
    snprintf(names[n].name, sizeof names[n].name, "%s", name);
    names[n].kind = kind;
    __atomic_store_n(&nnames, n + 1, __ATOMIC_RELEASE);
    return n;
}

int prof_id(const char *name, prof_kind kind) {
    int n = __atomic_load_n(&nnames, __ATOMIC_ACQUIRE);
    int i = find_name(name, n);
    if (i >= 0)
        return i;
    pthread_mutex_lock(&names_mu);
    i = find_name(name, nnames);
    if (i < 0 && (strlen(name) >= PROF_NAME_MAX || strchr(name, '/') || !*name))
        i = -1;
    else if (i < 0)
        i = add_name(name, kind);
    if (i < 0) { /* a bad name or a full table: one catch-all region (the table keeps room) */
        if (other_id < 0) {
            other_id = find_name("(other)", nnames);
            if (other_id < 0 && nnames < PROF_MAX_IDS)
                other_id = add_name("(other)", PROF_KIND_REGION);
        }
        i = other_id < 0 ? PROF_MAIN : other_id;
    }
    pthread_mutex_unlock(&names_mu);
    return i;
}

const char *prof_name(int id) {
    int n = __atomic_load_n(&nnames, __ATOMIC_ACQUIRE);
    return id >= 0 && id < n ? names[id].name : "(unknown)";
}

prof_kind prof_kind_of(int id) {
    int n = __atomic_load_n(&nnames, __ATOMIC_ACQUIRE);
    return id >= 0 && id < n ? names[id].kind : PROF_KIND_REGION;
}

/* ---- per-thread state --------------------------------------------------------------------- */

/* A node of a thread's tree: node 0 is the root above the outermost regions. Children are a
 * list in the order first entered (child .. last). */
typedef struct tnode {
    int32_t id, parent, child, last, sibling;
    uint64_t count;
    int64_t incl;
} tnode;

typedef struct frame {
    int32_t node; /* -1: not in the tree (the node table was full) */
    int32_t id;
    int64_t t0;
} frame;

typedef struct pthread_state {
    tnode *nodes;
    int nnodes, cap;
    frame stack[PROF_MAX_DEPTH];
    int depth;
    int deep; /* regions opened beyond PROF_MAX_DEPTH, still open */
    prof_event *ev;
    size_t nev, cap_ev;
    uint64_t dropped;
    char name[32];
    int tid;
} pthread_state;

#define NODES_PER_THREAD 8192
#define OTHER_THREAD_EVENTS 65536

static _Thread_local pthread_state *tls;
static pthread_state *threads[PROF_MAX_THREADS];
static int nthreads;
static pthread_mutex_t threads_mu = PTHREAD_MUTEX_INITIALIZER;
static long events_cap = 200000;
static int64_t zero_ns;
static long long zero_unix_us;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t prof_now_ns(void) {
    return mono_ns() - zero_ns;
}

long long prof_zero_unix_us(void) {
    return zero_unix_us;
}

static void state_free(pthread_state *t) {
    if (t) {
        MEM_FREE(t->nodes, t->ev, t);
    }
}

/* The calling thread's state, made on first use; NULL when out of memory or out of slots. */
static pthread_state *state_get(long ev_cap) {
    if (tls)
        return tls;
    pthread_state *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cap = NODES_PER_THREAD;
    t->nodes = malloc((size_t)t->cap * sizeof *t->nodes);
    t->cap_ev = (size_t)(ev_cap > 0 ? ev_cap : 0);
    t->ev = t->cap_ev ? malloc(t->cap_ev * sizeof *t->ev) : NULL;
    if (!t->nodes || (t->cap_ev && !t->ev)) {
        state_free(t);
        return NULL;
    }
    t->nodes[0] = (tnode){-1, -1, -1, -1, -1, 0, 0};
    t->nnodes = 1;
    t->tid = (int)syscall(SYS_gettid);
    pthread_mutex_lock(&threads_mu);
    int slot = nthreads < PROF_MAX_THREADS ? nthreads++ : -1;
    if (slot >= 0) {
        threads[slot] = t;
        snprintf(t->name, sizeof t->name, "thread %d", slot);
    }
    pthread_mutex_unlock(&threads_mu);
    if (slot < 0) {
        state_free(t);
        return NULL;
    }
    tls = t;
    return t;
}

/* The child of node `parent` for region id, added when missing; -1 when the table is full. */
static int32_t child_of(pthread_state *t, int32_t parent, int32_t id) {
    tnode *nd = t->nodes;
    for (int32_t c = nd[parent].child; c >= 0; c = nd[c].sibling)
        if (nd[c].id == id)
            return c;
    if (t->nnodes >= t->cap)
        return -1;
    int32_t c = t->nnodes++;
    nd[c] = (tnode){id, parent, -1, -1, -1, 0, 0};
    if (nd[parent].last >= 0)
        nd[nd[parent].last].sibling = c;
    else
        nd[parent].child = c;
    nd[parent].last = c;
    return c;
}

void prof_begin_(int id) {
    pthread_state *t = tls ? tls : state_get(OTHER_THREAD_EVENTS);
    if (!t)
        return;
    if (t->depth >= PROF_MAX_DEPTH) {
        t->deep++;
        return;
    }
    int32_t parent = t->depth ? t->stack[t->depth - 1].node : 0;
    int32_t node = parent >= 0 ? child_of(t, parent, id) : -1;
    frame *f = &t->stack[t->depth++];
    f->node = node;
    f->id = id;
    f->t0 = mono_ns();
}

/* Closes the top frame at time `now`. */
static void pop(pthread_state *t, int64_t now) {
    frame *f = &t->stack[--t->depth];
    if (f->node >= 0) {
        tnode *nd = &t->nodes[f->node];
        nd->count++;
        nd->incl += now - f->t0;
    }
    if (t->nev < t->cap_ev)
        t->ev[t->nev++] = (prof_event){f->id, t->depth, f->t0 - zero_ns, now - zero_ns};
    else
        t->dropped++;
}

void prof_end_(int id) {
    pthread_state *t = tls;
    if (!t)
        return;
    if (t->deep) { /* the innermost open region is one of those past the depth limit */
        t->deep--;
        return;
    }
    int k = t->depth - 1;
    while (k >= 0 && t->stack[k].id != id)
        k--;
    if (k < 0)
        return;
    const int64_t now = mono_ns();
    while (t->depth > k)
        pop(t, now);
}

int prof_start(long events) {
    if (prof_on_)
        return 0;
    events_cap = events > 0 ? events : 200000;
    zero_ns = mono_ns();
    zero_unix_us = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    zero_unix_us = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    if (!state_get(events_cap))
        return err_set(ERR_NOMEM, "profile: no memory for the timer's buffers (%ld events; set "
                                  "SCAFFOLD_PROFILE_EVENTS lower)",
                       events_cap);
    if (!tls->name[0] || !strncmp(tls->name, "thread ", 7))
        snprintf(tls->name, sizeof tls->name, "main");
    __atomic_store_n(&prof_on_, 1, __ATOMIC_RELEASE);
    return 0;
}

void prof_stop(void) {
    if (!prof_on_)
        return;
    pthread_state *t = tls;
    if (t) {
        const int64_t now = mono_ns();
        t->deep = 0;
        while (t->depth > 0)
            pop(t, now);
    }
    __atomic_store_n(&prof_on_, 0, __ATOMIC_RELEASE);
}

void prof_reset(void) {
    pthread_mutex_lock(&threads_mu);
    for (int i = 0; i < nthreads; i++)
        state_free(threads[i]);
    nthreads = 0;
    pthread_mutex_unlock(&threads_mu);
    tls = NULL; /* other threads' pointers dangle: they must be gone (prof.h) */
    pthread_mutex_lock(&names_mu);
    __atomic_store_n(&nnames, PROF_NFIXED, __ATOMIC_RELEASE);
    other_id = -1;
    pthread_mutex_unlock(&names_mu);
}

void prof_thread_name(const char *name) {
    if (!prof_on_)
        return;
    pthread_state *t = tls ? tls : state_get(OTHER_THREAD_EVENTS);
    if (t)
        snprintf(t->name, sizeof t->name, "%s", name);
}

/* ---- reading ------------------------------------------------------------------------------ */

int prof_nthreads(void) {
    return nthreads;
}

void prof_thread_get(int i, prof_thread_view *v) {
    const pthread_state *t = threads[i];
    v->name = t->name;
    v->tid = t->tid;
    v->events = t->ev;
    v->nevents = t->nev;
    v->dropped = t->dropped;
}

/* The merged tree while it is built: same shape as a thread's. */
typedef struct mtree {
    tnode *nd;
    size_t n, cap;
} mtree;

static int32_t mchild(mtree *m, int32_t parent, int32_t id) {
    for (int32_t c = m->nd[parent].child; c >= 0; c = m->nd[c].sibling)
        if (m->nd[c].id == id)
            return c;
    if (MEM_RESERVE(m->nd, m->cap, m->n, 64))
        return -1;
    int32_t c = (int32_t)m->n++;
    m->nd[c] = (tnode){id, parent, -1, -1, -1, 0, 0};
    if (m->nd[parent].last >= 0)
        m->nd[m->nd[parent].last].sibling = c;
    else
        m->nd[parent].child = c;
    m->nd[parent].last = c;
    return c;
}

/* Adds thread node tn's subtree under merged node mp. 0 or ERR_NOMEM. */
static int merge(mtree *m, int32_t mp, const pthread_state *t, int32_t tn) {
    for (int32_t c = t->nodes[tn].child; c >= 0; c = t->nodes[c].sibling) {
        int32_t mc = mchild(m, mp, t->nodes[c].id);
        if (mc < 0)
            return ERR_NOMEM;
        m->nd[mc].count += t->nodes[c].count;
        m->nd[mc].incl += t->nodes[c].incl;
        if (merge(m, mc, t, c))
            return ERR_NOMEM;
    }
    return 0;
}

static void emit(const mtree *m, int32_t mn, int parent, int depth, prof_node *out, size_t *k) {
    for (int32_t c = m->nd[mn].child; c >= 0; c = m->nd[c].sibling) {
        const size_t me = (*k)++;
        int64_t kids = 0;
        for (int32_t g = m->nd[c].child; g >= 0; g = m->nd[g].sibling)
            kids += m->nd[g].incl;
        out[me] = (prof_node){m->nd[c].id, parent, depth, m->nd[c].count, m->nd[c].incl,
                              m->nd[c].incl - kids};
        emit(m, c, (int)me, depth + 1, out, k);
    }
}

int prof_tree(prof_node **out, size_t *n) {
    *out = NULL;
    *n = 0;
    mtree m = {malloc(64 * sizeof(tnode)), 1, 64};
    if (!m.nd)
        return err_set(ERR_NOMEM, "profile: out of memory for the region tree");
    m.nd[0] = (tnode){-1, -1, -1, -1, -1, 0, 0};
    int rc = 0;
    for (int i = 0; i < nthreads && rc == 0; i++)
        rc = merge(&m, 0, threads[i], 0);
    prof_node *o = rc ? NULL : malloc((m.n > 1 ? m.n - 1 : 1) * sizeof *o);
    if (!o) {
        free(m.nd);
        return err_set(ERR_NOMEM, "profile: out of memory for the region tree");
    }
    size_t k = 0;
    emit(&m, 0, -1, 0, o, &k);
    free(m.nd);
    *out = o;
    *n = k;
    return 0;
}

void prof_path(const prof_node *nodes, size_t i, char *buf, size_t cap) {
    int chain[PROF_MAX_DEPTH + 1], nc = 0;
    for (int j = (int)i; j >= 0 && nc <= PROF_MAX_DEPTH; j = nodes[j].parent)
        chain[nc++] = nodes[j].id;
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (int k = nc - 1; k >= 0 && len < cap; k--) {
        int w = snprintf(buf + len, cap - len, "%s%s", k == nc - 1 ? "" : "/", prof_name(chain[k]));
        if (w < 0)
            break;
        len += (size_t)w;
    }
}
