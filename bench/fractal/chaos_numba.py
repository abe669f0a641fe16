"""Upstream-style chaos game (ScaFFold's generate_fractal_points): numba @njit, numba's own
MT19937 via np.random.rand, float64 points, origin kept, runaway flag. Prints points/s (median
of repeats) for the same point count as bench_chaos. usage: chaos_numba.py POINTS REPEATS"""
import sys
import time

import numpy as np
from numba import njit


@njit(cache=False)
def seed_numba(s):
    np.random.seed(s)


@njit(cache=False)
def generate_fractal_points(params, numpoints):
    points = np.zeros((numpoints, 3), dtype=np.float64)
    runaway_check_pass = True
    if numpoints <= 0:
        return points, runaway_check_pass
    p0 = params[0, 12]
    for n in range(1, numpoints):
        r = np.random.rand()
        t = 0 if r < p0 else 1
        x, y, z = points[n - 1, 0], points[n - 1, 1], points[n - 1, 2]
        a = params[t]
        nx = a[0] * x + a[1] * y + a[2] * z + a[9]
        ny = a[3] * x + a[4] * y + a[5] * z + a[10]
        nz = a[6] * x + a[7] * y + a[8] * z + a[11]
        points[n, 0] = nx
        points[n, 1] = ny
        points[n, 2] = nz
        if abs(nx) > 1e10 or abs(ny) > 1e10 or abs(nz) > 1e10:
            runaway_check_pass = False
    return points, runaway_check_pass


def main():
    n = int(sys.argv[1])
    reps = int(sys.argv[2])
    rng = np.random.default_rng(42)
    params = rng.uniform(-1, 1, (2, 13))
    # Contractive maps so the cloud stays bounded, like an accepted class.
    params[:, :9] *= 0.5
    params[0, 12] = 0.5
    seed_numba(1)
    generate_fractal_points(params, 1000)  # compile outside the timing
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        generate_fractal_points(params, n)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"chaos_numba_points_per_s {n / times[len(times) // 2]:.4g}")


if __name__ == "__main__":
    main()
