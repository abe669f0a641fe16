/* bench_chaos: single-core chaos-game throughput (points/s) of scaffold's ifs_chaos on a fixed
 * accepted class, median of repeats. Prints one line "chaos_c_points_per_s <value>".
 * usage: bench_chaos POINTS REPEATS */
#include "core/rng.h"
#include "fractal/ifs.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    /* The first accepted class of seed 42 at 1M points. */
    ifs_params ip;
    double *pts = malloc(n * 3 * sizeof *pts);
    for (uint64_t a = 0;; a++) {
        ifs_propose(42, a, &ip);
        int ok = ifs_chaos(&ip, 42, RNG_CLASS_CHAOS, a, 0, pts, n);
        if (ifs_accept(pts, n, ok, 1.0, 0.15, NULL))
            break;
    }
    double t[64];
    if (reps > 64)
        reps = 64;
    double sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = time_now();
        ifs_chaos(&ip, 42, RNG_INSTANCE_CHAOS, 0, (uint64_t)r, pts, n);
        t[r] = time_now() - t0;
        sink += pts[3 * (n - 1)];
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    printf("chaos_c_points_per_s %.4g\n", (double)n / t[reps / 2]);
    fprintf(stderr, "(checksum %g)\n", sink);
    free(pts);
    return 0;
}
