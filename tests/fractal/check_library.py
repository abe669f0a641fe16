"""Independent NumPy check of a scaffold fractal library.

Re-implements scaffold's counter-based RNG (SplitMix64 evaluated at a keyed counter), the class
proposal, the chaos game and the acceptance rule from their definitions, re-runs the class
search and checks that the class CSVs are exactly the first n_categories accepted proposals, that
each accepted class passes the variance rule, that every instance .npy loads with numpy with the
right shape/dtype, and that sampled instances equal an independent chaos game.

usage: check_library.py FRACT_BASE_DIR SEED VARIANCE_THRESHOLD PROBLEM_SCALE N_CATEGORIES
"""
import os
import sys

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
RNG_CLASS_PARAMS, RNG_CLASS_CHAOS, RNG_INSTANCE_CHAOS = 1, 2, 3


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def stream_key(seed, purpose, a, b):
    k = mix64(seed ^ 0x5CAFF01D)
    k = mix64(k ^ ((purpose * GOLDEN) & M64))
    k = mix64(k ^ mix64((a + 0x632BE59BD9B4E019) & M64))
    k = mix64(k ^ mix64((b + 0x8CB92BA72F3D8DD7) & M64))
    return k


def uniforms(key, count):
    """Draws 1..count of the stream as doubles in [0,1), vectorised with uint64 wraparound."""
    ctr = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + ctr * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def propose(seed, attempt):
    u = uniforms(stream_key(seed, RNG_CLASS_PARAMS, attempt, 0), 26)
    p = (2.0 * u - 1.0).reshape(2, 13)
    # |det| by cofactor expansion along the first row (the documented formula).
    def det3(m):
        return (m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6])
                + m[2] * (m[3] * m[7] - m[4] * m[6]))
    d = [abs(det3(p[t])) for t in range(2)]
    s = d[0] + d[1]
    p[0, 12], p[1, 12] = (d[0] / s, d[1] / s) if s > 0 else (0.5, 0.5)
    return p


def chaos(p, key, n):
    u = uniforms(key, n - 1)
    pts = np.zeros((n, 3))
    x = y = z = 0.0
    ok = True
    rows = [list(map(float, p[0])), list(map(float, p[1]))]
    p0 = rows[0][12]
    for i in range(1, n):
        m = rows[0] if u[i - 1] < p0 else rows[1]
        # The documented evaluation order (products paired, then summed), in IEEE double.
        x, y, z = ((m[0] * x + m[1] * y) + (m[2] * z + m[9]),
                   (m[3] * x + m[4] * y) + (m[5] * z + m[10]),
                   (m[6] * x + m[7] * y) + (m[8] * z + m[11]))
        pts[i] = (x, y, z)
        if abs(x) > 1e10 or abs(y) > 1e10 or abs(z) > 1e10:
            ok = False
    return pts, ok


def accepted(pts, ok, vt, normalize=1.0):
    if not ok or not np.all(np.isfinite(pts)):
        return False, None
    rng_ = pts.max(axis=0) - pts.min(axis=0)
    if not np.all(np.isfinite(rng_)) or not np.all(rng_ > 0):
        return False, None
    norm = (pts - pts.mean(axis=0)) * (2 * normalize / rng_)
    var = np.var(norm, axis=0)
    return bool(np.all(var > vt)), var


def weights(i):
    f = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    w = np.ones(12)
    if i >= 1:
        w[(i - 1) // 12] = f[(i - 1) % 12]
    return w


def main():
    base, seed, vt, scale, ncat = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    n = int((2**scale) ** 3 / 256)
    root = os.path.join(base, f"var{vt}", f"seed{seed}")
    cdir = os.path.join(root, "3DIFS_param")
    files = sorted(f for f in os.listdir(cdir) if f.endswith(".csv"))
    assert len(files) == ncat, f"{len(files)} class files, expected {ncat}"
    classes = [np.loadtxt(os.path.join(cdir, f), delimiter=",") for f in files]
    for f, c in zip(files, classes):
        assert c.shape == (2, 13), f"{f}: shape {c.shape}"
    # Re-run the search independently: the files must be the first accepted proposals.
    found, attempt = [], 0
    while len(found) < ncat:
        p = propose(seed, attempt)
        pts, ok = chaos(p, stream_key(seed, RNG_CLASS_CHAOS, attempt, 0), n)
        acc, var = accepted(pts, ok, vt)
        if acc:
            assert np.all(var > vt)
            found.append(p)
        attempt += 1
        assert attempt < 100000, "search did not converge"
    for i, (got, want) in enumerate(zip(classes, found)):
        assert np.array_equal(got, want), f"class {i} differs from the independent search"
    print(f"classes: {ncat} match the independent search ({attempt} attempts), variance rule holds")
    idir = os.path.join(root, "instances", f"np{n}")
    count = 0
    for c in range(ncat):
        for i in range(145):
            a = np.load(os.path.join(idir, f"{c:06d}", f"{c:06d}_{i:04d}.npy"))
            assert a.dtype == np.float32 and a.shape == (n, 3), (c, i, a.dtype, a.shape)
            count += 1
    # Independent regeneration of a sample of instances (full weights path).
    for c, i in [(0, 0), (0, 1), (ncat - 1, 77), (ncat - 1, 144)]:
        p = classes[c].copy()
        p[:, :12] *= weights(i)
        pts, ok = chaos(p, stream_key(seed, RNG_INSTANCE_CHAOS, c, i), n)
        if ok and np.all(np.isfinite(pts)):
            got = np.load(os.path.join(idir, f"{c:06d}", f"{c:06d}_{i:04d}.npy"))
            assert np.array_equal(got, pts.astype(np.float32)), f"instance {c},{i} differs"
    print(f"instances: {count} load with numpy as float32 ({n}, 3); sampled ones match")


if __name__ == "__main__":
    main()
