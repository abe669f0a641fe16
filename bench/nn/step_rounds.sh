#!/usr/bin/env bash
# Training steps in rounds, for hosts whose speed drifts in phases of a minute or more: each
# round runs our fp32 step, our bf16 step, PyTorch's fp32 step and its bf16 (autocast) step one
# after the other (seconds apart), so the ratios within a round compare like with like; the
# closing lines give the medians of the rounds' ratios.
#   bench/nn/step_rounds.sh [ROUNDS] [SCALE] [BASE] [THREADS]
# Each of ours is the median of 3 steps after a warm-up step (bench_step), PyTorch's one step
# after a warm-up (tools/torch_ref.py bench). One algorithm cache for all of ours.
# PyTorch runs each precision in both memory formats, contiguous (upstream's) and
# channels_last_3d (PyTorch's CPU tuning advice; its bf16 step at 5 / 64 ran 1.3x faster that way
# on a Xeon with AMX), and the faster of the two is the baseline; the last column names it per
# precision (c: contiguous, cl: channels_last_3d). TORCH_FORMATS="c" (or "cl") runs one only.
# Each side also reports the share of its threads' CPUs its timed steps got (cpu_share: 1.00
# on a quiet host, ~0.5 with as many busy processes beside it as cores), and the script
# measures the share of the machine's CPU time anything else used while each side ran
# (others: other processes and steal time, bench/nn/lib.sh with_others): a round where one of
# the four had others at or above BUSY_OTHERS (0.05) or a share under BUSY_SHARE (0.80) is
# marked "busy" and left out of the medians (all rounds count when none is quiet, with a
# warning). The share alone also drops in an engine's own serial phases (PyTorch at 7 / 64).
# A host whose cores are shared with other tenants also changes speed without taking CPU time
# away: the tile unit (AMX) or the FMA units are busy with the other thread of the core. So
# each round measures the host's peak before its first step, between our steps and PyTorch's,
# and after its last (bench_step --peak: the AMX peak where the CPU has AMX, else the FMA
# peak); a round whose three differ by more than 1.5x is marked "phase" and left out of the
# medians as a busy one is.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
ROUNDS=${1:-12} SC=${2:-5} B=${3:-64} THREADS=${4:-$(nproc)}
export OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=${OMP_PROC_BIND:-false}
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
source bench/venv.sh
source bench/nn/lib.sh
PY=$(bench_venv torch) || { echo "bench/nn: no PyTorch venv (PyPI unreachable?)"; exit 1; }
CACHE=$(mktemp)
rm -f "$CACHE"
trap 'rm -f "$CACHE" "$CACHE.res"' EXIT
export SCAFFOLD_NN_ALGO_CACHE=$CACHE
# "seconds share others" of a step (with_others' line after the engine's)
share_of() {
    awk -v k="$1" '$1 == k { s = "1"; for (i = 1; i < NF; i++) if ($i == "cpu_share") s = $(i + 1); t = $2 }
                   $1 == "others" { o = $2 } END { if (t != "") print t, s, o }'
}
ours() { with_others "$BIN" --scale "$SC" --base "$B" --reps 3 "$@" 2>/dev/null | share_of scaffold_step_s; }
TORCH_FORMATS=${TORCH_FORMATS:-c cl}
for f in $TORCH_FORMATS; do
    case $f in c | cl) ;; *) echo "step_rounds: TORCH_FORMATS takes c and cl, not '$f'" >&2; exit 2 ;; esac
