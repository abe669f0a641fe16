#!/usr/bin/env bash
# GPU tests of the CUDA backend, in fp32 (TF32 off) and bf16: every op against the CPU engine
# (tests/gpu/cu_ops.c: convs, GroupNorm, ReLU, MaxPool, concat, layout, loss, Dice, 10 Adam
# steps, SGD, RMSprop, clipping, the loader's staging ring, the NCCL all-reduce), the whole U-Net
# on the backend table against the CPU backend (tests/gpu/cu_unet.c: logits, loss, every
# gradient, 10 Adam steps, evaluation, prediction, a GPU checkpoint loaded on the CPU), and
# compute-sanitizer on the op tests when the toolkit has it (SCAFFOLD_GPU_SANITIZE=0: not).
#
# It runs only where a GPU is visible. Anywhere else it prints one SKIP line and
# "0 passed, 0 failed": a skip is never counted as a pass (tests/run.sh adds 0 to the total).
# On a GPU machine:   make -j CUDA=1 && bash tests/gpu/run.sh
# (BUILD defaults to build-cuda here; `make CUDA=1 test` runs it with the rest of the suite.)
cd "$(dirname "$0")/../.." && BUILD=${BUILD:-build-cuda} && source tests/lib.sh
BIN=$BUILD/tests/gpu/cu_ops
if [ ! -x "$BIN" ]; then
    echo "SKIP gpu: $BUILD has no CUDA backend (build it with make CUDA=1); GPU tests NOT run"
    t_report
    exit 0
fi
probe=$("$BIN" --probe 2>&1)
if [ $? -ne 0 ]; then
    echo "SKIP gpu: $(echo "$probe" | grep -E '^no GPU' | head -1 || echo "$probe"); GPU tests NOT run"
    t_report
    exit 0
fi
echo "$probe"
ngpu=$(awk '/^gpus/ {print $2}' <<<"$probe")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -4
tmp=$(t_tmpdir) # cu_unet writes its checkpoints in the current folder
for prec in fp32 bf16; do
    t_cbin "$BIN" "$prec"
    t_cbin env -C "$tmp" "$(cd "$BUILD" && pwd)/tests/gpu/cu_unet" "$prec"
done
rm -rf "$tmp"
# every own kernel against the CPU engine (bench/gpu/kernels, GPU halves, small shapes)
t_cbin env BUILD="$BUILD" bash bench/gpu/kernels/run.sh --quick --reps 3
# NCCL across ranks needs a GPU per rank.
if [ "${ngpu:-1}" -ge 2 ]; then
    t_cbin $MPIRUN -n 2 "$BIN" fp32
else
    echo "note: one GPU: the NCCL test ran on 1 rank only (2 ranks need 2 GPUs)"
fi
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ "${SCAFFOLD_GPU_SANITIZE:-1}" = 0 ]; then
    echo "note: SCAFFOLD_GPU_SANITIZE=0: compute-sanitizer NOT run here (tools/gpu_window.sh runs it as a stage of its own)"
elif [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
        # NCCL's setup probes kernels of other GPUs (an API error it handles): not counted
        out=$("$CS" --tool $tool --report-api-errors no --error-exitcode 9 "$BIN" fp32 --quick 2>&1); rc=$?
        if [ $rc -eq 0 ] && grep -qE '^[0-9]+ passed, 0 failed' <<<"$out"; then
            t_ok "compute-sanitizer $tool: no errors"
        else
            echo "$out" | grep -vE '^ok' | tail -n 30
            t_fail "compute-sanitizer $tool" "exit $rc"
        fi
    done
else
    echo "note: compute-sanitizer not found: memcheck/racecheck NOT run"
fi
t_report
