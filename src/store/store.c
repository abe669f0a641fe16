/* store: lifecycle (create, add, update, sync, free) and argument validation; the transfers go
 * through the method's store_backend (store_rma.c, store_coll.c). See store.h for the contract.
 *
 * Every collective step here follows the same pattern: check locally, then dist_agree() on the
 * store's private communicator, so a bad argument on one rank becomes the same error on every
 * rank instead of a rank blocked in the next collective (DDStore's `disp` check, which only
 * throws on the ranks below the maximum, is the defect this avoids). */
#include "store/store_impl.h"

#include "core/err.h"
#include "core/mem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A positive integer from the environment; 0 if unset, -1 if set but not a positive integer. */
static int64_t env_positive(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x <= 0)
        return -1;
    return (int64_t)x;
}

void store_opts_default(store_opts *o) {
    o->method = STORE_RMA;
    int64_t cap = env_positive("DDSTORE_ALLTOALL_MAX_BYTES");
    int64_t mr = env_positive("DDSTORE_MAX_READ_BYTES");
    /* A malformed value becomes an invalid option (<= 0), which store_create rejects on every
     * rank with a message naming the variable. */
    o->coll_max_bytes = cap == 0 ? STORE_DEFAULT_COLL_MAX_BYTES : cap;
    o->max_read_bytes = mr == 0 ? STORE_DEFAULT_MAX_READ_BYTES : mr;
    const char *pr = getenv("DDSTORE_PROFILE");
    o->profile = pr && *pr && strcmp(pr, "0") != 0;
}

int store_method_parse(const char *s, store_method *m) {
    if (s && !strcmp(s, "rma")) {
        *m = STORE_RMA;
        return 0;
    }
    if (s && !strcmp(s, "coll")) {
        *m = STORE_COLL;
        return 0;
    }
    return err_set(ERR_USAGE, "unknown store method '%s' (use rma or coll)", s ? s : "(null)");
}

const char *store_method_name(store_method m) {
    return m == STORE_RMA ? "rma" : m == STORE_COLL ? "coll" : "?";
}

