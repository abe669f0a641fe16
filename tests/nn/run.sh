#!/usr/bin/env bash
# Training-engine tests: layers and the whole U-Net against PyTorch fixtures, finite
# differences, optimized-vs-naive kernels, checkpoints, predict; ASan/UBSan on the layer tests.
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
FIX=tests/nn/fixtures
t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
[ -x "$BUILD/tests/nn/test_unet" ] && t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
t_report
