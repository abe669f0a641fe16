/* mpi.c: the tracer's side of MPI tracing. The MPI wrappers live in a sibling library,
 * libscaffold_trace_mpi.so, compiled per MPI implementation against that MPI's mpi.h (Open MPI's
 * handles are pointers, MPICH's are ints); this file owns the table it attaches to. */
#include "trace_int.h"

static int mpi_attached;

int trc_mpi_present(void) { return __atomic_load_n(&mpi_attached, __ATOMIC_RELAXED); }
