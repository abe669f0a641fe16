"""The fp32 rounding error of Winograd's tile forms (docs/nn.md, "What was tried": F(4x4x4)):
one tile's transforms and point-wise products in fp32 (numpy einsum, fp32 accumulation)
against the direct 3x3x3 convolution in double, over K input channels, inputs ~ N(0, 1) and
weights ~ N(0, 1 / (27 K)) (outputs of order 1). F(4,3) on the points {0, +-a, +-b} (and
infinity) as src/nn/kern_wino16.h writes them: a = 1, b = 2 is fp32 Winograd's (kern_tmpl.h),
a = 3/2, b = 2/3 winograd-bf16's.
usage: python3 tools/wino_accuracy.py [TILES]   (numpy; Debian's python3-numpy will do)"""
import sys

import numpy as np


def f43(a, b):
    """B^T, G, A^T of F(4,3) on the points 0, +-a, +-b, infinity."""
    a2, b2 = a * a, b * b
    bt = [[a2 * b2, 0, -(a2 + b2), 0, 1, 0], [0, -a * b2, -b2, a, 1, 0],
          [0, a * b2, -b2, -a, 1, 0], [0, -a2 * b, -a2, b, 1, 0], [0, a2 * b, -a2, -b, 1, 0],
          [0, a2 * b2, 0, -(a2 + b2), 0, 1]]
    na, nb = 1 / (2 * a2 * (a2 - b2)), 1 / (2 * b2 * (b2 - a2))
    g = [[1 / (a2 * b2), 0, 0], [na, na * a, na * a2], [na, -na * a, na * a2],
         [nb, nb * b, nb * b2], [nb, -nb * b, nb * b2], [0, 0, 1]]
    at = [[1, 1, 1, 1, 1, 0], [0, a, -a, b, -b, 0], [0, a2, a2, b2, b2, 0],
          [0, a ** 3, -a ** 3, b ** 3, -b ** 3, 1]]
    return np.array(bt), np.array(g), np.array(at)


# F(2,3) (the depth of F(4x4x2))
F23 = (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
       np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], float),
       np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float))


def error(z, xy, k, tiles, rng):
    """Largest error over `tiles` tiles, divided by the largest output."""
    (btz, gz, atz), (bt, g, at) = z, xy
    f = np.float32
    nz, tz = btz.shape[0], atz.shape[0]
    worst = big = 0.0
    for _ in range(tiles):
        d = rng.standard_normal((k, nz, 6, 6)).astype(f)
        w = (rng.standard_normal((k, 3, 3, 3)) / np.sqrt(27 * k)).astype(f)
        ref = np.zeros((tz, 4, 4))
        for i in range(tz):
            for j in range(4):
                for m in range(4):
                    ref[i, j, m] = np.sum(d[:, i:i + 3, j:j + 3, m:m + 3].astype(float) * w)
        v = np.einsum('az,by,cx,kzyx->kabc', btz.astype(f), bt.astype(f), bt.astype(f), d,
                      dtype=f)
        u = np.einsum('az,by,cx,kzyx->kabc', gz.astype(f), g.astype(f), g.astype(f), w, dtype=f)
        mm = np.einsum('kabc,kabc->abc', v, u, dtype=f)
        y = np.einsum('za,yb,xc,abc->zyx', atz.astype(f), at.astype(f), at.astype(f), mm,
                      dtype=f)
        worst = max(worst, float(np.abs(y - ref).max()))
        big = max(big, float(np.abs(ref).max()))
    return worst / big


def main():
    tiles = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    p12, p32 = f43(1, 2), f43(1.5, 2 / 3)
    for k in (64, 256):
        for name, z, xy in (("F(4x4x2), points 0, +-1, +-2", F23, p12),
                            ("F(4x4x4), points 0, +-1, +-2", p12, p12),
                            ("F(4x4x4), points 0, +-3/2, +-2/3", p32, p32)):
            e = error(z, xy, k, tiles, np.random.default_rng(0))
            print(f"{k:4d} channels  {name:34s} largest error / largest value {e:.2e}")


if __name__ == "__main__":
    main()
