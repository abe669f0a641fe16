#!/usr/bin/env bash
# Analyzer benchmark against dftracer-utils' dftracer_stats (C++, PyPI 0.0.14, bench-only venv
# from bench/venv.sh), measured in the same run on the same traces:
#  1. the 48 per-process CM1 traces of tests/data (284 k events): a full `scaffold analyze`
#     (read, metrics, rules, report) against dftracer_stats' first run, which builds its index
#     (and, for reference, its second run, which reads the index it built);
#  2. one generated trace of >= 1 GB uncompressed in a single .pfw.gz file (multi-member, as
#     dftracer and our tracer write): the reader and the full analysis with 1 and 2 threads
#     (parallel decode of one file), and dftracer_stats' first run on it.
#  2b. the same generated events in dftracer's 2.x shape (integer ph/type, no brackets) and in
#     the 1.x shape: full analysis, 1 thread; the 2.x reader must add <= 10%.
#  3. with ANALYZE_BENCH_PYTHON=1: the 16-file, 5 M-event trace against a plain Python reader
#     (gzip + json.loads per line).
# Each figure is the median of REPS runs. Knobs: ANALYZE_BENCH_REPS (3), ANALYZE_BENCH_BIG_EVENTS
# (5000000: ~1.1 GB uncompressed), ANALYZE_BENCH_SHAPE_EVENTS (2000000), ANALYZE_BENCH_DIR (cache of generated traces; default under
# TMPDIR). Run it alone: flock -x /tmp/scaffold-cpu.lock bash bench/analyze/run.sh
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPS=${ANALYZE_BENCH_REPS:-3}
BIG=${ANALYZE_BENCH_BIG_EVENTS:-5000000}
DIR=${ANALYZE_BENCH_DIR:-${TMPDIR:-/tmp}/scaffold-analyze-bench}
SC=$PWD/$BUILD/scaffold
READER=$PWD/$BUILD/bench/analyze/bench_reader
[ -x "$SC" ] && [ -x "$READER" ] || { echo "bench analyze: build first (make)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-bench-analyze.XXXXXX")
trap 'rm -rf "$T"' EXIT

source bench/venv.sh
STATS=""
if DPY=$(bench_venv dftracer); then
    STATS=$(dirname "$DPY")/dftracer_stats
    [ -x "$STATS" ] || STATS=""
fi
[ -z "$STATS" ] && echo "(dftracer_stats is not available: its columns are missing)"

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# wall CMD... -> seconds (the command's output is discarded; a failure aborts the bench)
wall() {
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null 2>"$T/err" || { echo "bench analyze: failed: $* ($(head -c 300 "$T/err"))" >&2; exit 1; }
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN {printf "%.4f\n", e - s}'
}
# stats_first TRACE... -> seconds of dftracer_stats with a fresh index directory
stats_first() {
    rm -rf "$T/idx"
    wall "$STATS" --files "$@" --index-dir "$T/idx"
}

echo "== 1. CM1, 48 files, full analysis vs dftracer_stats (median of $REPS)"
CM1=tests/data/dftracer-samples/cm1-48ranks
cp -r "$CM1" "$T/cm1" # dftracer_stats may write next to the traces
files=("$T"/cm1/*.pfw.gz)
A=""; S1=""; S2=""
for _ in $(seq "$REPS"); do
    A="$A $(wall "$SC" analyze "$T/cm1")"
    if [ -n "$STATS" ]; then
        S1="$S1 $(stats_first "${files[@]}")"
        S2="$S2 $(wall "$STATS" --files "${files[@]}" --index-dir "$T/idx")"
    fi
done
a=$(tr ' ' '\n' <<<"$A" | grep . | median)
printf "%-52s %8.3f s\n" "scaffold analyze (read, metrics, rules, report)" "$a"
if [ -n "$STATS" ]; then
    s1=$(tr ' ' '\n' <<<"$S1" | grep . | median)
    s2=$(tr ' ' '\n' <<<"$S2" | grep . | median)
    printf "%-52s %8.3f s  -> scaffold is %.1fx faster (target >= 10x)\n" \
        "dftracer_stats, first run (builds its index)" "$s1" "$(awk -v x="$s1" -v y="$a" 'BEGIN {print x / y}')"
    printf "%-52s %8.3f s  (%.2fx of scaffold's time; summary counts from the index only)\n" \
        "dftracer_stats, second run (index already built)" "$s2" "$(awk -v x="$s2" -v y="$a" 'BEGIN {print x / y}')"
fi

echo
echo "== 2. one large file: $BIG events in a single multi-member .pfw.gz"
BIGD=$DIR/big-$BIG
if [ ! -f "$BIGD/bench/.done" ]; then
    echo "generating it in $BIGD (once; minutes)..."
    rm -rf "$BIGD"
    "$PYTHON" tools/gen_traces.py "$BIGD" --scenario bench --events "$BIG" --files 1 2>/dev/null &&
        touch "$BIGD/bench/.done" || { echo "bench: trace generation failed"; exit 1; }
fi
bigf=("$BIGD"/bench/*.pfw.gz)
usize=$(gzip -dc "${bigf[0]}" | wc -c)
printf "file: %s compressed, %.2f GB uncompressed\n" "$(du -h "${bigf[0]}" | cut -f1)" "$(awk -v u="$usize" 'BEGIN {print u / 1e9}')"
r1=$("$READER" "$REPS" 1 "${bigf[@]}") || exit 1
r2=$("$READER" "$REPS" 2 "${bigf[@]}") || exit 1
echo "reader, 1 thread:  $r1"
echo "reader, 2 threads: $r2"
F1=""; F2=""
for _ in $(seq "$REPS"); do
    F1="$F1 $(wall "$SC" analyze --threads 1 "${bigf[@]}")"
    F2="$F2 $(wall "$SC" analyze --threads 2 "${bigf[@]}")"
done
f1=$(tr ' ' '\n' <<<"$F1" | grep . | median)
f2=$(tr ' ' '\n' <<<"$F2" | grep . | median)
get() { sed -E "s/.*$1=([0-9.]+).*/\1/" <<<"$2"; }
awk -v a="$(get median_s "$r1")" -v b="$(get median_s "$r2")" -v c="$f1" -v d="$f2" 'BEGIN {
    printf "1 -> 2 threads on one file: reader %.2fx (%.2f s -> %.2f s), full analysis %.2fx (%.2f s -> %.2f s) (target >= 1.8x)\n", a / b, a, b, c / d, c, d }'
