#!/usr/bin/env bash
# Per-op check and time of the CPU engine (llm.c's dev/cuda pattern): for every op (Conv3d k3
# forward / input gradient / weight gradient, ConvTranspose3d, 1x1 conv, GroupNorm, ReLU,
# MaxPool, the loss, Adam / SGD / RMSprop) the plain reference (src/nn/ref.c) and the fast path
# run on the same random input, are compared with the stated tolerance (|err| <= atol + rtol
# |ref|, tests/test.h's rule) and timed; one table. The same program, without --time, is the
# nn test area's check (tests/nn/test_ops.c).
# Usage: bench/nn/ops.sh [D [C [REPS]]]   an N=1 D^3 volume (D a multiple of 4, default 16) of
#   C input channels (default 32; 1.5 C output channels), the fast path's best of REPS (5)
# Exit status 1 when an op is outside its tolerance. Threads: OMP_NUM_THREADS (default: all).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
make -s -j2 "$BUILD/tests/nn/test_ops" >/dev/null || exit 1
exec "$BUILD/tests/nn/test_ops" --time "${1:-16}" "${2:-32}" "${3:-5}"
