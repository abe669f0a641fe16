/* store_bench: the store micro-benchmark behind `scaffold store-bench`, a C counterpart of
 * DDStore's examples/scripts/bench_get.py with the same definitions:
 *   us/row    = 1e6 * mean over ranks of the timed wall time / rows read per rank
 *   MB/s/rank = row_bytes * rows per rank / mean wall time / 1e6
 * for single-row get() (batch 1) versus get_batch(B), per method and row size, median of
 * `repeats` timed runs. The baseline measured in the same run is the local memcpy of the same
 * random rows from the rank's own shard ("memcpy" lines), which is the ceiling of any method. */
#ifndef SCAFFOLD_STORE_STORE_BENCH_H
#define SCAFFOLD_STORE_STORE_BENCH_H

#include "store/store.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#define STORE_BENCH_MAX_LIST 16

typedef struct store_bench_opts {
    int nmethods;
    store_method methods[2];
    int nrow_bytes;
    int64_t row_bytes[STORE_BENCH_MAX_LIST];
    int nbatches;
    int64_t batches[STORE_BENCH_MAX_LIST]; /* 1 = store_get of one row, >1 = store_get_batch */
    int64_t rows_per_rank;                 /* at most; also capped by shard_bytes */
    int64_t shard_bytes;
    int64_t nget;      /* rows read per rank per timed run, at most; also capped by get_bytes */
    int64_t get_bytes;
    int repeats;
    int threads;       /* rma: reader threads per rank, each reading nget/threads rows */
    int remote_only;   /* draw indices only from other ranks' shards (P > 1) */
    int profile;       /* report store_profile's post/wait/copy per row (DDSTORE_PROFILE) */
    uint64_t seed;
    int64_t coll_max_bytes; /* 0 = store default / environment */
    const char *csv;        /* write the results here too (rank 0, atomic); NULL = no */
} store_bench_opts;

/* Defaults: methods rma,coll; rows 3136, 12544, 204800, 1048576 bytes (DDStore's 3 KB and
 * 12.5 KB rows, 200 KB, 1 MB); batches 1 and 128; 4096 rows per rank up to 256 MiB; 4000 rows
 * per run up to 256 MiB; 5 repeats; 1 thread; uniform indices over all ranks; seed 1. */
void store_bench_opts_default(store_bench_opts *o);

/* Collective over comm. Runs every configuration, prints the table and a summary line on rank 0
 * to `out`, and verifies the rows of the last call of every timed run. 0 or an agreed ERR_*. */
int store_bench_run(const store_bench_opts *o, MPI_Comm comm, FILE *out);

#endif
