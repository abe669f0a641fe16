#!/usr/bin/env bash
# Store benchmark: `scaffold store-bench` (DDStore bench_get definitions: us/row = mean rank wall
# / rows per rank, MB/s/rank) for get() vs get_batch(128) at 3 KB, 12.5 KB, 200 KB and 1 MB rows,
# both methods, median of repeats. Named baselines measured in the same runs: per-row get()
# ("vs_get") and the local memcpy of the same random rows ("vs_memcpy").
# Knobs: STORE_BENCH_REPEATS (default 7), STORE_BENCH_RANKS (default "2 4"), STORE_BENCH_OUT
# (directory for the CSV files, default a temporary one).
set -u
cd "$(dirname "$0")/../.." && source tests/lib.sh
reps=${STORE_BENCH_REPEATS:-7}
out=${STORE_BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/store-bench.XXXXXX")}
mkdir -p "$out"
make -s "$BUILD/scaffold" >/dev/null 2>&1 || { echo "build failed: make $BUILD/scaffold"; exit 1; }

for n in ${STORE_BENCH_RANKS:-2 4}; do
    echo "--- $n ranks, uniform indices over all rows (DDStore's bench_get)"
    $MPIRUN -n "$n" "$SCAFFOLD" store-bench --repeats "$reps" --csv "$out/store_n$n.csv"
done

echo "--- 2 ranks, remote rows only (every read crosses a process boundary)"
$MPIRUN -n 2 "$SCAFFOLD" store-bench --repeats "$reps" --remote-only --csv "$out/store_n2_remote.csv"

echo "--- coll round cap sweep at batch 128 (DDStore: unbounded rounds of large rows are slowest)"
for cap in 1t 2m 8m 32m; do
    echo "cap $cap"
    $MPIRUN -n 4 "$SCAFFOLD" store-bench --method coll --row-bytes 200k,1m --batch 128 \
        --repeats "$reps" --coll-max-bytes "$cap" | grep -E '^coll'
done

echo "--- rma reader threads (2 ranks, remote rows, batch 128)"
for t in 1 2; do
    echo "threads $t"
    $MPIRUN -n 2 "$SCAFFOLD" store-bench --method rma --row-bytes 3136,200k --batch 128 \
        --threads "$t" --remote-only --repeats "$reps" | grep -E '^rma'
done

if ompi_info 2>/dev/null | grep -q 'MCA osc: ucx'; then
    echo "--- rma over Open MPI's osc ucx instead of osc sm (a network-style one-sided path)"
    $MPIRUN --mca osc ucx -n 2 "$SCAFFOLD" store-bench --method rma --repeats "$reps" \
        --remote-only --csv "$out/store_n2_ucx.csv" || echo "(osc ucx unavailable here)"
fi
echo "CSV files in $out"
