#!/usr/bin/env bash
# Training quality of bf16 (torch_amp: 1) against fp32 (torch_amp: 0): epochs and time to the
# target validation Dice (0.95) on the small configuration of issue 13 (scale 4, bottleneck 2,
# 2 categories = 3 classes, 48 instances per class, base 16 channels), seeds 42, 1, 2, 3, 4, the
# fractal library and dataset generated once per seed (not timed). Prints one table row per
# (seed, precision) and the spread of each precision. 2 threads, 1 rank.
# Usage: bench/nn/quality.sh [EPOCH_CAP] [SEEDS...]   (defaults 60; 42 1 2 3 4)
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
S="$root/${BUILD:-build}/scaffold"
[ -x "$S" ] || { echo "build first: make"; exit 1; }
CAP=${1:-60}
shift
SEEDS=${*:-42 1 2 3 4}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cfg="-c $root/configs/benchmark_default.yml --problem-scale 4 --unet-bottleneck-dim 2 \
--n-categories 2 --n-instances-used-per-fractal 48 --unet-base-channels 16 --epochs $CAP \
--fract-base-dir $d/fractals --dataset-dir $d/datasets"
echo "| seed | precision | epochs to val Dice 0.95 | time to target | final val Dice |"
echo "|---|---|---|---|---|"
for seed in $SEEDS; do
    for amp in 0 1; do
        out=$("$S" benchmark $cfg --seed "$seed" --torch-amp "$amp" --base-run-dir "$d/runs" 2>&1 |
            grep '^benchmark:')
        prec=$([ "$amp" = 1 ] && echo bf16 || echo fp32)
        if grep -q "reached" <<<"$out"; then
            ep=$(sed -E 's/.* at epoch ([0-9]+) .*/\1/' <<<"$out")
            tt=$(sed -E 's/.*time to target ([0-9.]+) s.*/\1/' <<<"$out")
            vd=$(sed -E 's/.*reached val dice ([0-9.]+).*/\1/' <<<"$out")
            echo "| $seed | $prec | $ep | $tt s | $vd |"
            echo "$prec $ep $tt" >>"$d/all"
        else
            vd=$(sed -E 's/.*with val dice ([0-9.]+).*/\1/' <<<"$out")
            echo "| $seed | $prec | not reached in $CAP | - | $vd |"
            echo "$prec $((CAP + 1)) 0" >>"$d/all"
        fi
    done
done
awk '{ n[$1]++; e[$1, n[$1]] = $2; t[$1, n[$1]] = $3 }
     END { for (p in n) { lo = 1e9; hi = 0; tl = 1e9; th = 0
             for (i = 1; i <= n[p]; i++) { if (e[p, i] < lo) lo = e[p, i]; if (e[p, i] > hi) hi = e[p, i]
                                           if (t[p, i] > 0 && t[p, i] < tl) tl = t[p, i]; if (t[p, i] > th) th = t[p, i] }
             printf "RESULT %s: %d..%d epochs, %.1f..%.1f s to target\n", p, lo, hi, tl, th } }' "$d/all" | sort
