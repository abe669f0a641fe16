#!/usr/bin/env bash
# Training-step benchmark: scaffold vs PyTorch on CPU (fp32, batch 1, the same model from
# tools/torch_ref.py, the same thread count), median of repeats, in the same run; plus the
# GFLOP/s reached against the machine's measured SGEMM rate (oneDNN's dnnl_sgemm, 2048^2) and
# FP32 FMA peak (register-only loop).
# Usage: bench/nn/run.sh [REPS] [THREADS]   (defaults 5 and all cores)
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPS=${1:-5}
THREADS=${2:-$(nproc)}
export OMP_NUM_THREADS=$THREADS
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
echo "== nn: one training step (forward, loss, backward, clip, Adam), batch 1, $THREADS threads, median of $REPS"
"$BIN" --peak | tee /tmp/nn_peak.$$
peak=$(awk '/fma_peak_gflops/ {print $2}' /tmp/nn_peak.$$)
sgemm=$(awk '/kernel_sgemm_gflops/ {print $2}' /tmp/nn_peak.$$)
rm -f /tmp/nn_peak.$$
have_torch=1
"$PYTHON" -c "import torch" 2>/dev/null || have_torch=0
if [ "$have_torch" = 1 ]; then
    sg=$("$PYTHON" tools/torch_ref.py sgemm "$THREADS")
    echo "$sg"
    sgemm=$(awk '{print $2}' <<<"$sg")
fi
for cfg in "5 64" "6 16"; do
    set -- $cfg
    s=$("$BIN" --scale "$1" --base "$2" --reps "$REPS")
    echo "scale $1 base $2: $s"
    ts=$(awk '{print $2}' <<<"$s")
    gf=$(awk '{for (i=1;i<=NF;i++) if ($i=="gflops") print $(i+1)}' <<<"$s")
    if [ "$have_torch" = 1 ]; then
        t=$("$PYTHON" tools/torch_ref.py bench "$1" "$2" "$THREADS" "$REPS")
        tt=$(awk '{print $2}' <<<"$t")
        echo "scale $1 base $2: $t"
        awk -v a="$ts" -v b="$tt" -v g="$gf" -v p="$peak" -v q="$sgemm" -v s="$1" -v c="$2" 'BEGIN {
            printf "RESULT scale %s base %s: scaffold %.3f s, PyTorch %.3f s, PyTorch/scaffold = %.2fx; scaffold %.1f GFLOP/s = %.0f%% of SGEMM %.1f, %.0f%% of FMA peak %.1f\n",
                   s, c, a, b, b / a, g, 100 * g / q, q, 100 * g / p, p }'
    else
        echo "RESULT scale $1 base $2: scaffold $ts s (PyTorch not installed: no baseline)"
    fi
done
