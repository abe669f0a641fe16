/* test_collectives: the MPI base's small collectives that the fractal library and the NCCL
 * bootstrap use (src/mpi/dist.h), and the one shard-divisibility check (par_grid_check), under
 * mpirun with any world size.
 *   dist_world_of       a communicator's rank and size, as dist_init's world has them
 *   dist_gather_ints    rank r's ints at all[r * n] on the root
 *   dist_gatherv_doubles rank r's r + 1 doubles one after the other on the root, in rank order
 *   dist_max_ints       the element-wise maximum of flags, 1 rank included
 *   par_grid_check      0 for a divisible world, else the dc_num_shards message */
#include "core/err.h"
#include "mpi_test.h"
#include "parallel/grid.h"

#include <stdlib.h>
#include <string.h>

static dist_world W;

static void test_world_of(void) {
    dist_world v;
    dist_world_of(&v, W.comm);
    CHECK(v.rank == W.rank && v.size == W.size && v.comm == W.comm,
          "dist_world_of: rank %d of %d (dist_init: %d of %d)", v.rank, v.size, W.rank, W.size);
    CHECK(v.launcher.name[0] == 0, "dist_world_of: no launcher");
}

static void test_gathers(void) {
    const int root = W.size - 1, n = W.rank + 1;
    int mine[2] = {W.rank, -W.rank}, *all = calloc((size_t)W.size * 2, sizeof *all);
    dist_gather_ints(&W, mine, 2, all, root);
    int bad = 0;
    for (int r = 0; W.rank == root && r < W.size; r++)
        bad += all[2 * r] != r || all[2 * r + 1] != -r;
    CHECK(bad == 0, "dist_gather_ints: %d wrong on the root", bad);
    double *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < n; i++)
        x[i] = W.rank * 1000.0 + i;
    int *counts = calloc((size_t)W.size, sizeof *counts);
    int *displs = calloc((size_t)W.size, sizeof *displs);
    int total = 0;
    for (int r = 0; r < W.size; r++) {
        counts[r] = r + 1;
        displs[r] = total;
        total += r + 1;
    }
    double *got = calloc((size_t)total, sizeof *got);
    dist_gatherv_doubles(&W, x, n, got, counts, displs, root);
    bad = 0;
    for (int r = 0, k = 0; W.rank == root && r < W.size; r++)
        for (int i = 0; i <= r; i++)
            bad += got[k++] != r * 1000.0 + i;
    CHECK(bad == 0, "dist_gatherv_doubles: %d of %d wrong on the root", bad, total);
    free(all), free(x), free(counts), free(displs), free(got);
}

static void test_max_ints(void) {
    int f[3] = {W.rank == W.size - 1, 0, W.rank};
    dist_max_ints(&W, f, 3);
    CHECK(f[0] == 1 && f[1] == 0 && f[2] == W.size - 1, "dist_max_ints: %d %d %d", f[0], f[1],
          f[2]);
}

static void test_grid_check(void) {
    CHECK(par_grid_check(4, 2) == 0 && par_grid_check(3, 1) == 0, "divisible worlds accepted");
    int rc = par_grid_check(3, 2);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "world size 3 is not divisible by the number of "
                                                "spatial shards 2 (dc_num_shards); run on a "
                                                "multiple of 2 ranks"),
          "par_grid_check(3, 2): %d %s", rc, err_msg());
    err_clear();
}

int main(int argc, char **argv) {
    if (dist_init(&W, &argc, &argv))
        return 1;
    test_world_of();
    test_gathers();
    test_max_ints();
    test_grid_check();
    return mpi_test_report(&W);
}
