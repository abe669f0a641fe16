/* mpi.c: the tracer's side of MPI tracing. The MPI wrappers live in a sibling library,
 * libscaffold_trace_mpi.so (src/trace/mpi/wrap_mpi.c), compiled per MPI implementation against
 * that MPI's mpi.h (Open MPI's handles are pointers, MPICH's are ints). This file owns the table
 * it attaches to (mpi_hooks.h): the recording switch, the clock, and the emission of one MPI call
 * as a ring record of the calling thread, formatted later by the flusher (format.c). */
#include "mpi_hooks.h"
#include "trace_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *const trc_mpi_names[TRC_MPI_COUNT] = {
#define TRC_MPI_NAME(id, name, kind, peer) name,
    TRC_MPI_OPS(TRC_MPI_NAME)
#undef TRC_MPI_NAME
};

static int mpi_attached;

int trc_mpi_present(void) { return __atomic_load_n(&mpi_attached, __ATOMIC_RELAXED); }

static int hk_attach(void) {
    __atomic_store_n(&mpi_attached, 1, __ATOMIC_RELAXED);
    return trc_g.cfg.enabled && trc_g.cfg.mpi;
}

static uint64_t hk_clock(void) { return trc_clock(); }

static void hk_emit(const trc_mpi_ev *e) {
    if (!(__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) & TRC_FAM_MPI) || trc_busy ||
        e->op < 0 || e->op >= TRC_MPI_COUNT)
        return;
    trc_busy = 1;
    trc_thread *t = trc_self;
    if (TRC_UNLIKELY(!t))
        t = trc_thread_get();
    trc_mpi_rec *r = t ? trc_reserve(t, sizeof *r) : NULL;
    if (TRC_LIKELY(r != NULL)) {
        unsigned level = (unsigned)(t->depth < TRC_MAX_DEPTH ? t->depth : TRC_MAX_DEPTH) + 1;
        r->t0 = e->t0;
        r->dur_level = ((e->t1 - e->t0) & 0x00ffffffffffffffull) | (uint64_t)level << 56;
        r->comm_id = e->comm_id;
        r->comm_size = e->comm_size;
        r->rank = e->rank;
        r->req_op = e->req_op;
        r->nreq = e->nreq;
        r->pad_ = 0;
        r->count = e->count;
        r->bytes = e->bytes;
        r->fhash = e->fhash;
        r->offset = e->offset;
        trc_publish(t, r, trc_hdr(sizeof *r, TRC_REC_MPI, (unsigned)e->op, e->peer));
    }
    trc_busy = 0;
}

static uint64_t hk_file_hash(const char *path) {
    if (!path)
        return 0;
    int busy = trc_busy, traced = 0;
    trc_busy = 1;
    /* MPI-IO names may carry a file-system prefix ("ufs:", "lustre:"): hash the path itself */
    const char *colon = strchr(path, ':');
    if (colon && colon < strchr(path, '/') && colon - path < 16)
        path = colon + 1;
    uint64_t h = trc_path_classify(AT_FDCWD, path, &traced, 1);
    trc_busy = busy;
    return h;
}

static void hk_world(int rank, int size) {
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    trc_emit_meta(TRC_REC_PROC, "rank", v);
    snprintf(v, sizeof v, "%d", size);
    trc_emit_meta(TRC_REC_PROC, "world_size", v);
}

static void hk_warn(const char *msg) {
    char line[512];
    int n = snprintf(line, sizeof line, "scaffold-trace: %s\n", msg);
    if (n > 0)
        (void)!syscall(SYS_write, 2, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}

TRC_API const trc_mpi_hooks scaffold_trace_mpi_hooks_v1 = {
    1, sizeof(trc_mpi_hooks), &trc_g.active, TRC_FAM_MPI, hk_attach, hk_clock, hk_emit,
    hk_file_hash, hk_world, hk_warn};
