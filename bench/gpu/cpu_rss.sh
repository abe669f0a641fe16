#!/usr/bin/env bash
# bench/gpu/cpu_rss.sh [REPS]: the memory a CPU run of the CUDA build costs, against the plain
# build (the baseline) measured in the same run: peak RSS (/usr/bin/time %M) of
# `scaffold --version` and of a one-epoch `scaffold benchmark --device cpu` on the tiny test
# configuration, median of REPS runs (default 3) each, and the ratio CUDA/plain. Needs both
# builds (make -j && make -j CUDA=1); no GPU. Since cuDNN, cuBLAS and NCCL are opened on first
# use (src/nn/cuda/dl.c) the ratio should be close to 1 (linked, cuBLAS alone added ~200 MiB).
# Output: RESULT lines.
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
REPS=${1:-3}
PLAIN=${PLAIN:-build}
CUDA=${CUDA_BUILD:-build-cuda}
for b in "$PLAIN" "$CUDA"; do
    [ -x "$b/scaffold" ] || { echo "cpu_rss: $b/scaffold missing (make -j; make -j CUDA=1)" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "cpu_rss: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
d=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-rss.XXXXXX")
trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1
cfg=(-c "$root/configs/benchmark_default.yml" -c "$root/tests/train/tiny.yml")
median_kb() { # median_kb BUILD ARGS...: median peak RSS in kB of REPS runs
    local b=$1 r out
    shift
    for ((r = 0; r < REPS; r++)); do
        out=$(cd "$d" && /usr/bin/time -f 'RSS %M' "$root/$b/scaffold" "$@" --base-run-dir "runs$r" 2>&1 >/dev/null | grep '^RSS' | tail -1)
        echo "${out#RSS }"
    done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
median_ver() {
    local b=$1 r
    for ((r = 0; r < REPS; r++)); do
        /usr/bin/time -f 'RSS %M' "$root/$b/scaffold" --version 2>&1 >/dev/null | grep '^RSS' | sed 's/RSS //'
    done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
p=$(median_ver "$PLAIN") c=$(median_ver "$CUDA")
awk -v p="$p" -v c="$c" 'BEGIN {printf "RESULT scaffold --version peak RSS: plain %.1f MiB, CUDA build %.1f MiB, CUDA/plain %.2f\n", p / 1024, c / 1024, c / p}'
p=$(median_kb "$PLAIN" benchmark "${cfg[@]}" --epochs 1 --device cpu)
c=$(median_kb "$CUDA" benchmark "${cfg[@]}" --epochs 1 --device cpu)
awk -v p="$p" -v c="$c" 'BEGIN {printf "RESULT benchmark --device cpu (1 epoch, tiny) peak RSS: plain %.1f MiB, CUDA build %.1f MiB, CUDA/plain %.2f\n", p / 1024, c / 1024, c / p}'
