#!/usr/bin/env bash
# Fractal benchmarks:
#  1. chaos-game points/s on one core: scaffold (C) vs the upstream-style numba implementation
#     (baseline), same point count, alternated in one run; median of 5 rounds.
#  2. generate_fractals wall time at 1 vs 2 ranks (baseline: 1 rank), median of 3.
# numba comes from PyPI (pip install numba) for the PATH python3.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
NUMBA_PY=${NUMBA_PY:-python3}
N=${CHAOS_POINTS:-2000000}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if $NUMBA_PY -c "import numba" 2>/dev/null; then
    : > /tmp/chaos_c; : > /tmp/chaos_nb
    for i in 1 2 3 4 5; do
        "$BUILD/bench/fractal/bench_chaos" "$N" 5 2>/dev/null | awk '{print $2}' >> /tmp/chaos_c
        $NUMBA_PY bench/fractal/chaos_numba.py "$N" 5 | awk '{print $2}' >> /tmp/chaos_nb
    done
    c=$(median < /tmp/chaos_c); nb=$(median < /tmp/chaos_nb)
    echo "chaos game, $N points, 1 core: scaffold $(printf %.3g "$c") points/s, numba $(printf %.3g "$nb") points/s, ratio $(awk -v a="$c" -v b="$nb" 'BEGIN{printf "%.2f", a/b}')x"
else
    echo "chaos game: numba not installed for $NUMBA_PY (pip install numba); skipped the baseline"
fi

# Timed by the command's own summary (generation only, excluding mpirun's launch).
d=$(mktemp -d)
printf 'problem_scale: 8\nn_categories: 4\n' > "$d/cfg.yml"
: > "$d/t1"; : > "$d/t2"
for i in 1 2 3; do
    for n in 1 2; do
        rm -rf "$d/f"
        mpirun --oversubscribe -n $n "$BUILD/scaffold" generate_fractals -c "$d/cfg.yml" --fract-base-dir "$d/f" 2>/dev/null |
            sed -nE 's/.*\), ([0-9.]+) s, .* points\/s/\1/p' >> "$d/t$n"
    done
done
t1=$(median < "$d/t1"); t2=$(median < "$d/t2")
echo "generate_fractals (scale 8, 4 classes, 580 instances of 65536 points): 1 rank $(printf %.2f "$t1") s, 2 ranks $(printf %.2f "$t2") s, speedup $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.2f", a/b}')x"
rm -rf "$d"
