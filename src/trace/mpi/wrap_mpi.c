/* wrap_mpi.c: libscaffold_trace_mpi.so, the MPI side of the tracer (see ../mpi_hooks.h).
 *
 * Built once per MPI implementation with that MPI's compiler wrapper (mpi.h gives the handle
 * types: pointers in Open MPI, ints in MPICH), but not linked to libmpi: every PMPI_* function
 * and the two predefined Open MPI objects it needs are looked up when first used (RTLD_NEXT,
 * then the global scope, then any loaded libmpi*), so the library loads into any process and
 * costs nothing in one that never calls MPI. Each MPI_* wrapper calls its PMPI_* function
 * through the profiling interface and hands one trc_mpi_ev to the tracer: the time around the
 * call, the communicator (an id equal on all members, its size, this rank), root or peer, the
 * count and bytes (count x type size), the file for MPI-IO. Non-blocking calls remember their
 * request in a per-thread table so that the wait or test that completes them names the
 * operation and its bytes. MPI calls an implementation makes inside another MPI call (ROMIO's
 * collectives inside MPI_File_open) are not recorded: one event per application call. The
 * wrappers are generated from wrap_mpi.def, one entry per call: what each records is there.
 *
 * When the process's MPI is not the one this copy was built for (an Open MPI build preloaded
 * into an MPICH program), every wrapper passes straight through (the x86-64 calling convention
 * carries an int handle and a pointer handle alike) and nothing is recorded; one warning says so. */
#include <mpi.h>

#include "trace/mpi_hooks.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRAP __attribute__((visibility("default")))

static const trc_mpi_hooks *H;
static const int *ACTIVE;
static int MBIT;
static __thread int depth; /* > 0 inside a recorded MPI call */

/* ------------------------------------------------------------------ symbol lookup */
typedef struct {
    const char *name;
    void *sym;
} find_ctx;

static int find_in_libmpi(struct dl_phdr_info *info, size_t sz, void *arg) {
    (void)sz;
    find_ctx *c = arg;
    const char *n = info->dlpi_name;
    if (!n || !strstr(n, "libmpi"))
        return 0;
    void *h = dlopen(n, RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
        c->sym = dlsym(h, c->name);
        dlclose(h);
    }
    return c->sym != NULL;
}

/* An MPI symbol: the next definition after this library (libmpi, normally), else the global
 * scope, else a libmpi loaded with RTLD_LOCAL (Python extension modules). */
static void *find_sym(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        find_ctx c = {name, NULL};
        dl_iterate_phdr(find_in_libmpi, &c);
        p = c.sym;
    }
    return p;
}

static void *must_sym(const char *name) {
    void *p = find_sym(name);
    if (!p) {
        fprintf(stderr, "scaffold-trace: %s not found: the MPI library is not loaded\n", name);
        abort();
    }
    return p;
}

/* The real function of a wrapper, resolved on first use (a benign race: every thread stores the
 * same pointer). */
