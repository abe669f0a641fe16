/* grid (src/parallel, the layer above nn): the process grid of spatial parallelism (DistConv,
 * reference §10.2) and the MPI side of the model's sharding hooks (nn_shard, nn/layers.h).
 *
 * world = replicas x T ranks with T = prod(dc_num_shards); consecutive ranks form one spatial
 * group (one replica): rank r holds shard r % T of replica r / T. The shard id is the row-major
 * index of the per-axis chunk indices over the layout's (axis, count) pairs in the layout's
 * order, the last pair fastest: the dataset's shard ids (dataset_rank_shard), so each rank reads
 * exactly its own shard files. Two sub-communicators:
 *   spatial   the T ranks of this replica, rank = shard id (halos, GroupNorm, loss sums);
 *   replicas  the ranks holding the same shard in every replica, rank = replica index
 *             (epoch statistics, the in-memory store of this shard).
 *
 * par_spatial implements nn_shard over the spatial communicator: halo exchange of one voxel
 * per sharded axis (non-blocking sends and receives of MPI subarray faces straight from and
 * into the padded buffer; the first sharded axis overlaps the interior rows, later axes follow
 * in order so that they carry the earlier halos, corners included), and in-place sums.
 * A failure on one rank inside an exchange (fault point HALO, SCAFFOLD_FAULT_HALO=R:K, injects
 * one at rank R's K-th exchange) does not stop that rank from completing every exchange and sum of the step,
 * so no neighbour waits forever; the error is kept and returned by par_spatial_status(), which
 * the training step agrees on over the world. */
#ifndef SCAFFOLD_PARALLEL_GRID_H
#define SCAFFOLD_PARALLEL_GRID_H

#include "mpi/dist.h"
#include "nn/layers.h"

typedef struct par_grid {
    const dist_world *world;
    dist_world spatial;  /* this replica's T ranks (MPI_COMM_SELF copy when T = 1) */
    dist_world replicas; /* the ranks holding this shard (the world when T = 1) */
    int T, nrep, replica, shard;
    int counts[3];       /* shards per spatial axis (D, H, W) */
    int idx[3];          /* this rank's chunk index per axis */
    int nbr[3][2];       /* spatial rank of the neighbour below/above on each axis, -1 if none */
} par_grid;

/* Collective over w. n (axis, count) pairs in the layout's order, axis 0..2 = D, H, W (unique),
 * count >= 1. The world size must be a multiple of the product T: otherwise ERR_CONFIG naming
 * dc_num_shards, agreed. par_grid_free is NULL-safe and idempotent. */
/* Local: 0 when a world of world_size ranks splits into replicas of T spatial shards, else
 * ERR_CONFIG naming dc_num_shards and the fix (the caller agrees). */
int par_grid_check(int world_size, int T);

int par_grid_create(par_grid *g, const dist_world *w, int n, const int axes[],
                     const int counts[]);
void par_grid_free(par_grid *g);

typedef struct par_spatial {
    nn_shard ops;           /* give &ops to the model (nn_unet.shard) */
    const par_grid *g;
    MPI_Request req[4];
    MPI_Datatype type[4];
    int nreq, axis;         /* pending exchange: its requests and axis */
    int rc;                 /* first error of this step (sticky until par_spatial_status) */
    char msg[1024];         /* its message */
    long exchanges;         /* halo exchanges so far (fault injection counts them) */
    /* Accounting since init: seconds blocked waiting for halos and in sums, bytes sent. */
    double halo_wait_s, sum_s;
    long long halo_bytes, sum_bytes;
    long long sums;
} par_spatial;

/* The hooks over g's spatial communicator; gn_global selects whole-volume GroupNorm
 * statistics (group_norm_stats: global) or per-shard ones (shard, upstream). */
void par_spatial_init(par_spatial *s, const par_grid *g, int gn_global);

/* The first error recorded since the last call (0 if none), and clears it. Local: agree on it. */
int par_spatial_status(par_spatial *s);

#endif
