#!/usr/bin/env bash
# The algorithm selection on a busy host: what a measurement taken while other work shares the
# cores costs a later quiet run, with and without the engine's guard (nn/algo.h, docs/nn.md "A
# busy host").
#   bench/nn/busy_select.sh [ROUNDS] [SCALE] [BASE] [--bf16]
# 1. With 2 x nproc spinning processes beside it, bench_step measures every Conv3d pass twice:
#    once as an unguarded cache would (SCAFFOLD_NN_ALGO_QUIET=0: every measurement cached), once
#    with the default guard; the lines each cache got are counted.
# 2. Quiet, in alternated rounds: the step with the busy measurement's choices as they were
#    cached (pinned to that file: what a run takes from such a cache when nothing checks it)
#    against the step that starts from the same file with the check (its first round measures
#    the shapes whose cached times its first use beats 1.5x, the later rounds read the healed
#    cache). Medians of the rounds, each step the median of 3 after a warm-up (bench_step).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
ROUNDS=${1:-5} SC=${2:-5} B=${3:-64} PREC=${4:-}
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
source bench/nn/lib.sh
d=$(mktemp -d)
spin=()
stop_spin() { [ ${#spin[@]} -gt 0 ] && kill "${spin[@]}" 2>/dev/null; wait "${spin[@]}" 2>/dev/null; spin=(); }
trap 'stop_spin; rm -rf "$d"' EXIT
step() { "$BIN" --scale "$SC" --base "$B" --reps 3 $PREC "$@" 2>/dev/null; }
lines() { [ -f "$1" ] && grep -vc '^#' "$1" || echo 0; }

cpu=$("$BIN" --peak 0.2 | awk '/^cpu /{sub(/^cpu /,""); print}')
n=$((2 * $(nproc)))
echo "# scale $SC / base $B ${PREC:+bf16 }step; $cpu, $(nproc) CPUs; $n spinning processes beside the busy measurements"
for _ in $(seq "$n"); do (while :; do :; done) & spin+=($!); done
sleep 0.5
busy=$(SCAFFOLD_NN_ALGO_QUIET=0 SCAFFOLD_NN_ALGO_CACHE="$d/busy.tsv" step | step_field select_s)
guarded=$(SCAFFOLD_NN_ALGO_CACHE="$d/guarded.tsv" step | step_field select_s)
stop_spin
[ -s "$d/busy.tsv" ] || { echo "busy_select: the busy measurement wrote no cache" >&2; exit 1; }
echo "busy measurement: $busy s unguarded, $(lines "$d/busy.tsv") passes cached; $guarded s guarded, $(lines "$d/guarded.tsv") cached"
cp "$d/busy.tsv" "$d/heal.tsv"
rows=$d/rows
for r in $(seq "$ROUNDS"); do
    a=$(SCAFFOLD_NN_ALGO_CACHE=0 SCAFFOLD_NN_ALGO_PIN="$d/busy.tsv" step | step_field scaffold_step_s)
    out=$(SCAFFOLD_NN_ALGO_CACHE="$d/heal.tsv" step)
    b=$(step_field scaffold_step_s <<<"$out") s=$(step_field select_s <<<"$out") m=$(step_field measured <<<"$out")
    [ -n "$a" ] && [ -n "$b" ] || { echo "busy_select: a step failed ('$a' '$b')" >&2; exit 1; }
    echo "round $r: busy choices pinned $a s, checked cache $b s (selection $s s, $m passes measured again) | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')" | tee -a "$rows"
done
diff=$(cache_differ "$d/busy.tsv" "$d/heal.tsv")
echo "RESULT busy measurement's choices (unchecked) vs checked cache: $(awk '{print $NF}' "$rows" | med)x the step time (median of $ROUNDS rounds; $diff passes chose differently after healing)"
