/* grid: the process grid, its sub-communicators, and the halo/sum hooks over the spatial group
 * (see grid.h). */
#include "parallel/grid.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int split(const dist_world *w, int color, int key, dist_world *out) {
    out->thread_level = w->thread_level;
    if (MPI_Comm_split(w->comm, color, key, &out->comm) != MPI_SUCCESS)
        return err_set(ERR_MPI, "MPI_Comm_split failed");
    MPI_Comm_rank(out->comm, &out->rank);
    MPI_Comm_size(out->comm, &out->size);
    return 0;
}

/* Shard id of per-axis chunk indices: row-major over the layout's pairs, the last fastest. */
static int shard_id(int n, const int axes[], const int counts[], const int idx[3]) {
    int id = 0;
    for (int i = 0; i < n; i++)
        id = id * counts[i] + idx[axes[i]];
    return id;
}

int par_grid_check(int world_size, int T) {
    if (world_size % T == 0)
        return 0;
    return err_set(ERR_CONFIG,
                   "world size %d is not divisible by the number of spatial shards %d "
                   "(dc_num_shards); run on a multiple of %d ranks or change dc_num_shards",
                   world_size, T, T);
}

int par_grid_create(par_grid *g, const dist_world *w, int n, const int axes[],
                     const int counts[]) {
    memset(g, 0, sizeof *g);
    g->world = w;
    g->spatial.comm = g->replicas.comm = MPI_COMM_NULL;
    int T = 1, rc = 0;
    for (int a = 0; a < 3; a++) {
        g->counts[a] = 1;
        g->nbr[a][0] = g->nbr[a][1] = -1;
    }
    for (int i = 0; i < n; i++) {
        T *= counts[i];
        g->counts[axes[i]] = counts[i];
    }
    rc = dist_agree(w, par_grid_check(w->size, T));
    if (rc)
        return rc;
    g->T = T;
    g->nrep = w->size / T;
    g->replica = w->rank / T;
    g->shard = w->rank % T;
    for (int i = n - 1, r = g->shard; i >= 0; i--) {
        g->idx[axes[i]] = r % counts[i];
        r /= counts[i];
    }
    for (int a = 0; a < 3; a++)
        for (int side = 0; side < 2; side++) {
            int j[3] = {g->idx[0], g->idx[1], g->idx[2]};
            j[a] += side ? 1 : -1;
            if (j[a] >= 0 && j[a] < g->counts[a])
                g->nbr[a][side] = shard_id(n, axes, counts, j);
        }
    rc = split(w, g->replica, g->shard, &g->spatial);
    if (rc == 0)
        rc = split(w, g->shard, g->replica, &g->replicas);
    rc = dist_agree(w, rc);
    if (rc)
        par_grid_free(g);
    return rc;
}

void par_grid_free(par_grid *g) {
    if (!g || !g->world) /* never created (zeroed) */
        return;
    if (g->spatial.comm != MPI_COMM_NULL)
        MPI_Comm_free(&g->spatial.comm);
    if (g->replicas.comm != MPI_COMM_NULL)
        MPI_Comm_free(&g->replicas.comm);
    g->spatial.comm = g->replicas.comm = MPI_COMM_NULL;
}

/* ---- halo exchange -------------------------------------------------------------------------- */

/* Fault point HALO (SCAFFOLD_FAULT_HALO=R:K): rank R records a failure at its K-th exchange. */
static void fault_halo(par_spatial *s) {
    if (s->rc == 0 && fault_hit(FAULT_HALO, s->g->world->rank)) {
        s->rc = err_set(ERR_IO, "injected failure in halo exchange %ld on rank %d",
                        s->exchanges, s->g->world->rank);
        snprintf(s->msg, sizeof s->msg, "%s", err_msg());
    }
}

/* Posts the exchange along axis a of the padded buffer P (N, D+2, H+2, W+2, C): this block's
 * first and last planes along a go to the neighbours below and above, theirs land in P's border
 * planes 0 and ext+1. Faces span the full padded extent of the other axes (earlier halos
 * included). Tags: 2a for a face sent downwards, 2a+1 upwards. */
