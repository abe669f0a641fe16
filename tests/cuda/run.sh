#!/usr/bin/env bash
# The CUDA backend's checks that need no GPU, in every build:
#  - a build without the backend refuses device: cuda (naming the key and make CUDA=1) and any
#    other bad value, and accepts cpu and auto;
#  - a CUDA build (make CUDA=1): the host-side unit tests (tests/cuda/cu_host.c: device
#    selection, local rank variables, algorithm cache, bucket plan, slab, shape limits,
#    workspace plans) on 1 and 2 ranks, tests/gpu/cu_unet --devmem (the GPU whole-U-Net test
#    with the CPU engine in place of CUDA: a check of the test itself), and the benchmark on a
#    machine without a usable GPU says so once and trains on the CPU, while device: cuda is
#    refused with exit status 2.
#  - in every build, the training loop on a device backend's discipline (SCAFFOLD_DEVMEM=1: the
#    CPU engine with memory of its own, so every upload, download and staging of the loop is
#    exercised): 1 and 2 ranks, bf16 with activation checkpointing, and a resume, each equal to
#    the plain CPU run (statistics and checkpoint tensors bit for bit);
#  - tests/cuda/test_backend: the operation table and the model's copies (any build);
#  - the per-kernel harness's CPU references (bench/gpu/kernels/run.sh --cpu-only) and
#    tools/gpu_window.sh (its deadline handling, and its dry run on this machine).
# The op-by-op GPU tests are tests/gpu/run.sh (skipped where no GPU is visible).
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=1
root=$PWD
cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml"
d=$(t_tmpdir)
cd "$d"
t_expect_fail "device: bad value refused" 2 "\-\-device: must be 'cpu', 'cuda' or 'auto', got 'gpu'" \
    "$SCAFFOLD" benchmark $cfg --device gpu
printf 'device: tpu\n' > bad.yml
t_expect_fail "device: bad value in a file names the file and key" 2 "bad.yml: key 'device': must be" \
    "$SCAFFOLD" benchmark $cfg -c bad.yml
if [ ! -x "$root/$BUILD/tests/cuda/cu_host" ]; then
    t_expect_fail "device: cuda refused without the CUDA backend" 2 \
        "--device: 'cuda' needs a build with the CUDA backend: rebuild with 'make CUDA=1'" \
        "$SCAFFOLD" benchmark $cfg --device cuda
    out=$("$SCAFFOLD" benchmark $cfg --device auto --epochs 1 --base-run-dir runs 2>&1)
    if [ $? -eq 0 ] && ! grep -q "device" <<<"$out"; then
        t_ok "device: auto trains on the CPU, silently, without the backend"
    else
        t_fail "device: auto without the backend" "$out"
    fi
    echo "note: not a CUDA build ($BUILD): the host-side CUDA unit tests run with make CUDA=1"
