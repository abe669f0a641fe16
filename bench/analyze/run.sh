#!/usr/bin/env bash
# Analyzer reader benchmark: events/s loading a >= 5M-event trace (16 per-process .pfw.gz files
# from tools/gen_traces.py) against the baseline, a straightforward Python gzip+json reader of the
# same files measured in the same run; plus column and peak-RSS bytes per event.
# Knobs: ANALYZE_BENCH_EVENTS (5000000), ANALYZE_BENCH_REPS (3), ANALYZE_BENCH_PY_REPS (3),
# ANALYZE_BENCH_DIR (cache of the generated trace; default under /tmp).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
EV=${ANALYZE_BENCH_EVENTS:-5000000}
REPS=${ANALYZE_BENCH_REPS:-3}
PYREPS=${ANALYZE_BENCH_PY_REPS:-3}
DIR=${ANALYZE_BENCH_DIR:-${TMPDIR:-/tmp}/scaffold-analyze-bench-$EV}
if [ ! -f "$DIR/bench/.done" ]; then
    echo "generating a $EV-event trace in $DIR (once)..."
    rm -rf "$DIR"
    "$PYTHON" tools/gen_traces.py "$DIR" --scenario bench --events "$EV" --files 16 2>/dev/null &&
        touch "$DIR/bench/.done" || { echo "bench: trace generation failed"; exit 1; }
fi
files=("$DIR"/bench/*.pfw.gz)
echo "trace: ${#files[@]} files, $(du -sh "$DIR/bench" | cut -f1) compressed"
c1=$("$BUILD/bench/analyze/bench_reader" "$REPS" 1 "${files[@]}") || exit 1
cn=$("$BUILD/bench/analyze/bench_reader" "$REPS" 0 "${files[@]}") || exit 1
py=$("$PYTHON" bench/analyze/py_reader.py "$PYREPS" "${files[@]}") || exit 1
echo "scaffold reader, 1 thread:     $c1"
echo "scaffold reader, all CPUs:     $cn"
echo "baseline python gzip+json:     $py"
get() { sed -E "s/.*$1=([0-9.]+).*/\1/" <<<"$2"; }
"$PYTHON" - "$(get events_per_s "$c1")" "$(get events_per_s "$cn")" "$(get events_per_s "$py")" \
    "$(get events "$cn")" "$(get events "$py")" <<'EOF'
import sys
c1, cn, py, ne, npy = map(float, sys.argv[1:])
print("events: scaffold %d, python %d%s" % (ne, npy, "" if ne == npy else "  (MISMATCH)"))
print("ratio vs python baseline: 1 thread %.1fx, all CPUs %.1fx (target >= 20x)" % (c1 / py, cn / py))
EOF
