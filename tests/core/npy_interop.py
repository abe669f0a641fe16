"""numpy <-> scaffold .npy interoperability: numpy loads what the C writer wrote, and writes
v1.0/v2.0/0-d/empty files for the C reader. Usage: npy_interop.py DIR TEST_BINARY."""
import subprocess
import sys

import numpy as np
from numpy.lib import format as npf

d, binary = sys.argv[1], sys.argv[2]
out = subprocess.run([binary, "--write", d], capture_output=True, text=True)
assert out.returncode == 0, out.stdout + out.stderr
a = np.load(f"{d}/c_f32.npy")
assert a.dtype == np.float32 and a.shape == (2, 3) and a[0, 0] == 1.5 and a[0, 1] == -2
m = np.load(f"{d}/c_u16.npy")
assert m.dtype == np.uint16 and m.tolist() == [0, 7, 65535]

np.save(f"{d}/np_v1.npy", np.arange(24, dtype=np.float64).reshape(2, 3, 4) + 0.25)
with open(f"{d}/np_v2.npy", "wb") as f:
    arr = np.array([[-1, 1, 2], [3, 9, 4]], dtype=np.int32)
    npf.write_array(f, arr, version=(2, 0))
np.save(f"{d}/np_0d.npy", np.float32(3.0))
np.save(f"{d}/np_empty.npy", np.zeros((0, 3), dtype=np.float32))
out = subprocess.run([binary, "--read", d], capture_output=True, text=True)
assert out.returncode == 0, out.stdout + out.stderr
print("npy interop ok")