size_t store_type_size(store_type t) {
    switch (t) {
    case STORE_BYTE:
    case STORE_UINT8:
    case STORE_BOOL:
        return 1;
    case STORE_INT32:
    case STORE_FLOAT32:
        return 4;
    case STORE_INT64:
    case STORE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *store_type_name(store_type t) {
    static const char *const names[] = {"byte",  "uint8",   "bool",   "int32",
                                        "int64", "float32", "float64"};
    return (unsigned)t < STORE_TYPE_COUNT ? names[t] : "?";
}

/* ---- create / free ---------------------------------------------------------------------- */

static int check_opts(const store_opts *o) {
    if (o->method != STORE_RMA && o->method != STORE_COLL)
        return err_set(ERR_USAGE, "store: method %d is neither STORE_RMA nor STORE_COLL",
                       (int)o->method);
    if (o->coll_max_bytes < 1)
        return err_set(ERR_USAGE,
                       "store: the coll round cap must be a positive number of bytes (got %lld; "
                       "check DDSTORE_ALLTOALL_MAX_BYTES)",
                       (long long)o->coll_max_bytes);
    if (o->max_read_bytes < 1 || o->max_read_bytes > INT_MAX)
        return err_set(ERR_USAGE,
                       "store: the largest single read must be 1..%d bytes (got %lld; check "
                       "DDSTORE_MAX_READ_BYTES)",
                       INT_MAX, (long long)o->max_read_bytes);
    return 0;
}

int store_create(store **out, MPI_Comm comm, const store_opts *opts) {
    if (!out)
        return err_set(ERR_USAGE, "store_create: out is NULL");
    *out = NULL;
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin)
        return err_set(ERR_MPI, "store_create: MPI is not initialised (call dist_init first)");
    if (comm == MPI_COMM_NULL)
        return err_set(ERR_USAGE, "store_create: the communicator is MPI_COMM_NULL");
    store_opts o;
    if (opts)
        o = *opts;
    else
        store_opts_default(&o);

    dist_world uw = {.comm = comm};
    MPI_Comm_rank(comm, &uw.rank);
    MPI_Comm_size(comm, &uw.size);
    MPI_Query_thread(&uw.thread_level);

    int rc = check_opts(&o);
    store *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s)
        rc = err_set(ERR_NOMEM, "store_create: out of memory");
    if (s) {
        s->counts = calloc((size_t)8 * (size_t)uw.size, sizeof *s->counts);
        s->hdr = calloc((size_t)3 * (size_t)uw.size, sizeof *s->hdr);
        if (!s->counts || !s->hdr)
            rc = err_set(ERR_NOMEM, "store_create: out of memory for %d ranks", uw.size);
    }
    rc = dist_agree(&uw, rc);
    if (rc) {
        if (s) {
            free(s->counts);
            free(s->hdr);
        }
        free(s);
        return rc;
    }
    s->w = uw;
    s->method = o.method;
    s->be = o.method == STORE_RMA ? &store_rma_backend : &store_coll_backend;
    s->coll_max_bytes = o.coll_max_bytes;
    s->max_read_bytes = o.max_read_bytes;
    s->thread_level = uw.thread_level;
    s->profile = o.profile != 0;
    /* A private duplicate: our collectives and window traffic can never match the user's. */
    int mrc = MPI_Comm_dup(comm, &s->w.comm);
    if (mrc != MPI_SUCCESS) {
        /* MPI_Comm_dup is collective and fails everywhere or nowhere in practice. */
        MEM_FREE(s->counts, s->hdr, s);
        return store_mpi_err(mrc, "store_create: MPI_Comm_dup failed");
    }
    /* Errors from our own MPI calls come back as codes (then agreed), never as aborts. */
    MPI_Comm_set_errhandler(s->w.comm, MPI_ERRORS_RETURN);
    pthread_mutex_init(&s->mpi_lock, NULL);
    pthread_mutex_init(&s->coll_lock, NULL);

    /* The method and the caps must be equal on every rank (DDStore assumes it; we check). */
    int64_t mine[6] = {o.method, -(int64_t)o.method, o.coll_max_bytes, -o.coll_max_bytes,
                       o.max_read_bytes, -o.max_read_bytes};
    int64_t mx[6];
    MPI_Allreduce(mine, mx, 6, MPI_INT64_T, MPI_MAX, s->w.comm);
    if (mx[0] != -mx[1])
        rc = err_set(ERR_USAGE, "store_create: ranks asked for different methods; every rank "
                                "must use the same method");
    else if (mx[2] != -mx[3])
        rc = err_set(ERR_USAGE,
                     "store_create: the coll round cap differs across ranks (%lld..%lld bytes); "
                     "set DDSTORE_ALLTOALL_MAX_BYTES to the same value on every rank",
                     (long long)-mx[3], (long long)mx[2]);
    else if (mx[4] != -mx[5])
        rc = err_set(ERR_USAGE,
                     "store_create: the largest read differs across ranks (%lld..%lld bytes); set "
                     "DDSTORE_MAX_READ_BYTES to the same value on every rank",
                     (long long)-mx[5], (long long)mx[4]);
    if (rc) { /* identical on every rank: no further agreement needed */
        store *tmp = s;
        store_free(&tmp);
        return rc;
    }
    *out = s;
    return 0;
}

static void var_release(store *s, store_var *v, int mpi_alive) {
    if (!v)
        return;
    s->be->var_release(s, v, mpi_alive);
    free(v->prefix);
    free(v);
}

int store_free(store **sp) {
    if (!sp || !*sp)
        return 0;
    store *s = *sp;
    *sp = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    for (int i = 0; i < s->nvars; i++)
        var_release(s, s->vars[i], !fin);
    if (s->be->release)
        s->be->release(s);
    int rc = 0;
    if (!fin) {
        /* Barrier so no rank frees the communicator while another still uses it. */
        int mrc = MPI_Barrier(s->w.comm);
        if (mrc != MPI_SUCCESS)
            rc = store_mpi_err(mrc, "store_free: barrier failed");
        MPI_Comm_free(&s->w.comm);
    }
    pthread_mutex_destroy(&s->mpi_lock);
    pthread_mutex_destroy(&s->coll_lock);
    MEM_FREE(s->counts, s->hdr, s);
    return rc;
}

/* ---- variables -------------------------------------------------------------------------- */

