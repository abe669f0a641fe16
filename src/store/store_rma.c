/* store_rma: the one-sided method. One MPI_Win_allocate window per variable, one passive-target
 * epoch (lock_all, MPI_MODE_NOCHECK) for the window's lifetime, and reads made of MPI_Gets
 * completed by one MPI_Win_flush per target rank.
 *
 * Why these choices:
 *  - MPI_Win_allocate, not MPI_Win_create over user memory: Open MPI 4.1 without CMA single-copy
 *    (the usual container setting) fails MPI_Win_create with MPI_ERR_WIN, and the allocated
 *    window lets osc/sm serve same-node peers as true one-sided loads (no target progress needed).
 *  - Displacement unit 1: offsets are MPI_Aint bytes, so shards beyond 2^31 rows or bytes work.
 *  - lock_all once instead of lock/unlock per read (DDStore's method 0) or fences (DDStore's
 *    epoch_begin/end, which mixes fence and lock epochs on one window): no collective per step, no
 *    per-read synchronisation, and any thread may read at any time.
 *  - Consecutive rows on one target are coalesced into one MPI_Get (a range read is one Get per
 *    owner); Gets larger than max_read_bytes are split because MPI counts are int.
 *  - Rows owned by the caller are copied with memcpy: no MPI call at all.
 *  - Thread safety: with MPI_THREAD_MULTIPLE, MPI_Get and MPI_Win_flush may be called by several
 *    threads on one window; each thread flushes the targets it used, which also completes its own
 *    Gets. So no lock is needed and concurrent readers overlap. Below MULTIPLE a mutex serialises
 *    our calls (correct only if nothing else calls MPI concurrently; documented in store.h). */
#include "store/store_impl.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>

static int rma_var_create(store *s, store_var *v) {
    MPI_Aint bytes = (MPI_Aint)(v->nrows * v->row_bytes);
    void *base = NULL;
    MPI_Info info;
    MPI_Info_create(&info);
    /* We never use accumulates: let the implementation skip their ordering guarantees. */
    MPI_Info_set(info, "accumulate_ordering", "none");
    MPI_Info_set(info, "same_disp_unit", "true");
    /* Open MPI's osc sm otherwise packs all shards back to back in one segment; page-aligned
     * per-rank segments keep each shard on its owner's NUMA node. */
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    int mrc = MPI_Win_allocate(bytes, 1, info, s->w.comm, &base, &v->win);
    MPI_Info_free(&info);
    int rc = 0;
    if (mrc != MPI_SUCCESS)
        rc = store_mpi_err(mrc,
                           "store_add('%s'): MPI_Win_allocate of %lld bytes failed, so the rma "
                           "method cannot run with this MPI setup (Open MPI: the osc component "
                           "must support the thread level and transport: sm on one node, ucx "
                           "across nodes; pt2pt refuses MPI_THREAD_MULTIPLE and rdma needs an "
                           "RDMA-capable btl), or use the coll method",
                           v->name, (long long)bytes);
    /* Agree before anything else: if only some ranks got a window, freeing it would be a
     * collective the others never join, so those ranks leak it rather than hang. */
    rc = dist_agree(&s->w, rc);
    if (rc) {
        v->has_win = 0;
        return rc;
    }
    v->has_win = 1;
    v->base = base;
    MPI_Win_set_errhandler(v->win, MPI_ERRORS_RETURN);
    mrc = MPI_Win_lock_all(MPI_MODE_NOCHECK, v->win);
    if (mrc != MPI_SUCCESS)
        rc = store_mpi_err(mrc, "store_add('%s'): MPI_Win_lock_all failed", v->name);
    else
        v->locked = 1;
    return dist_agree(&s->w, rc);
}

static void rma_var_release(store *s, store_var *v, int mpi_alive) {
    (void)s;
    if (!mpi_alive) {
        v->has_win = v->locked = 0;
        v->base = NULL;
        return;
    }
    if (v->locked)
        MPI_Win_unlock_all(v->win);
    v->locked = 0;
    if (v->has_win)
        MPI_Win_free(&v->win); /* also frees v->base */
    v->has_win = 0;
    v->base = NULL;
}

static int rma_var_sync(store *s, store_var *v) {
    (void)s;
    if (!v->locked)
        return 0;
    int mrc = MPI_Win_sync(v->win);
    return mrc == MPI_SUCCESS ? 0 : store_mpi_err(mrc, "store('%s'): MPI_Win_sync failed", v->name);
}

