/* mpi_hooks.h: the interface between libscaffold_trace.so and its MPI sibling,
 * libscaffold_trace_mpi.so (src/trace/mpi/wrap_mpi.c).
 *
 * The sibling is compiled per MPI implementation against that MPI's mpi.h (Open MPI's handles
 * are pointers, MPICH's are ints), never linked to libmpi (the PMPI_* functions are looked up
 * when first used), and preloaded after the tracer by `scaffold trace`; in a process that never
 * calls MPI it only costs its mapping. It intercepts the MPI_* calls through the profiling
 * interface, and hands each call to the tracer as one trc_mpi_ev through the table the tracer
 * exports under the symbol "scaffold_trace_mpi_hooks_v1". The tracer writes the records into the
 * calling thread's ring like any I/O event, and its flusher formats them (cat "MPI" or "MPIIO",
 * type 10, as dftracer 2.1+ does). This header needs no MPI header: both sides include it. */
#ifndef SCAFFOLD_TRACE_MPI_HOOKS_H
#define SCAFFOLD_TRACE_MPI_HOOKS_H

#include <stdint.h>

/* What each MPI operation is, for the record's args and for the analyzer. */
enum {
    TRC_MK_INIT,   /* MPI_Init*, MPI_Finalize */
    TRC_MK_COLL,   /* blocking collective */
    TRC_MK_ICOLL,  /* non-blocking collective (completed by a wait/test) */
    TRC_MK_P2P,    /* blocking point-to-point */
    TRC_MK_IP2P,   /* non-blocking point-to-point */
    TRC_MK_WAIT,   /* wait/test that completed requests */
    TRC_MK_RMA,    /* one-sided data movement (put/get/accumulate) */
    TRC_MK_EPOCH,  /* one-sided synchronisation (fence, lock/unlock, flush) and windows */
    TRC_MK_IO,     /* MPI-IO (cat "MPIIO") */
};
/* Which peer arg an operation carries. */
enum { TRC_MP_NONE, TRC_MP_ROOT, TRC_MP_PEER };

