/* store: the distributed in-memory sample store (DDStore's model in C on MPI).
 *
 * Each rank holds a shard of every variable in memory; any rank reads any global row without a
 * coordinator. A variable is a 2-D array of fixed-size rows; rank r contributes nrows_r rows and
 * the global index space is the concatenation of the shards in communicator rank order (rank 0's
 * rows first). All sizes and indices are 64-bit.
 *
 * Two transfer methods, chosen per store:
 *  - STORE_RMA:  MPI one-sided. Each variable is an MPI_Win_allocate window (displacement unit 1
 *                byte, so offsets are 64-bit MPI_Aint), with one passive-target epoch
 *                (MPI_Win_lock_all(MPI_MODE_NOCHECK)) open for the variable's lifetime. A get posts
 *                one MPI_Get per run of consecutive rows on the same rank, then one MPI_Win_flush
 *                per target rank. Rows owned by the caller are copied with memcpy. get and
 *                get_batch are NOT collective, and are safe to call from several threads at once
 *                (e.g. a prefetching loader thread next to the training thread) when MPI provides
 *                MPI_THREAD_MULTIPLE (dist_init requests it; see store_thread_safe()). At a lower
 *                thread level the store serialises its own MPI calls with a mutex, which is only
 *                safe if no other thread calls MPI at the same time.
 *  - STORE_COLL: collective. get and get_batch are MPI_Alltoallv exchanges in rounds whose received
 *                bytes per rank are capped (default 2 MiB, DDStore's DDSTORE_ALLTOALL_MAX_BYTES).
 *                Every rank must make the same sequence of get/get_batch calls (the number of rows
 *                may differ per rank, including 0), from one thread per rank. No window is
 *                created, so this method needs nothing from the MPI one-sided layer.
 *
 * Errors: every function returns 0 or a negative ERR_* code after err_set() (core/err.h).
 * Collective calls (create, add, sync, free, and every COLL get) agree on errors: if any rank
 * fails, every rank returns the same code and the failing rank's message, so no rank is left
 * waiting in a collective. RMA gets are local: only the calling rank sees its error. Every index
 * and size is validated before any data moves, and the store stays usable after any error except
 * ERR_MPI from inside a transfer.
 *
 * Environment (read by store_opts_default; explicit options win):
 *   DDSTORE_ALLTOALL_MAX_BYTES  COLL round cap in bytes (default 2097152; must be equal on all
 *                               ranks; store_create checks)
 *   DDSTORE_MAX_READ_BYTES      largest single MPI_Get in bytes (default 1 GiB, at most 2^31-1)
 *   DDSTORE_PROFILE             1 = keep the counters of store_profile() (default off)
 */
#ifndef SCAFFOLD_STORE_STORE_H
#define SCAFFOLD_STORE_STORE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

typedef enum store_method { STORE_RMA = 1, STORE_COLL = 2 } store_method;

/* Element types: metadata for users (the store moves whole rows of bytes). */
typedef enum store_type {
    STORE_BYTE = 0,
    STORE_UINT8,
    STORE_BOOL,
    STORE_INT32,
    STORE_INT64,
    STORE_FLOAT32,
    STORE_FLOAT64,
    STORE_TYPE_COUNT
} store_type;

#define STORE_NAME_MAX 64 /* variable names are 1..63 bytes */
#define STORE_MAX_VARS 64 /* variables per store */
#define STORE_DEFAULT_COLL_MAX_BYTES ((int64_t)2 << 20)
#define STORE_DEFAULT_MAX_READ_BYTES ((int64_t)1 << 30)

typedef struct store_opts {
    store_method method;
    int64_t coll_max_bytes; /* COLL: received bytes per rank per round (>= 1) */
    int64_t max_read_bytes; /* RMA: largest single MPI_Get (1 .. INT_MAX) */
    int profile;            /* 1 = keep the per-variable counters of store_profile() */
} store_opts;

/* Per-variable counters (this rank's reads), kept when profiling is on (DDStore's
 * DDSTORE_PROFILE; all zero otherwise). Times are nanoseconds of wall time inside the calls:
 *   post: RMA issuing MPI_Gets (and copying own rows, which is interleaved with it);
 *         COLL the header and index exchanges, packing, and copying own rows
 *   wait: RMA the MPI_Win_flush calls; COLL MPI_Alltoallv
 *   copy: COLL unpacking the received rows (0 for RMA)
 * Several threads may update them at once (relaxed atomics). */
typedef struct store_profile {
    uint64_t calls, rows, remote_rows, bytes;
    uint64_t post_ns, wait_ns, copy_ns;
} store_profile;

/* What store_info reports about one variable. */
typedef struct store_var_info {
    char name[STORE_NAME_MAX];
    store_type type;
    int64_t row_elems;  /* elements per row */
    int64_t row_bytes;  /* row_elems * store_type_size(type) */
    int64_t total_rows; /* over all ranks */
    int64_t local_rows; /* this rank's shard */
    int64_t first_row;  /* global index of this rank's first row */
} store_var_info;

