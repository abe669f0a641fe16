/* store_impl: the store's internal state and the transfer-method table (IOR's aiori style):
 * store.c (lifecycle, validation) calls a method only through its store_backend, which
 * store_rma.c (one-sided) and store_coll.c (collective) fill; store_mpi.c holds the MPI helpers
 * they share. Not a public header: only the files of src/store include it. */
#ifndef SCAFFOLD_STORE_STORE_IMPL_H
#define SCAFFOLD_STORE_STORE_IMPL_H

#include "mpi/dist.h"
#include "store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef struct store_var {
    int id; /* index in store.vars */
    char name[STORE_NAME_MAX];
    store_type type;
    int64_t row_elems, row_bytes;
    int64_t nrows;   /* this rank's rows */
    int64_t *prefix; /* size+1 entries: prefix[p] = first global row of rank p, prefix[size] = total */
    char *base;      /* this rank's rows: window memory (RMA) or malloc'd (COLL) */
    MPI_Win win;     /* RMA only */
    int has_win, locked;
    MPI_Datatype rowtype; /* COLL only: one row as an MPI datatype */
    int has_rowtype;
    /* store_profile counters, in store_profile's field order. */
    _Atomic uint64_t prof[7];
} store_var;

enum { STORE_P_CALLS, STORE_P_ROWS, STORE_P_REMOTE, STORE_P_BYTES, STORE_P_POST, STORE_P_WAIT,
       STORE_P_COPY };

struct store_backend;

struct store {
    dist_world w; /* rank, size and the private communicator (for dist_agree) */
    store_method method;
    const struct store_backend *be; /* the method's functions */
    int64_t coll_max_bytes, max_read_bytes;
    int thread_level;
    int profile;     /* keep the store_profile counters */
    pthread_mutex_t mpi_lock;  /* RMA below MPI_THREAD_MULTIPLE: serialises our MPI calls */
    pthread_mutex_t coll_lock; /* COLL: scratch buffers below are per store */
    int nvars;
    store_var *vars[STORE_MAX_VARS]; /* fixed slots: concurrent readers never see a realloc */
    /* COLL scratch (under coll_lock), grown on demand. */
    char *sendbuf, *recvbuf;
    size_t sendcap, recvcap;
    int64_t *allidx;
    size_t allidxcap;
    int *counts;  /* 8 arrays of `size` ints, see store_coll.c */
    int64_t *hdr; /* 3 int64 per rank: the per-call header exchanged by store_coll.c */
};

/* Index source for a transfer: an explicit list, or the range start, start+1, ... */
typedef struct store_idx {
    const int64_t *idx; /* the list (when !range) */
    int64_t start;      /* the first row (when range) */
    int range;
} store_idx;

static inline int64_t store_idx_at(const store_idx *x, int64_t i) {
    return x->range ? x->start + i : x->idx[i];
}

/* Owner of global row g (0 <= g < total): the largest p with prefix[p] <= g. Ranks with zero
 * rows share a prefix value with their successor; the largest such p is the one holding g. */
static inline int store_owner_of(const store_var *v, int size, int64_t g) {
    int lo = 0, hi = size - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (v->prefix[mid] <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static inline uint64_t store_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline void store_prof_add(store_var *v, int what, uint64_t x) {
    atomic_fetch_add_explicit(&v->prof[what], x, memory_order_relaxed);
}

/* A transfer method. Indices reaching `get` are validated on the calling rank; every function
 * that says "collective" is called by every rank of the store. */
typedef struct store_backend {
    store_method method;
    const char *name;
    /* Collective: v->base for v->nrows rows of v->row_bytes (plus whatever the method needs to
     * serve them). Returns the agreed code. */
    int (*var_create)(store *s, store_var *v);
    /* Local: makes this rank's writes to v->base visible to readers (store.c adds the barrier).
     * NULL when plain memory is enough. */
    int (*var_sync)(store *s, store_var *v);
    /* Frees what var_create made; MPI calls only when mpi_alive. */
    void (*var_release)(store *s, store_var *v, int mpi_alive);
    /* Reads n rows into dst. local_rc != 0: this rank's arguments were rejected (message set;
     * v may be NULL). Collective methods still take part so no rank blocks, and return the
     * agreed code; local ones return local_rc. */
    int (*get)(store *s, store_var *v, const store_idx *x, int64_t n, char *dst, int local_rc);
    /* Frees the method's per-store scratch (NULL: none). */
    void (*release)(store *s);
    /* 1 when get may be called from several threads at once. */
    int (*thread_safe)(const store *s);
} store_backend;

extern const store_backend store_rma_backend, store_coll_backend;

/* store_mpi.c: an MPI error code -> ERR_MPI with the MPI error string. */
int store_mpi_err(int mpirc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* store_mpi.c: one row of `row_bytes` bytes as a committed MPI datatype (rows over INT_MAX bytes
 * are built from 1 GiB blocks, since MPI counts are int). 0 or ERR_MPI. */
int store_mpi_rowtype(int64_t row_bytes, MPI_Datatype *type);

#endif
