"""A Python loop of numpy.load over small .npy files (dftracer 2.2.0 test workload).
usage: numpy_loop.py DATA_DIR [EPOCHS]: writes 4 files of 256 float32 once, then loads
each of them EPOCHS times (default 3)."""
import os
import sys

import numpy as np

d = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
names = [os.path.join(d, "sample_%d.npy" % i) for i in range(4)]
for i, n in enumerate(names):
    if not os.path.exists(n):
        np.save(n, np.arange(256, dtype=np.float32) + i)
total = 0.0
for e in range(epochs):
    for n in names:
        total += float(np.load(n).sum())
print("sum", total)
