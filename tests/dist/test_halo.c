/* test_halo: the process grid and the halo exchange (src/parallel/grid.h), under mpirun.
 *
 *   test_halo           every layout the world size allows (all three dims, dim orders), odd
 *                       channel counts, batch 2: the grid's shard of each rank equals the
 *                       dataset's (dataset_rank_shard), the sub-communicators have the right
 *                       sizes and ranks, and after halo_start/halo_finish every padded voxel
 *                       (faces, edges, corners) holds the neighbour's value or 0 outside the
 *                       volume.
 *   test_halo --fault   run with SCAFFOLD_FAULT_HALO=1:2: rank 1 records a failure in its 2nd
 *                       exchange, still completes every exchange (the halos stay right, nobody
 *                       hangs), and the agreed error names it on every rank. */
#include "core/err.h"
#include "dataset/dataset.h"
#include "parallel/grid.h"
#include "mpi_test.h"

#include <string.h>

static dist_world W;

static float value(int n, int z, int y, int x, int c) {
    return (float)(1 + n * 100000 + z * 10007 + y * 331 + x * 17 + c);
}

/* One exchange on a (N, ext+2, C) padded block; returns the number of wrong voxels. */
static long exchange_and_check(par_spatial *sp, const par_grid *g, int N, int C,
                               const int full[3]) {
    int ext[3], d0[3];
    for (int a = 0; a < 3; a++) {
        ext[a] = full[a] / g->counts[a];
        d0[a] = g->idx[a] * ext[a];
    }
    const int Dp = ext[0] + 2, Hp = ext[1] + 2, Wp = ext[2] + 2;
    size_t n = (size_t)N * Dp * Hp * Wp * C;
    float *P = calloc(n, sizeof *P);
    for (int b = 0; b < N; b++)
        for (int z = 1; z <= ext[0]; z++)
            for (int y = 1; y <= ext[1]; y++)
                for (int x = 1; x <= ext[2]; x++)
                    for (int c = 0; c < C; c++)
                        P[((((size_t)b * Dp + z) * Hp + y) * Wp + x) * C + c] =
                            value(b, d0[0] + z - 1, d0[1] + y - 1, d0[2] + x - 1, c);
    sp->ops.halo_start(sp->ops.ctx, P, N, ext[0], ext[1], ext[2], C);
    sp->ops.halo_finish(sp->ops.ctx, P, N, ext[0], ext[1], ext[2], C);
    long bad = 0;
    for (int b = 0; b < N; b++)
        for (int z = 0; z < Dp; z++)
            for (int y = 0; y < Hp; y++)
                for (int x = 0; x < Wp; x++) {
                    const int gz = d0[0] + z - 1, gy = d0[1] + y - 1, gx = d0[2] + x - 1;
                    const int inside = gz >= 0 && gz < full[0] && gy >= 0 && gy < full[1] &&
                                       gx >= 0 && gx < full[2];
                    for (int c = 0; c < C; c++) {
                        float want = inside ? value(b, gz, gy, gx, c) : 0.0f;
                        if (P[((((size_t)b * Dp + z) * Hp + y) * Wp + x) * C + c] != want)
                            bad++;
                    }
                }
    free(P);
    return bad;
}

typedef struct layout {
    int n, dims[3], counts[3];
} layout;

