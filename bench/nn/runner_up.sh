#!/usr/bin/env bash
# The algorithm cache's close calls (nn/algo.h, docs/nn.md "A close runner-up"): what a cached
# choice that one measurement ranked wrong costs a later run, with and without the first-use
# pair check that averages the choice and its runner-up over the runs' starts.
#   bench/nn/runner_up.sh [ROUNDS] [SCALE] [BASE] [--bf16]
# 1. bench_step measures every Conv3d pass into a fresh cache (quiet).
# 2. A wrong cache is made from it: every pass whose runner-up is within 2x of its choice gets
#    the runner-up as its choice (at the runner-up's measured time) and the real winner as the
#    runner-up, 10% slower than that: what one measurement in a phase that slowed the winner
#    (a shared host's tile unit or FMA units) leaves for good.
# 3. In alternated rounds: the step with the wrong choices pinned (what every run takes from
#    such a cache when nothing compares the pair again: the stale check only re-measures a
#    choice that runs 1.5x faster than its own cached time) against the step that starts from
#    a copy of the wrong cache with the check (each start runs each close pass's runner-up
#    once beside its choice; the cache swaps a pair whose means say so, for the next start).
#    Each step is the median of 3 after a warm-up (bench_step); the closing line gives the
#    median of the rounds' ratios and how many passes the checked cache turned back.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
ROUNDS=${1:-8} SC=${2:-5} B=${3:-64} PREC=${4:-}
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
source bench/nn/lib.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
step() { "$BIN" --scale "$SC" --base "$B" --reps 3 $PREC "$@" 2>/dev/null; }

cpu=$("$BIN" --peak 0.2 | awk '/^cpu /{sub(/^cpu /,""); print}')
echo "# scale $SC / base $B ${PREC:+bf16 }step; $cpu, $(nproc) CPUs"
SCAFFOLD_NN_ALGO_CACHE="$d/true.tsv" step >/dev/null
[ -s "$d/true.tsv" ] || { echo "runner_up: the measurement wrote no cache" >&2; exit 1; }
# the wrong cache: close pairs swapped (fields: 15 algo, 16 ms, 17 how, 18 next, 19 next_ms, 20 n)
awk -F'\t' 'BEGIN { OFS = "\t" } /^#/ { print; next }
    NF >= 20 && $18 != "-" && $19 <= 2 * $16 { a = $15; m = $16; $15 = $18; $16 = $19; $18 = a
                                                $19 = sprintf("%.3f", 1.1 * $16); $20 = 1 }
    { print }' "$d/true.tsv" >"$d/wrong.tsv"
total=$(grep -vc '^#' "$d/true.tsv")
swapped=$(awk -F'\t' '!/^#/ && NF >= 20 && $18 != "-" && $19 <= 2 * $16 { c++ } END { print c + 0 }' "$d/true.tsv")
echo "cache: $total passes, $swapped with a runner-up within 2x (swapped in the wrong cache)"
[ "$swapped" -gt 0 ] || { echo "runner_up: no close pair to swap at this shape" >&2; exit 1; }
cp "$d/wrong.tsv" "$d/checked.tsv"
rows=$d/rows
for r in $(seq "$ROUNDS"); do
    a=$(SCAFFOLD_NN_ALGO_CACHE=0 SCAFFOLD_NN_ALGO_PIN="$d/wrong.tsv" step | step_field scaffold_step_s)
    out=$(SCAFFOLD_NN_ALGO_CACHE="$d/checked.tsv" step)
    b=$(step_field scaffold_step_s <<<"$out") s=$(step_field select_s <<<"$out") m=$(step_field measured <<<"$out")
    [ -n "$a" ] && [ -n "$b" ] || { echo "runner_up: a step failed ('$a' '$b')" >&2; exit 1; }
    echo "round $r: wrong choices pinned $a s, checked cache $b s (checks $s s, $m passes measured again; $(cache_differ "$d/true.tsv" "$d/checked.tsv") of $swapped still differ from the fresh measurement) | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')" | tee -a "$rows"
done
echo "RESULT wrong close choices (unchecked) vs checked cache: $(awk '{print $NF}' "$rows" | med)x the step time (median of $ROUNDS rounds; the checked cache chose as the fresh measurement on $((swapped - $(cache_differ "$d/true.tsv" "$d/checked.tsv"))) of the $swapped swapped passes at the end)"
