#!/usr/bin/env bash
# bench/tune: the real tune of the quickstart configuration on this machine with the built-in
# catalog and the analyzer's proposals -- every lever against the incumbent in sequential A-B
# pairs (until the 99% interval decides, at most MAX_REPEATS), then the best setting against the
# baseline (the named baseline of the ratio
# it prints: the configuration as given, measured in the same run). The tuning section of
# docs/usage.md ("Tools") and its chart come from this script.
#
#   flock -x /tmp/scaffold-cpu.lock bash bench/tune/run.sh [OUT]
#
# Knobs (environment): EPOCHS (runs capped at this many epochs, default 5: four steady epochs
# per run), REPEATS (baseline runs and the pairs a trial starts with, default 3), MAX_REPEATS
# (the most pairs per trial, default 8), OBJECTIVE (throughput), NOISE (floor in percent,
# default 1), BUDGET (seconds: start no trial that would end later; default
# none), LEVERS (a levers file instead of the built-in catalog), BUILD.
# Writes OUT/tune/{tune.json,lever_catalog.yaml,best.yml,report.html,tune.svg}, OUT/progress.log;
# the fractal library, the dataset and the runs stay under OUT. Prints the verdict of every
# trial and the summary line.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/scaffold-tune.XXXXXX")}
EPOCHS=${EPOCHS:-5}
REPEATS=${REPEATS:-3}
MAX_REPEATS=${MAX_REPEATS:-8}
OBJECTIVE=${OBJECTIVE:-throughput}
NOISE=${NOISE:-1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[ -x "$BUILD/scaffold" ] || { echo "bench/tune: build first (make -j2)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
levers=()
[ -n "${LEVERS:-}" ] && levers=(--levers "$LEVERS")
[ -n "${BUDGET:-}" ] && levers+=(--budget-s "$BUDGET")
echo "bench/tune: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg); out $OUT"
rc=0
"$BUILD/scaffold" tune -c configs/benchmark_default.yml -c configs/quickstart.yml \
    --dataset-dir "$OUT/datasets" --fract-base-dir "$OUT/fractals" \
    --epochs "$EPOCHS" --repeats "$REPEATS" --max-repeats "$MAX_REPEATS" --objective "$OBJECTIVE" --noise "$NOISE" \
    --launcher "mpirun --oversubscribe" "${levers[@]}" --out "$OUT/tune" \
    >"$OUT/summary.txt" 2>"$OUT/progress.log" || rc=$?
# The discriminator's class and every verdict (the per-run progress lines stay in the log).
grep -E "^tune: (starting|bottleneck)|^tune:   " "$OUT/progress.log" || true
cat "$OUT/summary.txt"
echo "bench/tune: load average after $(cut -d' ' -f1-3 /proc/loadavg); report $OUT/tune/report.html"
exit $rc
