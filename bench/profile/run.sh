#!/usr/bin/env bash
# The profiler's cost and its per-layer times, each against a named baseline in the same run:
#  1. overhead: the scale-5/base-64 U-Net training step with the timer off (baseline) and on,
#     recording every region as `scaffold benchmark --profile` does, alternated step by step
#     (ABBA) in one process, median of REPS rounds: ratio on/off (target <= 1.01); and the
#     timer's own cost per region (a loop of 100000 regions) times the regions of a step, the
#     share of the step it takes, which a busy machine's noise does not blur;
#  2. per-layer times: `scaffold benchmark --profile` at scale 5/base 64 (fp32), the time per
#     minibatch of every convolution pass of every U-Net block from profile-ranks.cali, against
#     bench_step --layer at the same shapes (baseline: median of REPS), ratio per row and the
#     median ratio over rows (agreement within noise: ~1);
#  3. (E2E=1) the benchmark's median minibatch time with --profile and without (baseline),
#     REPS runs each, alternated: ratio.
# Usage: bench/profile/run.sh [REPS] [THREADS] [SCALE] [BASE]   (defaults 5, nproc, 5, 64)
# A tiny end-to-end check of the script: bench/profile/run.sh 1 2 4 16
set -u
cd "$(dirname "$0")/../.."
root=$PWD
BUILD=${BUILD:-build}
REPS=${1:-5}
THREADS=${2:-$(nproc)}
SCALE=${3:-5}
BASE=${4:-64}
S="$root/$BUILD/scaffold"
BIN="$root/$BUILD/bench/nn/bench_step"
PY=${PYTHON:-python3}
[ -x "$S" ] && [ -x "$BIN" ] || { echo "build first: make"; exit 1; }
export OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=${OMP_PROC_BIND:-false}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# ---- 1. overhead on the step ----------------------------------------------------------------
o=$("$BIN" --profile-ab --scale "$SCALE" --base "$BASE" --reps "$REPS")
echo "# $o"
echo "$o" | awk -v s="$SCALE" -v b="$BASE" -v t="$THREADS" '{
    for (i = 1; i < NF; i++) v[$i] = $(i + 1)
    printf "RESULT profiler overhead, scale %s/base %s training step, %s threads: on %.4f s vs off %.4f s (baseline): ratio %.4f (target <= 1.01); %s regions per step at %.0f ns each (off: %.2f ns) = %.3f%% of the step\n",
        s, b, t, v["on_s"], v["off_s"], v["ratio"], v["regions_per_step"], v["ns_per_region_on"], v["ns_per_region_off"], 100 * v["timer_share"] }'

# ---- 2. per-layer times against bench_step --layer -----------------------------------------
cfg="-c $root/configs/benchmark_default.yml -c $root/bench/profile/scale5.yml --problem-scale $SCALE --unet-base-channels $BASE"
cd "$d"
if ! "$S" benchmark $cfg --base-run-dir runs --profile --profile-format cali,text >"$d/b.out" 2>&1; then
    echo "bench/profile: the profiled benchmark failed:"; tail -n 20 "$d/b.out"; exit 1