/* X(id, name, kind, peer): every MPI call the sibling records, once. */
#define TRC_MPI_OPS(X)                                                                             \
    X(init, "MPI_Init", TRC_MK_INIT, TRC_MP_NONE)                                                  \
    X(init_thread, "MPI_Init_thread", TRC_MK_INIT, TRC_MP_NONE)                                    \
    X(finalize, "MPI_Finalize", TRC_MK_INIT, TRC_MP_NONE)                                          \
    X(barrier, "MPI_Barrier", TRC_MK_COLL, TRC_MP_NONE)                                            \
    X(bcast, "MPI_Bcast", TRC_MK_COLL, TRC_MP_ROOT)                                                \
    X(reduce, "MPI_Reduce", TRC_MK_COLL, TRC_MP_ROOT)                                              \
    X(allreduce, "MPI_Allreduce", TRC_MK_COLL, TRC_MP_NONE)                                        \
    X(allgather, "MPI_Allgather", TRC_MK_COLL, TRC_MP_NONE)                                        \
    X(allgatherv, "MPI_Allgatherv", TRC_MK_COLL, TRC_MP_NONE)                                      \
    X(alltoall, "MPI_Alltoall", TRC_MK_COLL, TRC_MP_NONE)                                          \
    X(alltoallv, "MPI_Alltoallv", TRC_MK_COLL, TRC_MP_NONE)                                        \
    X(gather, "MPI_Gather", TRC_MK_COLL, TRC_MP_ROOT)                                              \
    X(gatherv, "MPI_Gatherv", TRC_MK_COLL, TRC_MP_ROOT)                                            \
    X(scatter, "MPI_Scatter", TRC_MK_COLL, TRC_MP_ROOT)                                            \
    X(scatterv, "MPI_Scatterv", TRC_MK_COLL, TRC_MP_ROOT)                                          \
    X(reduce_scatter, "MPI_Reduce_scatter", TRC_MK_COLL, TRC_MP_NONE)                              \
    X(reduce_scatter_block, "MPI_Reduce_scatter_block", TRC_MK_COLL, TRC_MP_NONE)                  \
    X(scan, "MPI_Scan", TRC_MK_COLL, TRC_MP_NONE)                                                  \
    X(exscan, "MPI_Exscan", TRC_MK_COLL, TRC_MP_NONE)                                              \
    X(ibarrier, "MPI_Ibarrier", TRC_MK_ICOLL, TRC_MP_NONE)                                         \
    X(ibcast, "MPI_Ibcast", TRC_MK_ICOLL, TRC_MP_ROOT)                                             \
    X(ireduce, "MPI_Ireduce", TRC_MK_ICOLL, TRC_MP_ROOT)                                           \
    X(iallreduce, "MPI_Iallreduce", TRC_MK_ICOLL, TRC_MP_NONE)                                     \
    X(iallgather, "MPI_Iallgather", TRC_MK_ICOLL, TRC_MP_NONE)                                     \
    X(iallgatherv, "MPI_Iallgatherv", TRC_MK_ICOLL, TRC_MP_NONE)                                   \
    X(ialltoall, "MPI_Ialltoall", TRC_MK_ICOLL, TRC_MP_NONE)                                       \
    X(ialltoallv, "MPI_Ialltoallv", TRC_MK_ICOLL, TRC_MP_NONE)                                     \
    X(igather, "MPI_Igather", TRC_MK_ICOLL, TRC_MP_ROOT)                                           \
    X(igatherv, "MPI_Igatherv", TRC_MK_ICOLL, TRC_MP_ROOT)                                         \
    X(iscatter, "MPI_Iscatter", TRC_MK_ICOLL, TRC_MP_ROOT)                                         \
    X(iscatterv, "MPI_Iscatterv", TRC_MK_ICOLL, TRC_MP_ROOT)                                       \
    X(ireduce_scatter, "MPI_Ireduce_scatter", TRC_MK_ICOLL, TRC_MP_NONE)                           \
    X(ireduce_scatter_block, "MPI_Ireduce_scatter_block", TRC_MK_ICOLL, TRC_MP_NONE)               \
    X(send, "MPI_Send", TRC_MK_P2P, TRC_MP_PEER)                                                   \
    X(ssend, "MPI_Ssend", TRC_MK_P2P, TRC_MP_PEER)                                                 \
    X(bsend, "MPI_Bsend", TRC_MK_P2P, TRC_MP_PEER)                                                 \
    X(rsend, "MPI_Rsend", TRC_MK_P2P, TRC_MP_PEER)                                                 \
    X(recv, "MPI_Recv", TRC_MK_P2P, TRC_MP_PEER)                                                   \
    X(sendrecv, "MPI_Sendrecv", TRC_MK_P2P, TRC_MP_PEER)                                           \
    X(isend, "MPI_Isend", TRC_MK_IP2P, TRC_MP_PEER)                                                \
    X(issend, "MPI_Issend", TRC_MK_IP2P, TRC_MP_PEER)                                              \
    X(irecv, "MPI_Irecv", TRC_MK_IP2P, TRC_MP_PEER)                                                \
    X(wait, "MPI_Wait", TRC_MK_WAIT, TRC_MP_PEER)                                                  \
    X(waitall, "MPI_Waitall", TRC_MK_WAIT, TRC_MP_NONE)                                            \
    X(waitany, "MPI_Waitany", TRC_MK_WAIT, TRC_MP_PEER)                                            \
    X(waitsome, "MPI_Waitsome", TRC_MK_WAIT, TRC_MP_NONE)                                          \
    X(test, "MPI_Test", TRC_MK_WAIT, TRC_MP_PEER)                                                  \
    X(testall, "MPI_Testall", TRC_MK_WAIT, TRC_MP_NONE)                                            \
    X(testany, "MPI_Testany", TRC_MK_WAIT, TRC_MP_PEER)                                            \
    X(testsome, "MPI_Testsome", TRC_MK_WAIT, TRC_MP_NONE)                                          \
    X(win_create, "MPI_Win_create", TRC_MK_EPOCH, TRC_MP_NONE)                                     \
    X(win_allocate, "MPI_Win_allocate", TRC_MK_EPOCH, TRC_MP_NONE)                                 \
    X(win_free, "MPI_Win_free", TRC_MK_EPOCH, TRC_MP_NONE)                                         \
    X(win_fence, "MPI_Win_fence", TRC_MK_EPOCH, TRC_MP_NONE)                                       \
    X(win_lock, "MPI_Win_lock", TRC_MK_EPOCH, TRC_MP_PEER)                                         \
    X(win_unlock, "MPI_Win_unlock", TRC_MK_EPOCH, TRC_MP_PEER)                                     \
    X(win_lock_all, "MPI_Win_lock_all", TRC_MK_EPOCH, TRC_MP_NONE)                                 \
    X(win_unlock_all, "MPI_Win_unlock_all", TRC_MK_EPOCH, TRC_MP_NONE)                             \
    X(win_flush, "MPI_Win_flush", TRC_MK_EPOCH, TRC_MP_PEER)                                       \
    X(win_flush_all, "MPI_Win_flush_all", TRC_MK_EPOCH, TRC_MP_NONE)                               \
    X(put, "MPI_Put", TRC_MK_RMA, TRC_MP_PEER)                                                     \
    X(get, "MPI_Get", TRC_MK_RMA, TRC_MP_PEER)                                                     \
    X(accumulate, "MPI_Accumulate", TRC_MK_RMA, TRC_MP_PEER)                                       \
    X(file_open, "MPI_File_open", TRC_MK_IO, TRC_MP_NONE)                                          \
    X(file_close, "MPI_File_close", TRC_MK_IO, TRC_MP_NONE)                                        \
    X(file_read, "MPI_File_read", TRC_MK_IO, TRC_MP_NONE)                                          \
    X(file_read_at, "MPI_File_read_at", TRC_MK_IO, TRC_MP_NONE)                                    \
    X(file_read_all, "MPI_File_read_all", TRC_MK_IO, TRC_MP_NONE)                                  \
    X(file_read_at_all, "MPI_File_read_at_all", TRC_MK_IO, TRC_MP_NONE)                            \
    X(file_write, "MPI_File_write", TRC_MK_IO, TRC_MP_NONE)                                        \
    X(file_write_at, "MPI_File_write_at", TRC_MK_IO, TRC_MP_NONE)                                  \
    X(file_write_all, "MPI_File_write_all", TRC_MK_IO, TRC_MP_NONE)                                \
    X(file_write_at_all, "MPI_File_write_at_all", TRC_MK_IO, TRC_MP_NONE)                          \
    X(file_set_view, "MPI_File_set_view", TRC_MK_IO, TRC_MP_NONE)                                  \
    X(file_sync, "MPI_File_sync", TRC_MK_IO, TRC_MP_NONE)                                          \
    X(file_seek, "MPI_File_seek", TRC_MK_IO, TRC_MP_NONE)                                          \
    X(file_set_size, "MPI_File_set_size", TRC_MK_IO, TRC_MP_NONE)

