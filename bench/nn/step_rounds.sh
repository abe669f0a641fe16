#!/usr/bin/env bash
# Training steps in rounds, for hosts whose speed drifts in phases of a minute or more: each
# round runs our fp32 step, our bf16 step, PyTorch's fp32 step and its bf16 (autocast) step one
# after the other (seconds apart), so the ratios within a round compare like with like; the
# closing lines give the medians of the rounds' ratios.
#   bench/nn/step_rounds.sh [ROUNDS] [SCALE] [BASE] [THREADS]
# Each of ours is the median of 3 steps after a warm-up step (bench_step), PyTorch's one step
# after a warm-up (tools/torch_ref.py bench). One algorithm cache for all of ours.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
ROUNDS=${1:-12} SC=${2:-5} B=${3:-64} THREADS=${4:-$(nproc)}
export OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=${OMP_PROC_BIND:-false}
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
source bench/venv.sh
PY=$(bench_venv torch) || { echo "bench/nn: no PyTorch venv (PyPI unreachable?)"; exit 1; }
CACHE=$(mktemp)
rm -f "$CACHE"
trap 'rm -f "$CACHE" "$CACHE.res"' EXIT
export SCAFFOLD_NN_ALGO_CACHE=$CACHE
ours() { "$BIN" --scale "$SC" --base "$B" --reps 3 "$@" 2>/dev/null | awk '/^scaffold_step_s/{print $2}'; }
torch() { $PY tools/torch_ref.py bench "$SC" "$B" "$THREADS" 1 "$@" 2>/dev/null | awk '/^torch_step_s/{print $2}'; }
ours >/dev/null && ours --bf16 >/dev/null # fill the algorithm cache
cpu=$("$BIN" --peak 0.2 | awk '/^cpu /{sub(/^cpu /,""); print}')
echo "# scale $SC / base $B training steps in rounds ($cpu, $THREADS threads): ours fp32, ours bf16, PyTorch fp32, PyTorch bf16 autocast"
echo "# ours_fp32_s ours_bf16_s torch_fp32_s torch_bf16_s | ours fp32/bf16, torch/ours fp32, torch/ours bf16"
rows=$(mktemp)
for _ in $(seq "$ROUNDS"); do
    a=$(ours) b=$(ours --bf16) c=$(torch) d=$(torch --bf16)
    if [ -z "$a" ] || [ -z "$b" ] || [ -z "$c" ] || [ -z "$d" ]; then
        echo "step_rounds: a step failed (ours '$a' '$b', PyTorch '$c' '$d')" >&2
        rm -f "$rows"
        exit 1
    fi
    awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" \
        'BEGIN { printf "%s %s %s %s | %.3f %.3f %.3f\n", a, b, c, d, a / b, c / a, d / b }' | tee -a "$rows"
done
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
echo "RESULT ours bf16 vs ours fp32: $(awk '{print $6}' "$rows" | med)x (median of $ROUNDS rounds' ratios)"
echo "RESULT ours fp32 vs PyTorch fp32: $(awk '{print $7}' "$rows" | med)x"
echo "RESULT ours bf16 vs PyTorch bf16: $(awk '{print $8}' "$rows" | med)x"
rm -f "$rows"