else
    t_cbin "$root/$BUILD/tests/cuda/cu_host"
    t_cbin $MPIRUN -n 2 "$root/$BUILD/tests/cuda/cu_host"
    # The GPU's whole-U-Net test program on the CPU engine in its place: its own flow checked.
    t_cbin "$root/$BUILD/tests/gpu/cu_unet" fp32 --devmem
    t_cbin "$root/$BUILD/tests/gpu/cu_unet" bf16 --devmem
    # tools/gpu_bundle.sh: the build packed for a GPU node without this machine's libraries; its
    # contents, then scaffold and a 2-rank mpirun from it with the system's Open MPI, PMIx,
    # libyaml and cairo hidden in a mount namespace (skipped where none can be made).
    if bash "$root/tools/gpu_bundle.sh" --build "$BUILD" --out "$d/bundle.tar.gz" >"$d/bundle.log" 2>&1; then
        list=$(tar tzf "$d/bundle.tar.gz")
        miss=""
        for f in scaffold tests/gpu/cu_ops tests/gpu/cu_unet bench/gpu/cu_step runtime/env.sh \
            runtime/lib/libmpi.so.40 runtime/lib/libyaml-0.so.2 runtime/lib/libcairo.so.2 \
            runtime/ompi/bin/orterun runtime/ompi/bin/orted; do
            grep -qx "$BUILD/$f" <<<"$list" || miss="$miss $f"
        done
        grep -qE '/(libc|libm|libstdc\+\+|libcuda|libcudnn|libnccl)\.so' <<<"$list" &&
            miss="$miss (it packs the C or C++ runtime, the driver or cuDNN/NCCL)"
        [ -z "$miss" ] && t_ok "gpu bundle: programs, libraries, Open MPI ($(tail -n 1 "$d/bundle.log" | sed 's/.*: //'))" ||
            t_fail "gpu bundle: contents" "missing:$miss"
        mkdir -p "$d/node" && tar xzf "$d/bundle.tar.gz" -C "$d/node"
        real() { readlink -f "$(ldd "$root/$BUILD/scaffold" | awk -v l="$1" '$1 ~ l {print $3}')"; }
        pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
        pmix=$(ldd "$pkglib/mca_pmix_ext3x.so" 2>/dev/null | awk '/libpmix/ {print $3}')
        hide_dirs="$pkglib $(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')"
        [ -n "$pmix" ] && hide_dirs="$hide_dirs $(dirname "$(dirname "$(readlink -f "$pmix")")")/lib/pmix"
        hide_files="$(real libmpi) $(real libyaml) $(real libcairo) ${pmix:+$(readlink -f "$pmix")} $(command -v orted) $(command -v orterun)"
        if unshare -m true 2>/dev/null; then
            out=$(cd "$d/node" && unshare -m bash -c '
                for x in $1; do [ -d "$x" ] && [ "${x#/}" != "$x" ] && [ "$x" != / ] && mount -t tmpfs none "$x"; done
                for x in $2; do [ -f "$x" ] && mount --bind /dev/null "$x"; done
                source "$3/runtime/env.sh" >/dev/null
                ldd "$3/scaffold" | grep -E "libmpi|libyaml" | sed "s/ (0x.*//"
                "$3/scaffold" --version
                mpirun -n 2 "$3/tests/gpu/cu_ops" --probe' hide "$hide_dirs" "$hide_files" "$BUILD" 2>&1)
            if grep -q "libmpi.so.40 => $d/node/$BUILD/runtime/lib/" <<<"$out" &&
                grep -q "libyaml-0.so.2 => $d/node/$BUILD/runtime/lib/" <<<"$out" &&
                grep -q '^scaffold ' <<<"$out" && [ "$(grep -c '^no GPU visible\|^gpus ' <<<"$out")" = 2 ]; then
                t_ok "gpu bundle: scaffold and mpirun -n 2 run from it with the system's Open MPI hidden"
            else
                t_fail "gpu bundle: run with the system's libraries hidden" "$out"
            fi
        else
            echo "note: no mount namespace here (unshare -m): the bundle's run with the system's libraries hidden NOT checked"
        fi
    elif grep -q "not Open MPI" "$d/bundle.log"; then
        echo "note: gpu bundle: this build's MPI is not Open MPI: not packed, NOT checked"
    else
        t_fail "gpu bundle" "$(tail -n 3 "$d/bundle.log")"
    fi
    if "$root/$BUILD/tests/gpu/cu_ops" --probe >/dev/null 2>&1; then
        echo "note: a GPU is visible: the no-GPU fallback checks below are NOT run here"
    else
        out=$($MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --epochs 1 --base-run-dir runs 2>&1)
        rc=$?
        n=$(grep -c "device auto: no GPU visible" <<<"$out")
        if [ $rc -eq 0 ] && [ "$n" -eq 1 ] && grep -q "^benchmark: " <<<"$out"; then
            t_ok "no GPU: the benchmark (2 ranks) says so once and trains on the CPU"
        else
            t_fail "no-GPU fallback" "exit $rc, $n notes: $out"
        fi
        t_expect_fail "no GPU: device: cuda refused" 2 "key 'device': cuda, but no GPU is visible" \
            "$SCAFFOLD" benchmark $cfg --device cuda
        out=$("$SCAFFOLD" benchmark $cfg --device cpu --epochs 1 --base-run-dir runsc 2>&1)
        if [ $? -eq 0 ] && ! grep -q "device" <<<"$out"; then
            t_ok "device: cpu trains without probing or a note"
        else
            t_fail "device: cpu" "$out"
        fi
    fi
fi
# The per-kernel harness (bench/gpu/kernels): every program's CPU reference against its
# independent formula (both builds; the GPU halves say SKIP here), and the harness's own
# failure path: with every compared result perturbed, every check fails and run.sh exits 1.
t_cbin env BUILD="$BUILD" bash "$root/bench/gpu/kernels/run.sh" --cpu-only --quick
out=$(KH_PERTURB=1 BUILD="$BUILD" bash "$root/bench/gpu/kernels/run.sh" --cpu-only --quick \
    --only "relu loss argmax" 2>&1)
rc=$?
if [ $rc = 1 ] && grep -qE '^0 passed, [1-9][0-9]* failed' <<<"$out" &&
    [ "$(grep -c ' FAIL ' <<<"$out")" -ge 5 ]; then
    t_ok "kernel harness: perturbed results fail every check (exit 1)"
else
    t_fail "kernel harness: perturbed results" "exit $rc: $(tail -n 5 <<<"$out")"
fi
t_expect_fail "kernel harness: bad option" 2 "unknown option '--bogus'" \
    bash "$root/bench/gpu/kernels/run.sh" --bogus
# tools/gpu_window.sh: its deadline handling (a stage past its budget is killed with its
# children, later stages are skipped, the summary is written) on synthetic stages, and its dry
# run on this machine: the CPU parts run, the GPU stages reach their SKIP or are shown.
t_cbin bash "$root/tools/gpu_window.sh" --self-test --seconds 10 --out "$d/selftest"
t_expect_fail "gpu window: bad --seconds" 2 "at least 30" bash "$root/tools/gpu_window.sh" --seconds 10
t_expect_fail "gpu window: unknown stage" 2 "no stage 'bogus'" \
    bash "$root/tools/gpu_window.sh" --dry-run --only bogus
if [ -x "$root/$BUILD/tests/cuda/cu_host" ]; then
    only=() # a CUDA build: the whole dry run (its build stage finds everything up to date)
    want="^2 +build +passed"
else
    only=(--only kernels,gpu-tests,step-bench) # no CUDA toolkit needed
    want="^4 +kernels +passed"
fi
out=$(BUILD="$BUILD" bash "$root/tools/gpu_window.sh" --dry-run --seconds 300 --out "$d/dry" \
    "${only[@]}" 2>&1)
rc=$?
sum=$(cat "$d/dry/summary.txt" 2>/dev/null)
if [ $rc = 0 ] && grep -qE "$want" <<<"$sum" && grep -qE '^4 +kernels +passed' <<<"$sum" &&
    grep -qE '^5 +gpu-tests +(skipped \(no GPU|passed)' <<<"$sum" &&
    grep -qE '^0 passed, 0 failed|^[0-9]+ passed, 0 failed' "$d/dry/04-kernels.log" &&
    [ -s "$d/dry/env.txt" ]; then
    t_ok "gpu window: dry run ($(tail -n 1 <<<"$sum"))"
else
    t_fail "gpu window: dry run" "exit $rc: $out"
fi
# The training loop on a device backend's discipline against the plain CPU run.
t_cbin "$root/$BUILD/tests/cuda/test_backend"
stats() { cut -d, -f1-7,9- "$1"/train_stats.csv; } # all but epoch_duration
same_run() { # NAME DIR_A DIR_B
    local a=$2 b=$3 ok=1
    [ "$(stats "$a")" = "$(stats "$b")" ] && [ -n "$(stats "$a")" ] || ok=0
    for f in "$a"/checkpoints/*.safetensors; do
        [ -e "$f" ] && "$PYTHON" "$root/tests/cuda/stcmp.py" "$f" "$b/checkpoints/${f##*/}" || ok=0
    done
    [ $ok = 1 ] && t_ok "$1" || t_fail "$1" "$(diff <(stats "$a") <(stats "$b") | head -5)"
}
dm=(--epochs 2 --checkpoint-interval 1)
for v in "1 fp32" "2 fp32" "1 bf16"; do
    set -- $v
    extra=()
    [ "$2" = bf16 ] && extra=(--torch-amp 1 --activation-checkpointing 1)
    $MPIRUN -n "$1" "$SCAFFOLD" benchmark $cfg "${dm[@]}" "${extra[@]}" --base-run-dir "cpu$1$2" \
        >/dev/null 2>&1
    out=$(SCAFFOLD_DEVMEM=1 $MPIRUN -n "$1" "$SCAFFOLD" benchmark $cfg "${dm[@]}" "${extra[@]}" \
        --base-run-dir "dev$1$2" 2>&1)
    n=$(grep -c "SCAFFOLD_DEVMEM=1" <<<"$out")
    [ "$n" = 1 ] || t_fail "devmem $1 rank(s) $2: one note" "$n notes"
    same_run "devmem backend = CPU engine: $1 rank(s), $2${extra:+, activation checkpointing}" \
        cpu$1$2/benchmark_* dev$1$2/benchmark_*
done
# A resume on the device: the loaded state must be uploaded before training goes on.
SCAFFOLD_DEVMEM=1 "$SCAFFOLD" benchmark $cfg --epochs 1 --checkpoint-interval 1 \
    --base-run-dir devr >/dev/null 2>&1
r=$(echo devr/benchmark_*)
SCAFFOLD_DEVMEM=1 "$SCAFFOLD" benchmark $cfg "${dm[@]}" --restart --run-dir "$r" >/dev/null 2>&1
same_run "devmem backend: a resumed run = the uninterrupted CPU run" cpu1fp32/benchmark_* "$r"
cd "$root" && rm -rf "$d"
t_report
