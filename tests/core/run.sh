#!/usr/bin/env bash
# Core unit tests (err, rng, npy, fsutil) plus .npy interoperability with numpy.
cd "$(dirname "$0")/../.." && source tests/lib.sh
t_cbin "$BUILD/tests/core/test_core"
t_cbin "$BUILD/tests/core/test_config"
t_cbin "$BUILD/tests/core/test_opt"
t_cbin "$BUILD/tests/core/test_fault"
d=$(t_tmpdir)
"$PYTHON" tests/core/npy_interop.py "$d" "$BUILD/tests/core/test_core" && t_ok "npy interop with numpy" || t_fail "npy interop with numpy"
rm -rf "$d"
t_report