static void test_layout(const layout *L) {
    int axes[3];
    for (int i = 0; i < L->n; i++)
        axes[i] = L->dims[i] - 2;
    par_grid g;
    if (par_grid_create(&g, &W, L->n, axes, L->counts)) {
        CHECK(0, "grid: %s", err_msg());
        return;
    }
    char name[96];
    snprintf(name, sizeof name, "counts [%d,%d,%d] dims [%d,%d,%d]", L->counts[0], L->counts[1],
             L->counts[2], L->dims[0], L->dims[1], L->dims[2]);
    ds_layout dl = {L->n, {L->dims[0], L->dims[1], L->dims[2]},
                    {L->counts[0], L->counts[1], L->counts[2]}};
    int idx[3];
    dataset_rank_shard(&dl, W.rank, idx);
    CHECK(!memcmp(idx, g.idx, sizeof idx), "%s: rank %d grid shard (%d,%d,%d), dataset (%d,%d,%d)",
          name, W.rank, g.idx[0], g.idx[1], g.idx[2], idx[0], idx[1], idx[2]);
    CHECK(g.spatial.size == g.T && g.spatial.rank == g.shard, "%s: spatial comm %d/%d", name,
          g.spatial.rank, g.spatial.size);
    CHECK(g.replicas.size == g.nrep && g.replicas.rank == g.replica, "%s: replica comm %d/%d",
          name, g.replicas.rank, g.replicas.size);
    par_spatial sp;
    par_spatial_init(&sp, &g, 1);
    /* Unequal extents per axis show a transposed face; odd channel counts a packing slip. */
    const int full[3] = {8, 12, 4};
    for (int C = 1; C <= 5; C += 2) {
        long bad = exchange_and_check(&sp, &g, 2, C, full);
        CHECK(bad == 0, "%s, C=%d: %ld wrong voxels on rank %d", name, C, bad, W.rank);
    }
    /* A sum over the spatial group. */
    double v[2] = {1, (double)g.shard};
    sp.ops.sum(sp.ops.ctx, v, 2);
    CHECK(v[0] == g.T && v[1] == g.T * (g.T - 1) / 2.0, "%s: spatial sum %g %g", name, v[0], v[1]);
    par_grid_free(&g);
}

static void test_fault(void) {
    static const int axes[1] = {0}, counts[1] = {2};
    par_grid g;
    if (par_grid_create(&g, &W, 1, axes, counts)) {
        CHECK(0, "grid: %s", err_msg());
        return;
    }
    par_spatial sp;
    par_spatial_init(&sp, &g, 1);
    const int full[3] = {8, 4, 4};
    long bad = 0;
    for (int k = 0; k < 3; k++)
        bad += exchange_and_check(&sp, &g, 1, 3, full);
    CHECK(bad == 0, "exchanges after the failure: %ld wrong voxels", bad);
    int rc = par_spatial_status(&sp);
    CHECK((rc != 0) == (W.rank == 1), "rank %d status %d", W.rank, rc);
    rc = dist_agree(&W, rc);
    CHECK(rc == ERR_IO && strstr(err_msg(), "injected failure in halo exchange 2 on rank 1"),
          "agreed: %d %s", rc, err_msg());
    CHECK(par_spatial_status(&sp) == 0, "status cleared");
    par_grid_free(&g);
}

int main(int argc, char **argv) {
    if (dist_init(&W, &argc, &argv))
        return 1;
    if (argc > 1 && !strcmp(argv[1], "--fault")) {
        test_fault();
    } else {
        static const layout all[] = {
            {1, {2, 3, 4}, {1, 1, 1}}, {3, {2, 3, 4}, {2, 1, 1}}, {3, {2, 3, 4}, {1, 2, 1}},
            {3, {2, 3, 4}, {1, 1, 2}}, {2, {4, 2, 0}, {2, 1, 0}}, {3, {2, 3, 4}, {2, 2, 1}},
            {3, {2, 3, 4}, {1, 2, 2}}, {3, {4, 3, 2}, {2, 2, 1}}, {3, {2, 3, 4}, {4, 1, 1}},
            {3, {2, 3, 4}, {2, 2, 2}}, {3, {3, 4, 2}, {2, 2, 2}}, {2, {3, 2, 0}, {2, 4, 0}},
        };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            int T = 1;
            for (int k = 0; k < all[i].n; k++)
                T *= all[i].counts[k];
            if (W.size % T == 0)
                test_layout(&all[i]);
        }
    }
    return mpi_test_report(&W);
}
