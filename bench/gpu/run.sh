#!/usr/bin/env bash
# GPU benchmark of the CUDA backend (issue 12), three parts, all measured in the same run:
#   1. convolutions: for the U-Net's convolutions at scale 5, 6 and 7 (base 64, batch 1), fp32
#      (TF32 off) and bf16, each layer's forward and backward through our ops against the bare
#      cuDNN call with cuDNN's fastest algorithm for the same shape (median of REPS interleaved
#      repeats; bench/gpu/cu_conv.c), in TFLOP/s and as ours/best per layer and per step
#      (target >= 0.70);
#   2. whole training steps (bench/gpu/cu_step.c: forward, loss, backward, clip, Adam through
#      the backend table, batch 1, the input staged from host memory each step) at the same
#      scales and precisions: median step time, and the step's convolution FLOPs (from part 1)
#      over it in TFLOP/s against cuDNN's best throughput on those convolutions
#      (target at 7/64 bf16 on one H200: <= 40 ms);
#   3. time to Dice 0.95: scaffold benchmark on one GPU with configs/quickstart.yml, then the
#      default configuration (scale 7, 5 classes, torch_amp 1), fractal library generated first
#      (not timed); the summary line (it trains until the target). DICE_CONFIGS: other
#      configuration names; DICE_SECONDS: stop each after that many seconds (progress shown).
# Part 1 also measures the fp32 skip convolutions both ways (cu_conv3d_parts: split into two
# cuDNN calls, the default, and gathered into one input with SCAFFOLD_CUDA_SKIP=gather) at the
# largest scale, so that the default can be chosen from a measurement.
# Runs only where a GPU is visible; elsewhere it prints one SKIP line and measures nothing.
# On a GPU machine:   make -j CUDA=1 && bash bench/gpu/run.sh [REPS]
#   SCALES="5 6" for fewer scales; PARTS="1 2" for some parts (PART3=0 is PARTS="1 2");
#   output: RESULT lines (and the benchmark's summary line).
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
BUILD=${BUILD:-build-cuda}
REPS=${1:-5}
BIN=$BUILD/bench/gpu/cu_conv
STEP=$BUILD/bench/gpu/cu_step
if [ ! -x "$BIN" ] || [ ! -x "$STEP" ] || [ ! -x "$BUILD/tests/gpu/cu_ops" ]; then
    echo "SKIP bench gpu: $BUILD has no CUDA backend (build it with make CUDA=1); nothing measured"
    exit 0
fi
if ! probe=$("$BUILD/tests/gpu/cu_ops" --probe 2>&1); then
    echo "SKIP bench gpu: $(grep -E '^no GPU' <<<"$probe" | head -1); nothing measured"
    exit 0
fi
echo "== bench gpu: $probe; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
PARTS=${PARTS:-1 2 3}
[ "${PART3:-1}" = 0 ] && PARTS=${PARTS//3/}
part() { grep -qw "$1" <<<"$PARTS"; }
rc=0
for scale in ${SCALES:-5 6 7}; do
    for prec in "" --bf16; do
        conv="" step=""
        if part 1; then
            conv=$("$BIN" --scale "$scale" --base 64 --reps "$REPS" $prec) || rc=1
            echo "$conv"
        fi
        if part 2; then
            step=$("$STEP" --scale "$scale" --base 64 --reps $((REPS < 10 ? 10 : REPS)) $prec) || rc=1
            echo "$step"
        fi
        [ -n "$conv" ] && [ -n "$step" ] || continue
        # the step's convolution TFLOP and cuDNN's best throughput on them, from cu_conv's total
        awk -v step="$step" -v prec="${prec:+bf16}" '
            /^RESULT scale .* convolutions of one step/ {
                for (i = 1; i <= NF; i++) {
                    if ($(i + 1) == "TFLOP:") tf = $i
                    if ($i == "best" && $(i + 3) == "=") best = $(i + 4)
                }
                split(step, s, " "); for (i = 1; i in s; i++) if (s[i] == "median_ms") ms = s[i + 1]
                if (ms > 0 && tf > 0)
                    printf "RESULT step %s %s: %.2f ms, %.1f TFLOP/s on its convolutions (%.2f TFLOP) vs cuDNN best %.1f TFLOP/s: %.2f of it\n",
                        $3 "/" $5, prec ? prec : "fp32", ms, tf / (ms / 1e3), tf, best, tf / (ms / 1e3) / best
            }' <<<"$conv"
    done
done
if part 1; then
    # the fp32 skip convolutions gathered into one input, against the split default above
    top=$(echo ${SCALES:-5 6 7} | tr ' ' '\n' | sort -n | tail -1)
    echo "== fp32 skip convolutions gathered (SCAFFOLD_CUDA_SKIP=gather), scale $top: compare the (skip) rows and the step total with the split run above"
    SCAFFOLD_CUDA_SKIP=gather "$BIN" --scale "$top" --base 64 --reps "$REPS" | grep -E '\(skip\)|convolutions of one step' || rc=1
fi
if part 3; then
    # each configuration: its fractal library generated first (not timed), then the benchmark
    # on one GPU, its progress streamed (a window that ends it early still shows how far it got)
    # and stopped by SIGTERM after DICE_SECONDS (default: no limit; scaffold checkpoints and
    # exits 143 on TERM). The same configuration on this node's CPUs is not run here (bench/train).
    d=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-gpu-bench.XXXXXX")
    exe="$(cd "$BUILD" && pwd)/scaffold"
    for name in ${DICE_CONFIGS:-quickstart benchmark_default}; do
        cfg="$root/configs/$name.yml"
        echo "== time to Dice 0.95: configs/$name.yml, --device cuda${DICE_SECONDS:+, stopped after $DICE_SECONDS s}"
        (cd "$d" && "$exe" generate_fractals -c "$cfg" >"gen-$name.log" 2>&1) || {
            tail -5 "$d/gen-$name.log"; rc=1; continue; }
        tail -1 "$d/gen-$name.log"
        (cd "$d" && if [ -n "${DICE_SECONDS:-}" ]; then timeout -s TERM "$DICE_SECONDS" "$exe" benchmark -c "$cfg" --device cuda
            else "$exe" benchmark -c "$cfg" --device cuda; fi) 2>&1 | tee "$d/bench-$name.log" |
            grep --line-buffered -E 'model:|epoch [0-9]+:|^benchmark:|signal|error|FAIL|cuda|GPU'
        st=${PIPESTATUS[0]}
        if grep -q '^benchmark: reached' "$d/bench-$name.log"; then
            echo "RESULT time to Dice 0.95 ($name, one GPU): $(sed -n 's/.*time to target \([0-9.]*\) s.*/\1/p' "$d/bench-$name.log") s"
        elif [ "$st" = 124 ] || [ "$st" = 143 ]; then
            echo "RESULT time to Dice 0.95 ($name, one GPU): not reached within $DICE_SECONDS s (last: $(grep -E 'epoch [0-9]+:' "$d/bench-$name.log" | tail -1 | sed 's/^\[[^]]*\]\[[^]]*\] //'))"
        else
            echo "FAIL $name: scaffold benchmark exited $st"; tail -5 "$d/bench-$name.log"; rc=1
        fi
    done
    rm -rf "$d"
fi
exit $rc
