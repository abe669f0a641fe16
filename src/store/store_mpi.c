/* store_mpi: the MPI helpers both transfer methods use (error strings, row datatypes). */
#include "store/store_impl.h"

#include "core/err.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

int store_mpi_err(int mpirc, const char *fmt, ...) {
    char what[512], mpimsg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (MPI_Error_string(mpirc, mpimsg, &len) != MPI_SUCCESS)
        snprintf(mpimsg, sizeof mpimsg, "MPI error %d", mpirc);
    else
        mpimsg[len] = 0;
    return err_set(ERR_MPI, "%s: %s", what, mpimsg);
}

int store_mpi_rowtype(int64_t row_bytes, MPI_Datatype *type) {
    int mrc;
    if (row_bytes <= INT_MAX) {
        mrc = MPI_Type_contiguous((int)row_bytes, MPI_BYTE, type);
    } else {
        /* q blocks of 1 GiB plus r bytes, as one struct type of extent row_bytes. */
        const int64_t gib = (int64_t)1 << 30;
        MPI_Datatype block;
        mrc = MPI_Type_contiguous((int)gib, MPI_BYTE, &block);
        if (mrc == MPI_SUCCESS) {
            int64_t q = row_bytes / gib, r = row_bytes % gib;
            int lens[2] = {(int)q, (int)r};
            MPI_Aint displs[2] = {0, (MPI_Aint)(q * gib)};
            MPI_Datatype types[2] = {block, MPI_BYTE};
            mrc = MPI_Type_create_struct(r ? 2 : 1, lens, displs, types, type);
            MPI_Type_free(&block);
        }
    }
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Type_commit(type);
    return mrc == MPI_SUCCESS ? 0 : store_mpi_err(mrc, "store: cannot build a row datatype");
}