fi
run=$(ls -d "$d"/runs/*/ | tail -n 1)
"$PY" "$root/bench/profile/layers.py" "$run/profile/profile-ranks.cali" >"$d/layers"
steps=$(awk '/^steps/ {print $2}' "$d/layers")
L=$((SCALE - 3)) # unet_bottleneck_dim 3
size=$((1 << SCALE))
# bench_step --layer conv D CIN COUT: median of REPS per pass (fwd, bwd_data, bwd_weight)
layer() { # op D cin cout pass -> seconds
    local key="$1:$2:$3:$4"
    if [ ! -f "$d/l.$key" ]; then "$BIN" --layer "$1" "$2" "$3" "$4" --reps "$REPS" >"$d/l.$key"; fi
    awk -v p="$5" '$2 ~ "_" p "$" {print $7}' "$d/l.$key"
}
# The convolutions of each block (upstream's modules): down_list.i at level i (conv1 from the
# previous level's channels, or the 3 input channels, then conv2), up_list.j at level L-1-j
# (conv1 from the skip and the upsample, 2c -> c; conv2; the ConvTranspose3d from level l+1).
printf "\n| block | pass | calls/step | profiled s/step | bench_step --layer s/step | ratio |\n|---|---|---|---|---|---|\n"
rows=$d/rows
: >"$rows"
emit() { # direction block region expected-seconds calls
    local got calls
    read -r calls got < <(awk -v dir="$1" -v b="$2" -v l="$3" '$2 == dir && $3 == b && $4 == l {print $6, $8}' "$d/layers")
    [ -z "${got:-}" ] && return
    awk -v b="$2" -v l="$3" -v c="$calls" -v g="$got" -v e="$4" 'BEGIN {
        printf "| %s | %s | %s | %.5f | %.5f | %.2f |\n", b, l, c, g, e, g / e }'
    awk -v g="$got" -v e="$4" 'BEGIN {print g / e}' >>"$rows"
}
sum() { awk '{s += $1} END {printf "%.6f", s}'; }
for ((i = 0; i <= L; i++)); do
    D=$((size >> i)) c=$((BASE << i)) ci=$([ $i -eq 0 ] && echo 3 || echo $((BASE << (i - 1))))
    f=$( { layer conv $D $ci $c fwd; layer conv $D $c $c fwd; } | sum)
    emit forward "down_list.$i" conv3d_fwd "$f"
    w=$( { layer conv $D $ci $c bwd_weight; layer conv $D $c $c bwd_weight; } | sum)
    emit backward "down_list.$i" conv3d_bwd_weight "$w"
    # down block 0 has no input gradient of its first convolution (the input volume's)
    b=$( { [ $i -gt 0 ] && layer conv $D $ci $c bwd_data; layer conv $D $c $c bwd_data; } | sum)
    emit backward "down_list.$i" conv3d_bwd_data "$b"
done
for ((j = 0; j < L; j++)); do
    l=$((L - 1 - j)) D=$((size >> (L - 1 - j))) c=$((BASE << (L - 1 - j)))
    f=$( { layer conv $D $((2 * c)) $c fwd; layer conv $D $c $c fwd; } | sum)
    emit forward "up_list.$j" conv3d_fwd "$f"
    emit backward "up_list.$j" conv3d_bwd_weight "$( { layer conv $D $((2 * c)) $c bwd_weight; layer conv $D $c $c bwd_weight; } | sum)"
    emit backward "up_list.$j" conv3d_bwd_data "$( { layer conv $D $((2 * c)) $c bwd_data; layer conv $D $c $c bwd_data; } | sum)"
    Dt=$((D / 2))
    emit forward "up_list.$j" convt3d_fwd "$(layer convt $Dt $((2 * c)) $c fwd)"
    emit backward "up_list.$j" convt3d_bwd_weight "$(layer convt $Dt $((2 * c)) $c bwd_weight)"
    emit backward "up_list.$j" convt3d_bwd_data "$(layer convt $Dt $((2 * c)) $c bwd_data)"
done
n=$(wc -l <"$rows")
echo
echo "RESULT per-layer times of a profiled benchmark step (scale $SCALE/base $BASE, fp32, $THREADS threads, $steps minibatches) / bench_step --layer (baseline, median of $REPS): median ratio $(median <"$rows") over $n passes (min $(sort -g "$rows" | head -n 1), max $(sort -g "$rows" | tail -n 1))"

# ---- 3. the whole benchmark with and without --profile -------------------------------------
if [ "${E2E:-0}" = 1 ]; then
    for ((r = 0; r < REPS; r++)); do
        for p in off on; do
            fl=""; [ $p = on ] && fl="--profile"
            "$S" benchmark $cfg --base-run-dir "e$p" $fl 2>&1 | grep -oE 'median minibatch time [0-9.]+' | awk '{print $4}' >>"$d/e.$p"
        done
    done
    on=$(median <"$d/e.on") off=$(median <"$d/e.off")
    echo "RESULT benchmark median minibatch time with --profile $on s vs without (baseline) $off s: ratio $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.4f", a / b}') ($REPS runs each, alternated)"
fi
