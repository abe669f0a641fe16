/* mpi_test.h: the end of an MPI test program: every rank's CHECK counts summed into rank 0's
 * "N passed, N failed" line, the same exit status on every rank, MPI finalised. */
#ifndef SCAFFOLD_TESTS_DIST_MPI_TEST_H
#define SCAFFOLD_TESTS_DIST_MPI_TEST_H

#include "mpi/dist.h"
#include "test.h"

static int mpi_test_report(dist_world *w) {
    int pf[2] = {test_passed, test_failed};
    MPI_Allreduce(MPI_IN_PLACE, pf, 2, MPI_INT, MPI_SUM, w->comm);
    test_passed = pf[0];
    test_failed = pf[1];
    int rc = 0;
    if (w->rank == 0)
        rc = test_report();
    MPI_Bcast(&rc, 1, MPI_INT, 0, w->comm);
    dist_finalize(w);
    return rc;
}

#endif