static void *resolve_into(void **slot, const char *name) {
    void *p = must_sym(name);
    __atomic_store_n(slot, p, __ATOMIC_RELAXED);
    return p;
}
#define REAL(f)                                                                                    \
    (__builtin_expect(real_##f != NULL, 1)                                                         \
         ? real_##f                                                                                \
         : (__typeof__(real_##f))resolve_into((void **)&real_##f, "P" #f))
#define DECL(f) static __typeof__(&P##f) real_##f

/* ------------------------------------------------------------------ flavour */
/* 1 when the process's MPI is the one this copy was compiled for, 0 not, -1 not known yet. */
static int flavour_ok = -1;

static int check_flavour(void) {
#if defined(OPEN_MPI)
    const char *want = "Open MPI", *sym = "ompi_mpi_comm_world";
#else
    const char *want = "MPICH", *sym = "MPII_Version_string";
#endif
    int ok = find_sym(sym) != NULL;
    if (!ok && H) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "libscaffold_trace_mpi.so was built for %s but this process uses another MPI: "
                 "its MPI calls are not traced (use the build of that MPI, e.g. make MPI=mpich)",
                 want);
        H->warn(msg);
    }
    __atomic_store_n(&flavour_ok, ok, __ATOMIC_RELAXED);
    return ok;
}

/* Records this call? (tracer loaded and recording MPI, not nested, the right MPI) */
static inline int rec_on(void) {
    if (!ACTIVE || !(__atomic_load_n(ACTIVE, __ATOMIC_RELAXED) & MBIT) || depth)
        return 0;
    int f = __atomic_load_n(&flavour_ok, __ATOMIC_RELAXED);
    return f > 0 || (f < 0 && check_flavour());
}

#if defined(OPEN_MPI)
/* Open MPI's predefined handles are addresses of objects in libmpi: looked up, not linked. The
 * program may hold a copy of the object (a copy relocation of MPI_COMM_WORLD) that libmpi then
 * uses, so the address comes from libmpi's own pointer to it, or from the global scope (which
 * finds the program's copy first), never from the definition after this library. */
static MPI_Comm world_comm(void) {
    static MPI_Comm w;
    if (!w) {
        MPI_Comm *addr = find_sym("ompi_mpi_comm_world_addr");
        w = addr ? *addr : (MPI_Comm)dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
        if (!w)
            w = (MPI_Comm)must_sym("ompi_mpi_comm_world");
    }
    return w;
}
#else
static MPI_Comm world_comm(void) { return MPI_COMM_WORLD; }
#endif

#define HKEY(h) ((uintptr_t)(h))

/* ------------------------------------------------------------------ communicators */
DECL(MPI_Comm_size);
DECL(MPI_Comm_rank);
DECL(MPI_Comm_group);
DECL(MPI_Group_translate_ranks);
DECL(MPI_Group_free);
DECL(MPI_Type_size);

typedef struct {
    uintptr_t key;
    unsigned gen;
    uint32_t id, size;
    int32_t rank;
} centry;
static __thread centry ccache[16];
static unsigned comm_gen = 1; /* bumped when a communicator is freed (handles are reused) */

static uint32_t mix32(uint32_t h, uint32_t v) {
    h ^= v;
    h *= 0x9e3779b1u;
    return h ^ (h >> 15);
}

/* Fills the communicator fields of e: an id equal on every member (its size and the world ranks
 * of its first and last members), its size, this process's rank. Cached per thread. */
static void comm_info(MPI_Comm c, trc_mpi_ev *e) {
    uintptr_t k = HKEY(c);
    centry *x = &ccache[(k ^ (k >> 4) ^ (k >> 12)) & 15];
    unsigned g = __atomic_load_n(&comm_gen, __ATOMIC_RELAXED);
    if (x->key != k || x->gen != g || !x->size) {
        int size = 0, rank = -1, in[2], out[2] = {-1, -1};
        REAL(MPI_Comm_size)(c, &size);
        REAL(MPI_Comm_rank)(c, &rank);
        MPI_Group grp, wgrp;
        if (size > 0 && REAL(MPI_Comm_group)(c, &grp) == MPI_SUCCESS) {
            if (REAL(MPI_Comm_group)(world_comm(), &wgrp) == MPI_SUCCESS) {
                in[0] = 0;
                in[1] = size - 1;
                REAL(MPI_Group_translate_ranks)(grp, 2, in, wgrp, out);
                REAL(MPI_Group_free)(&wgrp);
            }
            REAL(MPI_Group_free)(&grp);
        }
        uint32_t id = mix32(mix32(mix32(0x811c9dc5u, (uint32_t)size), (uint32_t)out[0]),
                            (uint32_t)out[1]);
        *x = (centry){k, g, id ? id : 1, (uint32_t)(size > 0 ? size : 0), rank};
    }
    e->comm_id = x->id;
    e->comm_size = x->size;
    e->rank = x->rank;
}

static int64_t nbytes(int64_t count, MPI_Datatype t) {
    if (count <= 0)
        return count == 0 ? 0 : -1;
    int sz = 0;
    if (REAL(MPI_Type_size)(t, &sz) != MPI_SUCCESS || sz < 0)
        return -1;
    return count * (int64_t)sz;
}

static inline void ev_init(trc_mpi_ev *e, int op) {
    memset(e, 0, sizeof *e);
    e->op = op;
    e->peer = TRC_MPI_NONE;
    e->rank = -1;
    e->req_op = TRC_MPI_NONE;
    e->count = -1;
    e->bytes = -1;
    e->offset = -1;
}

/* The timed real call: nested MPI calls of the implementation are not recorded. */
#define TIMED(e, call)                                                                             \
    do {                                                                                           \
        depth++;                                                                                   \
        (e).t0 = H->clock();                                                                       \
        rc = (call);                                                                               \
        (e).t1 = H->clock();                                                                       \
        depth--;                                                                                   \
    } while (0)

/* ------------------------------------------------------------------ requests */
typedef struct {
    uintptr_t key;
    uint64_t seq; /* 0 free */
    int32_t op, peer, rank;
    uint32_t comm_id, comm_size;
    int64_t bytes;
} rentry;
/* Per thread, 8-way: MPICH gives every request that completed at once the same handle value, so
 * several pending entries may share a key; they are taken oldest first. */
#define RWAYS 8
static __thread rentry rtab[256];
static __thread uint64_t rseq;

static inline unsigned rslot(uintptr_t key) { return (unsigned)(key ^ (key >> 8) ^ (key >> 16)) & 255; }

static void req_put(uintptr_t key, const trc_mpi_ev *e) {
    unsigned s0 = rslot(key) & ~(unsigned)(RWAYS - 1);
    rentry *victim = &rtab[s0];
    for (unsigned i = 0; i < RWAYS; i++) {
        rentry *r = &rtab[s0 + i];
        if (!r->seq) {
            victim = r;
            break;
        }
        if (r->seq < victim->seq)
            victim = r; /* the oldest goes: a request completed elsewhere (MPI_Request_free) */
    }
    *victim = (rentry){key, ++rseq, e->op, e->peer, e->rank, e->comm_id, e->comm_size, e->bytes};
}

/* Folds a completed request into the wait's event (the first one names the operation). */
static void req_take(uintptr_t key, trc_mpi_ev *e) {
    unsigned s0 = rslot(key) & ~(unsigned)(RWAYS - 1);
    rentry *r = NULL;
    e->nreq++;
    for (unsigned i = 0; i < RWAYS; i++) {
        rentry *x = &rtab[s0 + i];
        if (x->seq && x->key == key && (!r || x->seq < r->seq))
            r = x;
    }
    if (!r)
        return; /* posted on another thread, or evicted */
    if (e->req_op == TRC_MPI_NONE) {
        e->req_op = r->op;
        e->peer = r->peer;
        e->comm_id = r->comm_id;
        e->comm_size = r->comm_size;
        e->rank = r->rank;
    }
    if (r->bytes >= 0)
        e->bytes = (e->bytes < 0 ? 0 : e->bytes) + r->bytes;
    r->seq = 0;
}

/* ------------------------------------------------------------------ handles shared by threads */
/* Windows and files, created on one thread and used on any: a small table under a lock (their
 * creation and use are far rarer than point-to-point calls). */
typedef struct {
    uintptr_t key;
    uint32_t comm_id, comm_size;
    int32_t rank;
    uint64_t fhash;
} hentry;
#define NHANDLES 256
static hentry handles[NHANDLES];
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;

static void handle_put(uintptr_t key, const trc_mpi_ev *e) {
    pthread_mutex_lock(&handles_mu);
    hentry *free_slot = NULL;
    for (int i = 0; i < NHANDLES; i++) {
        if (handles[i].key == key) {
            free_slot = &handles[i];
            break;
        }
        if (!handles[i].key && !free_slot)
            free_slot = &handles[i];
    }
    if (free_slot)
        *free_slot = (hentry){key, e->comm_id, e->comm_size, e->rank, e->fhash};
    pthread_mutex_unlock(&handles_mu);
}

/* Fills e from the handle's entry; drop removes it. */
static void handle_get(uintptr_t key, trc_mpi_ev *e, int drop) {
    pthread_mutex_lock(&handles_mu);
    for (int i = 0; i < NHANDLES; i++)
        if (handles[i].key == key) {
            e->comm_id = handles[i].comm_id;
            e->comm_size = handles[i].comm_size;
            e->rank = handles[i].rank;
            e->fhash = handles[i].fhash;
            if (drop)
                handles[i].key = 0;
            break;
        }
    pthread_mutex_unlock(&handles_mu);
}

/* ------------------------------------------------------------------ the event's fields
 * What the entries of wrap_mpi.def call (after ev_init) to fill the event from the arguments. */

/* A call on communicator c: count and bytes as given, the root if any. */
static void on_comm(trc_mpi_ev *e, MPI_Comm c, int64_t count, int64_t bytes, int root) {
    comm_info(c, e);
    e->count = count;
    e->bytes = bytes;
    if (root != TRC_MPI_NONE)
        e->peer = root;
}

/* count elements of type t on c; the root or peer if any. */
static void counted(trc_mpi_ev *e, MPI_Comm c, int64_t count, MPI_Datatype t, int peer) {
    on_comm(e, c, count, nbytes(count, t), peer);
}

static int64_t sum_counts(const int *v, int n) {
    int64_t s = 0;
    for (int i = 0; v && i < n; i++)
        s += v[i];
    return s;
}

/* A v-collective's block of this rank: with MPI_IN_PLACE (inplace) its own entry of counts
 * (type ct), else n elements of type nt. */
static void own_block(trc_mpi_ev *e, MPI_Comm c, int root, int inplace, const int *counts,
                      MPI_Datatype ct, int n, MPI_Datatype nt) {
    comm_info(c, e);
    if (root != TRC_MPI_NONE)
        e->peer = root;
    if (inplace) { /* n and nt are not significant then: never looked at */
        e->count = e->rank >= 0 && counts ? counts[e->rank] : -1;
        e->bytes = e->count >= 0 ? nbytes(e->count, ct) : -1;
    } else {
        e->count = n;
        e->bytes = nbytes(n, nt);
    }
}

/* per elements of type t for every member of c (alltoall, reduce_scatter_block). */
static void per_member(trc_mpi_ev *e, MPI_Comm c, int per, MPI_Datatype t) {
    comm_info(c, e);
    e->count = (int64_t)per * e->comm_size;
    e->bytes = nbytes(e->count, t);
}

/* The sum of one count per member of c, of type t (alltoallv, reduce_scatter). */
static void summed(trc_mpi_ev *e, MPI_Comm c, const int *counts, MPI_Datatype t) {
    comm_info(c, e);
    e->count = sum_counts(counts, (int)e->comm_size);
    e->bytes = nbytes(e->count, t);
}

/* A call on a window (its communicator; the target if any). */
static void on_win(trc_mpi_ev *e, MPI_Win win, int peer) {
    handle_get(HKEY(win), e, 0);
    e->fhash = 0;
    e->peer = peer;
}

/* One-sided data movement: the origin's count and bytes. */
static void rma(trc_mpi_ev *e, MPI_Win win, int target, int count, MPI_Datatype t) {
    on_win(e, win, target);
    e->count = count;
    e->bytes = nbytes(count, t);
}

/* A call on an open file (its communicator and path): count, bytes, offset (-1 none). */
static void on_file(trc_mpi_ev *e, MPI_File fh, int64_t count, MPI_Datatype t, int64_t off) {
    handle_get(HKEY(fh), e, 0);
    e->count = count;
    e->bytes = count >= 0 ? nbytes(count, t) : -1;
    e->offset = off;
}

static void opening(trc_mpi_ev *e, MPI_Comm c, const char *path) {
    comm_info(c, e);
    e->fhash = H->file_hash(path);
}

/* ------------------------------------------------------------------ finishing the event */
static void after_init(trc_mpi_ev *e) {
    if (!rec_on())
        return;
    int rank = -1, size = 0;
    REAL(MPI_Comm_rank)(world_comm(), &rank);
    REAL(MPI_Comm_size)(world_comm(), &size);
    H->world(rank, size);
    comm_info(world_comm(), e);
    H->emit(e);
}

/* The event of a call that starts a request; the request is remembered for its wait. */
static void started(trc_mpi_ev *e, int rc, MPI_Request *req) {
    if (rc == MPI_SUCCESS && req)
        req_put(HKEY(*req), e);
    H->emit(e);
}

/* A window or file created (ok): remembered under its handle for the calls on it. */
static void created(trc_mpi_ev *e, int ok, uintptr_t key) {
    if (ok)
        handle_put(key, e);
    H->emit(e);
}

#define MAXREQ 64 /* requests of one waitall/waitsome whose operation is looked up */

/* The handles of the first MAXREQ requests, read before the call completes (and frees) them. */
static void keys_of(const MPI_Request *reqs, int n, uintptr_t *keys) {
    for (int i = 0; i < n && i < MAXREQ; i++)
        keys[i] = reqs ? HKEY(reqs[i]) : 0;
}

/* Waits and tests: the n requests of keys completed (the first names the operation). */
static void took_all(trc_mpi_ev *e, const uintptr_t *keys, int n) {
    for (int i = 0; i < n && i < MAXREQ; i++)
        req_take(keys[i], e);
    e->nreq = n;
    H->emit(e);
}

/* The request *idx of n completed (idx NULL: none known). */
static void took_any(trc_mpi_ev *e, const uintptr_t *keys, int n, const int *idx) {
    if (idx && *idx >= 0 && *idx < n && *idx < MAXREQ)
        req_take(keys[*idx], e);
    H->emit(e);
}

/* The *outcount requests listed in idx completed (outcount NULL: none known). */
static void took_some(trc_mpi_ev *e, const uintptr_t *keys, const int *outcount, const int *idx) {
    if (outcount && *outcount > 0) {
        for (int i = 0; i < *outcount; i++)
            if (idx[i] >= 0 && idx[i] < MAXREQ)
                req_take(keys[idx[i]], e);
        e->nreq = *outcount;
    }
    H->emit(e);
}

/* ------------------------------------------------------------------ the wrappers
 * One per entry of wrap_mpi.def; its real function is resolved on first use. */
#define MPI_CALL(fn, id, params, args, fill, finish)                                               \
    DECL(fn);                                                                                      \
    WRAP int fn params {                                                                           \
        if (!rec_on())                                                                             \
            return REAL(fn) args;                                                                  \
        int rc;                                                                                    \
        trc_mpi_ev e;                                                                              \
        ev_init(&e, TRC_MPI_##id);                                                                 \
        fill;                                                                                      \
        TIMED(e, REAL(fn) args);                                                                   \
        finish;                                                                                    \
        return rc;                                                                                 \
    }
#define MPI_WAIT_CALL(fn, id, params, args, fill, finish)                                          \
    DECL(fn);                                                                                      \
    WRAP int fn params {                                                                           \
        if (!rec_on())                                                                             \
            return REAL(fn) args;                                                                  \
        int rc;                                                                                    \
        trc_mpi_ev e;                                                                              \
        uintptr_t keys[MAXREQ];                                                                    \
        ev_init(&e, TRC_MPI_##id);                                                                 \
        fill;                                                                                      \
        TIMED(e, REAL(fn) args);                                                                   \
        finish;                                                                                    \
        return rc;                                                                                 \
    }
#define MPI_INIT_CALL(fn, id, params, args)                                                        \
    DECL(fn);                                                                                      \
    WRAP int fn params {                                                                           \
        int rc;                                                                                    \
        trc_mpi_ev e;                                                                              \
        ev_init(&e, TRC_MPI_##id);                                                                 \
        if (!H)                                                                                    \
            return REAL(fn) args;                                                                  \
        TIMED(e, REAL(fn) args);                                                                   \
        if (rc == MPI_SUCCESS)                                                                     \
            after_init(&e);                                                                        \
        return rc;                                                                                 \
    }
#include "wrap_mpi.def"
#undef MPI_CALL
#undef MPI_WAIT_CALL
#undef MPI_INIT_CALL

/* Every operation of mpi_hooks.h's TRC_MPI_OPS has its wrapper: the .def names each once (a
 * second entry would define the wrapper twice), and counts as many. */
#define MPI_CALL(fn, ...) +1
#define MPI_WAIT_CALL(fn, ...) +1
#define MPI_INIT_CALL(fn, ...) +1
enum { WRAPPED = 0
#include "wrap_mpi.def"
};
#undef MPI_CALL
#undef MPI_WAIT_CALL
#undef MPI_INIT_CALL
_Static_assert((int)WRAPPED == (int)TRC_MPI_COUNT,
               "wrap_mpi.def and TRC_MPI_OPS list different calls");

/* ------------------------------------------------------------------ communicators freed */
DECL(MPI_Comm_free);

/* A freed communicator's handle may come back for another one: the caches start over. */
WRAP int MPI_Comm_free(MPI_Comm *comm) {
    __atomic_add_fetch(&comm_gen, 1, __ATOMIC_RELAXED);
    return REAL(MPI_Comm_free)(comm);
}

/* ------------------------------------------------------------------ attach */
/* Preloaded libraries are initialised in reverse order, so this may run before the tracer's
 * constructor: only the table is taken here; whether to record is read from the tracer's
 * "active" word at every call. */
__attribute__((constructor)) static void trc_mpi_attach(void) {
    const trc_mpi_hooks *h = dlsym(RTLD_DEFAULT, "scaffold_trace_mpi_hooks_v1");
    if (!h || h->version != 1 || h->size < sizeof(trc_mpi_hooks))
        return; /* no tracer: every wrapper passes straight through */
    H = h;
    MBIT = h->mpi_bit;
    h->attach();
    __atomic_store_n(&ACTIVE, h->active, __ATOMIC_RELEASE);
}