if [ -n "$STATS" ]; then
    sb=$(stats_first "${bigf[@]}")
    printf "dftracer_stats, first run on the large file: %.2f s (scaffold analyze, 2 threads: %.2f s -> %.1fx)\n" \
        "$sb" "$f2" "$(awk -v x="$sb" -v y="$f2" 'BEGIN {print x / y}')"
fi

echo
SHN=${ANALYZE_BENCH_SHAPE_EVENTS:-2000000}
echo "== 2b. the same $SHN events in the 2.x and the 1.x shape: full analysis, 1 thread (median of $REPS)"
for sh in 1 2; do
    SD=$DIR/shape$sh-$SHN
    if [ ! -f "$SD/bench/.done" ]; then
        rm -rf "$SD"
        "$PYTHON" tools/gen_traces.py "$SD" --scenario bench --events "$SHN" --files 4 --shape "$sh" 2>/dev/null &&
            touch "$SD/bench/.done" || { echo "bench: trace generation failed"; exit 1; }
    fi
done
S1=""; S2=""
for _ in $(seq "$REPS"); do
    S1="$S1 $(wall "$SC" analyze --threads 1 "$DIR/shape1-$SHN/bench")"
    S2="$S2 $(wall "$SC" analyze --threads 1 "$DIR/shape2-$SHN/bench")"
done
s1=$(tr ' ' '\n' <<<"$S1" | grep . | median)
s2=$(tr ' ' '\n' <<<"$S2" | grep . | median)
awk -v a="$s1" -v b="$s2" 'BEGIN {
    printf "1.x shape %.3f s, 2.x shape %.3f s: the 2.x reader adds %+.1f%% (target <= +10%%)\n", a, b, 100 * (b / a - 1) }'

if [ "${ANALYZE_BENCH_PYTHON:-0}" = 1 ]; then
    echo
    echo "== 3. 16 files, 5,000,048 events: the reader against a Python gzip + json reader"
    PD=$DIR/py-5000000
    if [ ! -f "$PD/bench/.done" ]; then
        rm -rf "$PD"
        "$PYTHON" tools/gen_traces.py "$PD" --scenario bench --events 5000000 --files 16 2>/dev/null &&
            touch "$PD/bench/.done" || { echo "bench: trace generation failed"; exit 1; }
    fi
    pf=("$PD"/bench/*.pfw.gz)
    c1=$("$READER" "$REPS" 1 "${pf[@]}") || exit 1
    cn=$("$READER" "$REPS" 0 "${pf[@]}") || exit 1
    py=$("$PYTHON" bench/analyze/py_reader.py "$REPS" "${pf[@]}") || exit 1
    echo "scaffold reader, 1 thread:     $c1"
    echo "scaffold reader, all CPUs:     $cn"
    echo "baseline python gzip+json:     $py"
    awk -v a="$(get events_per_s "$c1")" -v b="$(get events_per_s "$cn")" -v p="$(get events_per_s "$py")" \
        'BEGIN {printf "ratio vs the Python reader: 1 thread %.1fx, all CPUs %.1fx\n", a / p, b / p}'
fi