enum trc_mpi_op {
#define TRC_MPI_OP_ENUM(id, name, kind, peer) TRC_MPI_##id,
    TRC_MPI_OPS(TRC_MPI_OP_ENUM)
#undef TRC_MPI_OP_ENUM
    TRC_MPI_COUNT
};

#define TRC_MPI_NONE INT32_MIN /* no peer/root, no request op */

/* One MPI call. Times come from the table's clock (the tracer's). The communicator id is the
 * same on every member of a communicator (a hash of its size and the world ranks of its first
 * and last members), so the analyzer can match the instances of a collective across ranks. */
typedef struct trc_mpi_ev {
    uint64_t t0, t1;
    int32_t op;        /* enum trc_mpi_op */
    int32_t peer;      /* root (collectives) or peer (point-to-point, RMA target), or NONE */
    uint32_t comm_id;  /* 0 unknown */
    uint32_t comm_size;
    int32_t rank;      /* this process's rank in the communicator, -1 unknown */
    int32_t req_op;    /* waits/tests: the operation the first completed request began, or NONE */
    int32_t nreq;      /* waits/tests: requests completed */
    int32_t pad_;
    int64_t count;     /* elements (count argument), -1 none */
    int64_t bytes;     /* count x type size (the sum over completed requests for waits), -1 none */
    uint64_t fhash;    /* MPI-IO: the file, 0 none */
    int64_t offset;    /* MPI-IO *_at: the explicit offset (in etypes), -1 none */
} trc_mpi_ev;

/* The table libscaffold_trace.so exports as "scaffold_trace_mpi_hooks_v1". */
typedef struct trc_mpi_hooks {
    uint32_t version; /* 1 */
    uint32_t size;    /* sizeof(trc_mpi_hooks) of the tracer */
    /* The tracer's "recording" word: MPI events are recorded while (*active & mpi_bit). */
    const int *active;
    int mpi_bit;
    /* Called once by the sibling's constructor; returns 1 when tracing is on. */
    int (*attach)(void);
    uint64_t (*clock)(void);
    void (*emit)(const trc_mpi_ev *ev);
    /* Interns a path given to MPI_File_open (made absolute); returns its hash. */
    uint64_t (*file_hash)(const char *path);
    /* MPI_Init: the world rank and size (a "PR rank" metadata line). */
    void (*world)(int rank, int size);
    /* One line on stderr, prefixed "scaffold-trace: ". */
    void (*warn)(const char *msg);
} trc_mpi_hooks;

extern const char *const trc_mpi_names[TRC_MPI_COUNT];

#endif