done
torch1() { with_others $PY tools/torch_ref.py bench "$SC" "$B" "$THREADS" 1 "$@" 2>/dev/null | share_of torch_step_s; }
# PyTorch's faster format: "seconds share others format", others the most of the formats' runs
torch() {
    local f t s o best="" bs="" bo=0 bf=""
    for f in $TORCH_FORMATS; do
        read -r t s o <<<"$(torch1 "$@" $([ "$f" = cl ] && echo --channels-last))"
        [ -n "$t" ] || return 0
        bo=$(awk -v a="$o" -v b="$bo" 'BEGIN { print (a > b ? a : b) }')
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then
            best=$t bs=$s bf=$f
        fi
    done
    echo "$best $bs $bo $bf"
}
ours >/dev/null && ours --bf16 >/dev/null # fill the algorithm cache
cpu=$("$BIN" --peak 0.2 | awk '/^cpu /{sub(/^cpu /,""); print}')
# the host's peak now (GFLOP/s): AMX where the CPU has it, else FMA
probe() { "$BIN" --peak 0.2 | awk '/^fma_peak_gflops/ { f = $2 } /^amx_peak_gflops/ { a = $2 }
                                  END { printf "%.0f\n", a ? a : f }'; }
echo "# scale $SC / base $B training steps in rounds ($cpu, $THREADS threads): ours fp32, ours bf16, PyTorch fp32, PyTorch bf16 autocast"
echo "# ours_fp32_s ours_bf16_s torch_fp32_s torch_bf16_s | ours fp32/bf16, torch/ours fp32, torch/ours bf16 | cpu shares (ours fp32, bf16, torch fp32, bf16) | others' share of the machine meanwhile (the same four) | host peak GFLOP/s before, between, after | PyTorch's faster format, fp32 and bf16 (formats run: $TORCH_FORMATS)"
rows=$(mktemp)
for _ in $(seq "$ROUNDS"); do
    p1=$(probe)
    read -r a sa oa <<<"$(ours)"
    read -r b sb ob <<<"$(ours --bf16)"
    p2=$(probe)
    read -r c sc oc fc <<<"$(torch)"
    read -r d sd od fd <<<"$(torch --bf16)"
    p3=$(probe)
    if [ -z "$a" ] || [ -z "$b" ] || [ -z "$c" ] || [ -z "$d" ]; then
        echo "step_rounds: a step failed (ours '$a' '$b', PyTorch '$c' '$d')" >&2
        rm -f "$rows"
        exit 1
    fi
    awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v sa="$sa" -v sb="$sb" -v sc="$sc" -v sd="$sd" \
        -v oa="$oa" -v ob="$ob" -v oc="$oc" -v od="$od" -v thr="$BUSY_SHARE" -v tho="$BUSY_OTHERS" \
        -v p1="$p1" -v p2="$p2" -v p3="$p3" -v fc="$fc" -v fd="$fd" \
        'BEGIN { busy = sa < thr || sb < thr || sc < thr || sd < thr || oa >= tho || ob >= tho || oc >= tho || od >= tho
                 hi = p1; lo = p1
                 if (p2 > hi) hi = p2; if (p3 > hi) hi = p3; if (p2 < lo) lo = p2; if (p3 < lo) lo = p3
                 phase = !busy && (lo <= 0 || hi > 1.5 * lo)
                 printf "%s %s %s %s | %.3f %.3f %.3f | %s %s %s %s | %.2f %.2f %.2f %.2f | %s %s %s | %s %s%s\n", a, b, c, d, a / b, c / a, d / b,
                        sa, sb, sc, sd, oa, ob, oc, od, p1, p2, p3, fc, fd, busy ? " busy" : phase ? " phase" : "" }' | tee -a "$rows"
done
quiet=$(grep -vcE ' (busy|phase)$' "$rows")
if [ "$quiet" -gt 0 ]; then
    sel() { grep -vE ' (busy|phase)$' "$rows"; }
    note="median of the $quiet quiet rounds of $ROUNDS"
else
    sel() { cat "$rows"; }
    note="median of $ROUNDS rounds, none quiet: in every round other work took $BUSY_OTHERS of the machine or more beside a side, a side got under $BUSY_SHARE of its CPUs, or the host's peak moved by more than 1.5x"
    echo "step_rounds: every round was busy or changed phase: the ratios below are not of this CPU's speed" >&2
fi
echo "RESULT ours bf16 vs ours fp32: $(sel | awk '{print $6}' | med)x ($note)"
echo "RESULT ours fp32 vs PyTorch fp32: $(sel | awk '{print $7}' | med)x"
echo "RESULT ours bf16 vs PyTorch bf16: $(sel | awk '{print $8}' | med)x"
rm -f "$rows"
