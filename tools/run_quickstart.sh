#!/usr/bin/env bash
# `make run`: the main job on the small quickstart configuration, on NP ranks (default 1):
# the fractal library if missing, the dataset if missing, then the benchmark to the target Dice.
set -eu
cd "$(dirname "$0")/.."
NP=${NP:-1}
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
CFG="-c configs/benchmark_default.yml -c configs/quickstart.yml"
# Open MPI binds each rank to one core when there are at most 2 ranks; the OpenMP threads of a
# rank would then share that core (the quickstart took 27 s instead of 16 s on 2 cores). The
# ranks split the node's cores instead: no binding, nproc/NP threads each unless set.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / NP > 0 ? $(nproc) / NP : 1 ))}
mpirun --bind-to none --oversubscribe -n "$NP" "$BUILD/scaffold" benchmark $CFG
