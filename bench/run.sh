#!/usr/bin/env bash
# bench/run.sh: runs every bench/<area>/run.sh (each prints its ratios against a named baseline).
# Select areas with SCAFFOLD_BENCH_AREAS="fractal nn".
set -u
cd "$(dirname "$0")/.."
areas=${SCAFFOLD_BENCH_AREAS:-$(ls -d bench/*/ | xargs -n1 basename)}
for area in $areas; do
    [ -f "bench/$area/run.sh" ] || continue
    echo "=== bench $area"
    bash "bench/$area/run.sh"
done