static void halo_post(par_spatial *s, int a, float *P, int N, int D, int H, int W, int C) {
    const par_grid *g = s->g;
    const int ext = a == 0 ? D : a == 1 ? H : W;
    int sizes[5] = {N, D + 2, H + 2, W + 2, C}, sub[5] = {N, D + 2, H + 2, W + 2, C};
    sub[1 + a] = 1;
    long long face = (long long)sub[0] * sub[1] * sub[2] * sub[3] * sub[4];
    s->nreq = 0;
    s->axis = a;
    for (int side = 0; side < 2; side++) {
        const int nb = g->nbr[a][side];
        if (nb < 0)
            continue;
        int st_recv[5] = {0}, st_send[5] = {0};
        st_recv[1 + a] = side ? ext + 1 : 0;
        st_send[1 + a] = side ? ext : 1;
        MPI_Datatype *tr = &s->type[s->nreq], *ts = &s->type[s->nreq + 1];
        MPI_Type_create_subarray(5, sizes, sub, st_recv, MPI_ORDER_C, MPI_FLOAT, tr);
        MPI_Type_create_subarray(5, sizes, sub, st_send, MPI_ORDER_C, MPI_FLOAT, ts);
        MPI_Type_commit(tr);
        MPI_Type_commit(ts);
        MPI_Irecv(P, 1, *tr, nb, 2 * a + (side ? 0 : 1), g->spatial.comm, &s->req[s->nreq]);
        MPI_Isend(P, 1, *ts, nb, 2 * a + side, g->spatial.comm, &s->req[s->nreq + 1]);
        s->nreq += 2;
        s->halo_bytes += face * (long long)sizeof(float);
    }
}

static void halo_wait(par_spatial *s) {
    if (!s->nreq)
        return;
    double t0 = time_now();
    prof_begin(PROF_HALO_WAIT);
    prof_begin(PROF_MPI_WAITALL);
    MPI_Waitall(s->nreq, s->req, MPI_STATUSES_IGNORE);
    prof_end(PROF_MPI_WAITALL);
    prof_end(PROF_HALO_WAIT);
    s->halo_wait_s += time_now() - t0;
    for (int i = 0; i < s->nreq; i++)
        MPI_Type_free(&s->type[i]);
    s->nreq = 0;
}

static void halo_start(void *ctx, float *P, int N, int D, int H, int W, int C) {
    par_spatial *s = ctx;
    s->exchanges++;
    fault_halo(s);
    s->axis = 3;
    for (int a = 0; a < 3; a++)
        if (s->g->counts[a] > 1) {
            halo_post(s, a, P, N, D, H, W, C);
            break;
        }
}

static void halo_finish(void *ctx, float *P, int N, int D, int H, int W, int C) {
    par_spatial *s = ctx;
    halo_wait(s);
    for (int a = s->axis + 1; a < 3; a++)
        if (s->g->counts[a] > 1) {
            halo_post(s, a, P, N, D, H, W, C);
            halo_wait(s);
        }
}

static void spatial_sum(void *ctx, double *buf, int n) {
    par_spatial *s = ctx;
    double t0 = time_now();
    prof_begin(PROF_MPI_ALLREDUCE);
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, s->g->spatial.comm);
    prof_end(PROF_MPI_ALLREDUCE);
    s->sum_s += time_now() - t0;
    s->sum_bytes += (long long)n * (long long)sizeof(double);
    s->sums++;
}

void par_spatial_init(par_spatial *s, const par_grid *g, int gn_global) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->ops.ctx = s;
    s->ops.gn_global = gn_global;
    for (int a = 0; a < 3; a++)
        for (int side = 0; side < 2; side++)
            s->ops.recv[a][side] = g->nbr[a][side] >= 0;
    s->ops.halo_start = halo_start;
    s->ops.halo_finish = halo_finish;
    s->ops.sum = spatial_sum;
}

int par_spatial_status(par_spatial *s) {
    int rc = s->rc;
    if (rc)
        err_set(rc, "%s", s->msg);
    s->rc = 0;
    return rc;
}
