#!/usr/bin/env bash
# Dataset benchmarks: generation throughput vs a plain sequential write of the same bytes, and
# loader accelerator utilisation (AU) with 0/1/2/4 worker threads under an emulated compute delay.
# Knobs: BENCH_DATASET_SCALE (default 7), BENCH_DATASET_REPS (default 5), BENCH_DATASET_DIR.
cd "$(dirname "$0")/../.." && source tests/lib.sh
scale=${BENCH_DATASET_SCALE:-7}
reps=${BENCH_DATASET_REPS:-5}
d=${BENCH_DATASET_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/scaffold-bench.XXXXXX")}
trap 'rm -rf "$d"' EXIT
B="$BUILD/bench/dataset/bench_dataset"
# 3 classes x 12 instances -> 12 volumes (28 MiB each at scale 7).
cfg=$d/bench.yml
printf 'problem_scale: %s\nn_categories: 3\nn_instances_used_per_fractal: 12\nfract_base_dir: %s/f\ndataset_dir: %s/ds\n' \
    "$scale" "$d" "$d" > "$cfg"
"$SCAFFOLD" generate_fractals -c "$cfg" >/dev/null 2>&1 || { echo "generate_fractals failed"; exit 1; }
echo "--- generation, 1 rank"
"$B" gen "$reps" -c "$cfg"
echo "--- generation, 2 ranks"
$MPIRUN -n 2 "$B" gen "$reps" -c "$cfg"
# The loader runs on a larger set (30 volumes, 21 training samples per epoch) so that the pipeline
# fill (the first read of an epoch) weighs little; files are in the page cache.
sed -i 's/n_instances_used_per_fractal: 12/n_instances_used_per_fractal: 30/' "$cfg"
out=$("$SCAFFOLD" generate_dataset -c "$cfg" 2>/dev/null)
dir=$(sed -n 's/.* in \(\/[^:]*\)\(: .*\)\{0,1\}$/\1/p' <<<"$out" | tail -n 1)
for f in 1.5 3; do
    echo "--- loader, compute delay ${f}x the read time, 1 rank"
    "$B" load "$dir" "$reps" "$f" -c "$cfg"
done
echo "--- loader, compute delay 1.5x the read time, 2 ranks, batch 2"
$MPIRUN -n 2 "$B" load "$dir" "$reps" 1.5 -c "$cfg" --local-batch-size 2