static uint64_t name_hash(const char *s) { /* FNV-1a, to compare names across ranks */
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static int check_add_args(const store *s, const char *name, store_type type, int64_t row_elems,
                          int64_t nrows, const int *var_out, int64_t *row_bytes) {
    if (!var_out)
        return err_set(ERR_USAGE, "store_add: var_out is NULL");
    if (!name || !*name || strlen(name) >= STORE_NAME_MAX)
        return err_set(ERR_USAGE, "store_add: the variable name must be 1..%d bytes",
                       STORE_NAME_MAX - 1);
    for (int i = 0; i < s->nvars; i++)
        if (!strcmp(s->vars[i]->name, name))
            return err_set(ERR_USAGE, "store_add('%s'): a variable with this name already exists",
                           name);
    if (s->nvars >= STORE_MAX_VARS)
        return err_set(ERR_USAGE, "store_add('%s'): a store holds at most %d variables", name,
                       STORE_MAX_VARS);
    size_t ts = store_type_size(type);
    if (!ts)
        return err_set(ERR_USAGE, "store_add('%s'): invalid element type %d", name, (int)type);
    if (row_elems < 1 || row_elems > INT64_MAX / (int64_t)ts)
        return err_set(ERR_USAGE, "store_add('%s'): row_elems must be >= 1 (got %lld)", name,
                       (long long)row_elems);
    *row_bytes = row_elems * (int64_t)ts;
    if (nrows < 0)
        return err_set(ERR_USAGE, "store_add('%s'): nrows must be >= 0 (got %lld)", name,
                       (long long)nrows);
    /* The shard must be addressable as size_t and as MPI_Aint (window size). */
    int64_t lim = INT64_MAX;
    if ((uint64_t)SIZE_MAX < (uint64_t)lim)
        lim = (int64_t)SIZE_MAX;
    if (nrows > lim / *row_bytes)
        return err_set(ERR_RANGE, "store_add('%s'): %lld rows of %lld bytes overflow the address "
                                  "space",
                       name, (long long)nrows, (long long)*row_bytes);
    return 0;
}

int store_add(store *s, const char *name, store_type type, int64_t row_elems, int64_t nrows,
              const void *buf, int *var_out) {
    if (!s)
        return err_set(ERR_USAGE, "store_add: store is NULL");
    int64_t row_bytes = 0;
    int rc = check_add_args(s, name, type, row_elems, nrows, var_out, &row_bytes);
    rc = dist_agree(&s->w, rc);
    if (rc)
        return rc;

    /* Same name, type and row shape everywhere: compare min and max in one reduction. */
    int64_t h = (int64_t)(name_hash(name) >> 2);
    int64_t mine[6] = {h, -h, (int64_t)type, -(int64_t)type, row_elems, -row_elems};
    int64_t mx[6];
    int mrc = MPI_Allreduce(mine, mx, 6, MPI_INT64_T, MPI_MAX, s->w.comm);
    if (mrc != MPI_SUCCESS)
        return store_mpi_err(mrc, "store_add('%s'): MPI_Allreduce failed", name);
    if (mx[0] != -mx[1])
        return err_set(ERR_USAGE, "store_add('%s'): ranks added differently named variables; "
                                  "every rank must call store_add in the same order with the "
                                  "same name",
                       name);
    if (mx[2] != -mx[3])
        return err_set(ERR_USAGE, "store_add('%s'): the element type differs across ranks",
                       name);
    if (mx[4] != -mx[5])
        return err_set(ERR_USAGE,
                       "store_add('%s'): row_elems differs across ranks (%lld..%lld); every "
                       "rank must use the same row shape",
                       name, (long long)-mx[5], (long long)mx[4]);

    store_var *v = calloc(1, sizeof *v);
    if (v)
        v->prefix = calloc((size_t)s->w.size + 1, sizeof *v->prefix);
    rc = (v && v->prefix) ? 0 : err_set(ERR_NOMEM, "store_add('%s'): out of memory", name);
    rc = dist_agree(&s->w, rc);
    if (rc) {
        if (v)
            free(v->prefix);
        free(v);
        return rc;
    }
    snprintf(v->name, sizeof v->name, "%s", name);
    v->type = type;
    v->row_elems = row_elems;
    v->row_bytes = row_bytes;
    v->nrows = nrows;
    mrc = MPI_Allgather(&nrows, 1, MPI_INT64_T, v->prefix + 1, 1, MPI_INT64_T, s->w.comm);
    if (mrc != MPI_SUCCESS) {
        rc = store_mpi_err(mrc, "store_add('%s'): MPI_Allgather failed", name);
        var_release(s, v, 1);
        return rc;
    }
    for (int p = 1; p <= s->w.size; p++) {
        if (v->prefix[p] > INT64_MAX - v->prefix[p - 1]) {
            var_release(s, v, 1); /* same data everywhere: same error everywhere */
            return err_set(ERR_RANGE, "store_add('%s'): the total row count overflows 64 bits",
                           name);
        }
        v->prefix[p] += v->prefix[p - 1];
    }

    size_t bytes = (size_t)nrows * (size_t)row_bytes;
    rc = s->be->var_create(s, v); /* agreed inside */
    if (rc) {
        var_release(s, v, 1);
        return rc;
    }
    if (bytes) {
        if (buf)
            memcpy(v->base, buf, bytes);
        else
            memset(v->base, 0, bytes);
    }
    /* Nobody may read a shard before its owner has filled it. */
    rc = s->be->var_sync ? s->be->var_sync(s, v) : 0;
    mrc = MPI_Barrier(s->w.comm);
    if (!rc && mrc != MPI_SUCCESS)
        rc = store_mpi_err(mrc, "store_add('%s'): barrier failed", name);
    rc = dist_agree(&s->w, rc);
    if (rc) {
        var_release(s, v, 1);
        return rc;
    }
    v->id = s->nvars;
    s->vars[s->nvars] = v;
    *var_out = s->nvars++;
    return 0;
}

static int lookup(const store *s, int var, store_var **v) {
    if (!s)
        return err_set(ERR_USAGE, "store: the store is NULL");
    if (var < 0 || var >= s->nvars)
        return err_set(ERR_NOTFOUND,
                       "store: unknown variable id %d (ids come from store_add; look names up "
                       "with store_find)",
                       var);
    *v = s->vars[var];
    return 0;
}

int store_update(store *s, int var, int64_t local_row, int64_t nrows, const void *buf) {
    store_var *v = NULL;
    int rc = lookup(s, var, &v);
    if (rc)
        return rc;
    if (local_row < 0 || nrows < 0 || local_row > v->nrows || nrows > v->nrows - local_row)
        return err_set(ERR_RANGE,
                       "store_update('%s'): local rows [%lld, +%lld) are outside this rank's "
                       "shard of %lld rows",
                       v->name, (long long)local_row, (long long)nrows, (long long)v->nrows);
    if (nrows && !buf)
        return err_set(ERR_USAGE, "store_update('%s'): buf is NULL", v->name);
    if (nrows)
        memcpy(v->base + local_row * v->row_bytes, buf, (size_t)(nrows * v->row_bytes));
    return 0;
}

int store_sync(store *s) {
    if (!s)
        return err_set(ERR_USAGE, "store_sync: store is NULL");
    int rc = 0;
    for (int i = 0; i < s->nvars && !rc && s->be->var_sync; i++)
        rc = s->be->var_sync(s, s->vars[i]);
    int mrc = MPI_Barrier(s->w.comm);
    if (!rc && mrc != MPI_SUCCESS)
        rc = store_mpi_err(mrc, "store_sync: barrier failed");
    return dist_agree(&s->w, rc);
}

int store_find(const store *s, const char *name) {
    if (s && name)
        for (int i = 0; i < s->nvars; i++)
            if (!strcmp(s->vars[i]->name, name))
                return i;
    return err_set(ERR_NOTFOUND, "store: no variable named '%s'", name ? name : "(null)");
}

int store_info(const store *s, int var, store_var_info *info) {
    store_var *v = NULL;
    int rc = lookup(s, var, &v);
    if (rc)
        return rc;
    snprintf(info->name, sizeof info->name, "%s", v->name);
    info->type = v->type;
    info->row_elems = v->row_elems;
    info->row_bytes = v->row_bytes;
    info->total_rows = v->prefix[s->w.size];
    info->local_rows = v->nrows;
    info->first_row = v->prefix[s->w.rank];
    return 0;
}

int store_owner(const store *s, int var, int64_t row, int *rank, int64_t *local_row) {
    store_var *v = NULL;
    int rc = lookup(s, var, &v);
    if (rc)
        return rc;
    if (row < 0 || row >= v->prefix[s->w.size])
        return err_set(ERR_RANGE, "store('%s'): row %lld is outside [0, %lld)", v->name,
                       (long long)row, (long long)v->prefix[s->w.size]);
    int t = store_owner_of(v, s->w.size, row);
    if (rank)
        *rank = t;
    if (local_row)
        *local_row = row - v->prefix[t];
    return 0;
}

void store_nsplit(int64_t n, int size, int rank, int64_t *lo, int64_t *hi) {
    int64_t k = n / size, m = n % size;
    *lo = rank * k + (rank < m ? rank : m);
    *hi = (rank + 1) * k + (rank + 1 < m ? rank + 1 : m);
}

int store_get_profile(store *s, int var, store_profile *out, int reset) {
    store_var *v = NULL;
    int rc = lookup(s, var, &v);
    if (rc)
        return rc;
    uint64_t x[7];
    for (int i = 0; i < 7; i++)
        x[i] = reset ? atomic_exchange(&v->prof[i], 0) : atomic_load(&v->prof[i]);
    *out = (store_profile){.calls = x[STORE_P_CALLS], .rows = x[STORE_P_ROWS],
                           .remote_rows = x[STORE_P_REMOTE], .bytes = x[STORE_P_BYTES],
                           .post_ns = x[STORE_P_POST], .wait_ns = x[STORE_P_WAIT],
                           .copy_ns = x[STORE_P_COPY]};
    return 0;
}

int store_thread_safe(const store *s) {
    return s && s->be->thread_safe(s);
}

store_method store_get_method(const store *s) {
    return s->method;
}

MPI_Comm store_comm(const store *s) {
    return s->w.comm;
}

/* ---- reads ------------------------------------------------------------------------------ */

/* Everything a read needs checked before a byte moves. */
static int check_read(const store *s, int var, const store_idx *x, int64_t n, const void *dst,
                      size_t dst_bytes, store_var **vp) {
    store_var *v = NULL;
    int rc = lookup(s, var, &v);
    if (rc)
        return rc;
    *vp = v;
    const int64_t total = v->prefix[s->w.size];
    if (n < 0)
        return err_set(ERR_USAGE, "store('%s'): the row count must be >= 0 (got %lld)", v->name,
                       (long long)n);
    if (n == 0)
        return 0;
    if (!dst)
        return err_set(ERR_USAGE, "store('%s'): the destination buffer is NULL", v->name);
    if ((uint64_t)n > (uint64_t)(dst_bytes / (size_t)v->row_bytes))
        return err_set(ERR_USAGE,
                       "store('%s'): the destination holds %zu bytes but %lld rows of %lld bytes "
                       "need %lld (allocate n * row_bytes, see store_info)",
                       v->name, dst_bytes, (long long)n, (long long)v->row_bytes,
                       (long long)((uint64_t)n * (uint64_t)v->row_bytes));
    if (x->range) {
        if (x->start < 0 || x->start > total || n > total - x->start)
            return err_set(ERR_RANGE, "store('%s'): rows [%lld, %lld) are outside [0, %lld)",
                           v->name, (long long)x->start, (long long)(x->start + n),
                           (long long)total);
        return 0;
    }
    if (!x->idx)
        return err_set(ERR_USAGE, "store('%s'): the index list is NULL", v->name);
    for (int64_t i = 0; i < n; i++)
        if (x->idx[i] < 0 || x->idx[i] >= total)
            return err_set(ERR_RANGE,
                           "store('%s'): index %lld (position %lld of the batch) is outside "
                           "[0, %lld)",
                           v->name, (long long)x->idx[i], (long long)i, (long long)total);
    return 0;
}

static int do_read(store *s, int var, const store_idx *x, int64_t n, void *dst,
                   size_t dst_bytes) {
    if (!s)
        return err_set(ERR_USAGE, "store: the store is NULL");
    store_var *v = NULL;
    int rc = check_read(s, var, x, n, dst, dst_bytes, &v);
    return s->be->get(s, rc ? NULL : v, x, rc ? 0 : n, dst, rc);
}

int store_get(store *s, int var, int64_t start, int64_t count, void *dst, size_t dst_bytes) {
    store_idx x = {.idx = NULL, .start = start, .range = 1};
    return do_read(s, var, &x, count, dst, dst_bytes);
}

int store_get_batch(store *s, int var, const int64_t *idx, int64_t n, void *dst,
                    size_t dst_bytes) {
    store_idx x = {.idx = idx, .start = 0, .range = 0};
    return do_read(s, var, &x, n, dst, dst_bytes);
}
