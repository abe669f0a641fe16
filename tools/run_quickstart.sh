#!/usr/bin/env bash
# `make run`: the main job on the small quickstart configuration, on NP ranks (default 1):
# the fractal library if missing, the dataset if missing, then the benchmark to the target Dice.
set -eu
cd "$(dirname "$0")/.."
NP=${NP:-1}
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
CFG="-c configs/benchmark_default.yml -c configs/quickstart.yml"
mpirun --oversubscribe -n "$NP" "$BUILD/scaffold" benchmark $CFG