/* One Get of `len` bytes at byte offset `disp` of rank t, split into int-sized pieces. */
static int get_bytes(store *s, store_var *v, int t, int64_t disp, char *dst, int64_t len) {
    for (int64_t off = 0; off < len; off += s->max_read_bytes) {
        int64_t n = len - off < s->max_read_bytes ? len - off : s->max_read_bytes;
        int mrc = MPI_Get(dst + off, (int)n, MPI_BYTE, t, (MPI_Aint)(disp + off), (int)n, MPI_BYTE,
                          v->win);
        if (mrc != MPI_SUCCESS)
            return store_mpi_err(mrc, "store('%s'): MPI_Get of %lld bytes from rank %d failed",
                                 v->name, (long long)n, t);
    }
    return 0;
}

static int rma_get(store *s, store_var *v, const store_idx *x, int64_t n, char *dst, int local_rc) {
    if (local_rc || n == 0)
        return local_rc;
    const int64_t rb = v->row_bytes;
    const int me = s->w.rank, size = s->w.size;
    /* Targets touched by this call (a bit each): 4096 ranks on the stack, more on the heap. */
    uint64_t stackbits[64];
    uint64_t *bits = stackbits;
    size_t nwords = ((size_t)size + 63) / 64;
    if (nwords > sizeof stackbits / sizeof stackbits[0]) {
        bits = calloc(nwords, sizeof *bits);
        if (!bits)
            return err_set(ERR_NOMEM, "store('%s'): out of memory", v->name);
    } else {
        memset(bits, 0, nwords * sizeof *bits);
    }
    const int serial = s->thread_level < MPI_THREAD_MULTIPLE;
    if (serial)
        pthread_mutex_lock(&s->mpi_lock);
    int rc = 0, any = 0;
    int64_t remote = 0;
    const uint64_t t0 = s->profile ? store_ns() : 0;
    for (int64_t i = 0; i < n && !rc;) {
        const int64_t g = store_idx_at(x, i);
        const int t = store_owner_of(v, size, g);
        const int64_t end = v->prefix[t + 1];
        int64_t run = 1;
        while (i + run < n && g + run < end && store_idx_at(x, i + run) == g + run)
            run++;
        if (t == me) {
            memcpy(dst + i * rb, v->base + (g - v->prefix[me]) * rb, (size_t)(run * rb));
        } else {
            rc = get_bytes(s, v, t, (g - v->prefix[t]) * rb, dst + i * rb, run * rb);
            bits[t >> 6] |= (uint64_t)1 << (t & 63);
            any = 1;
            remote += run;
        }
        i += run;
    }
    const uint64_t t1 = s->profile ? store_ns() : 0;
    /* Flush every target we posted to, even after an error: no Get may still be writing into
     * dst when we return. */
    for (size_t wd = 0; any && wd < nwords; wd++)
        for (uint64_t b = bits[wd]; b; b &= b - 1) {
            int t = (int)(wd * 64) + __builtin_ctzll(b);
            int mrc = MPI_Win_flush(t, v->win);
            if (mrc != MPI_SUCCESS && !rc)
                rc = store_mpi_err(mrc, "store('%s'): MPI_Win_flush to rank %d failed", v->name,
                                   t);
        }
    if (serial)
        pthread_mutex_unlock(&s->mpi_lock);
    if (s->profile) {
        const uint64_t t2 = store_ns();
        store_prof_add(v, STORE_P_CALLS, 1);
        store_prof_add(v, STORE_P_ROWS, (uint64_t)n);
        store_prof_add(v, STORE_P_REMOTE, (uint64_t)remote);
        store_prof_add(v, STORE_P_BYTES, (uint64_t)(n * rb));
        store_prof_add(v, STORE_P_POST, t1 - t0);
        store_prof_add(v, STORE_P_WAIT, t2 - t1);
    }
    if (bits != stackbits)
        free(bits);
    return rc;
}

static int rma_thread_safe(const store *s) {
    return s->thread_level >= MPI_THREAD_MULTIPLE;
}

const store_backend store_rma_backend = {STORE_RMA,      "rma",          rma_var_create,
                                         rma_var_sync,   rma_var_release, rma_get,
                                         NULL,           rma_thread_safe};