typedef struct store store; /* opaque */

/* Defaults: method RMA, caps from the environment (see above) or the built-in defaults. If an
 * environment value is not a positive integer, the default is kept and the problem is reported by
 * store_create (so every rank fails together). */
void store_opts_default(store_opts *o);

/* "rma" / "coll" (case-sensitive). 0 or ERR_USAGE. */
int store_method_parse(const char *s, store_method *m);
const char *store_method_name(store_method m);
/* Element size in bytes (1 for STORE_BYTE/UINT8/BOOL), 0 for an invalid type. */
size_t store_type_size(store_type t);
const char *store_type_name(store_type t);

/* Collective over `comm`. Creates a store on a private duplicate of `comm` (the caller keeps
 * ownership of `comm`; the store never touches MPI_COMM_WORLD). `opts` may be NULL (defaults).
 * MPI must be initialised. On success *out owns the store; free it with store_free. */
int store_create(store **out, MPI_Comm comm, const store_opts *opts);

/* Collective. Adds variable `name` (same name, type and row_elems on every rank; nrows may differ
 * per rank, 0 allowed) and copies this rank's `nrows` rows from `buf` into store-owned memory (so
 * `buf` may be freed afterwards); buf == NULL zero-fills the shard (then fill it with
 * store_update + store_sync). Data is readable from every rank when it returns. *var_out gets the
 * variable id used by the other calls (ids are equal on all ranks). */
int store_add(store *s, const char *name, store_type type, int64_t row_elems, int64_t nrows,
              const void *buf, int *var_out);

/* Local, not collective: copies `nrows` rows from `buf` into this rank's own shard at local row
 * `local_row`. Other ranks see the new rows only after the next store_sync. Must not run while
 * any rank reads those rows. */
int store_update(store *s, int var, int64_t local_row, int64_t nrows, const void *buf);

/* Collective: makes every rank's store_update visible to every other rank (MPI_Win_sync for RMA,
 * then a barrier). */
int store_sync(store *s);

/* The id of variable `name`, or ERR_NOTFOUND. */
int store_find(const store *s, const char *name);
/* Metadata of variable `var`. 0 or ERR_NOTFOUND. */
int store_info(const store *s, int var, store_var_info *info);
/* The owner rank of global row `row` and its local row on that rank. 0, ERR_NOTFOUND, ERR_RANGE. */
int store_owner(const store *s, int var, int64_t row, int *rank, int64_t *local_row);

/* Reads `count` consecutive global rows starting at `start` into dst (row i of dst = global row
 * start+i). The range may span several ranks' shards (DDStore requires one shard; this is a
 * superset). `dst_bytes` is the capacity of dst and must be >= count * row_bytes. count == 0 is a
 * valid no-op (dst may then be NULL). RMA: local call; COLL: collective (see top). */
int store_get(store *s, int var, int64_t start, int64_t count, void *dst, size_t dst_bytes);

/* Reads n rows, any order, any owners, repeats allowed: row i of dst = global row idx[i].
 * Every index is checked against [0, total_rows) before anything moves. n == 0 is valid
 * (idx and dst may then be NULL). Designed for a prefetching loader: dst is a caller-owned,
 * preallocated batch buffer; no allocation proportional to the rows happens inside.
 * RMA: local call, thread-safe (see top); COLL: collective, n may differ per rank. */
int store_get_batch(store *s, int var, const int64_t *idx, int64_t n, void *dst,
                    size_t dst_bytes);

/* DDStore's (and DistDataset's) split of n samples over `size` ranks: rank r loads the
 * contiguous slice [*lo, *hi) with k, m = n / size, n % size, lo = r*k + min(r, m). Loading that
 * slice on each rank and calling store_add makes global row i = sample i. */
void store_nsplit(int64_t n, int size, int rank, int64_t *lo, int64_t *hi);

/* Copies variable var's counters (zeros when profiling is off). reset != 0 zeroes them after
 * the copy. 0 or ERR_NOTFOUND. */
int store_get_profile(store *s, int var, store_profile *out, int reset);

/* 1 when get/get_batch may be called concurrently from several threads of one rank without any
 * other thread's MPI calls being a problem (RMA method and MPI_THREAD_MULTIPLE), else 0. */
int store_thread_safe(const store *s);
store_method store_get_method(const store *s);
/* The store's private communicator (a duplicate of the one given to store_create). */
MPI_Comm store_comm(const store *s);

/* Collective. Frees every variable (windows, memory) and the store, and sets *s = NULL. NULL or
 * *s == NULL is a no-op, so calling it twice is safe. After MPI_Finalize it releases only the
 * process memory it can (MPI objects are gone by then). Returns 0 or an agreed ERR_MPI. */
int store_free(store **s);

#endif
