#!/usr/bin/env bash
# Command-line behaviour across subcommands: the sweep of malformed invocations
# (tests/cli/bad_inputs.sh: exit 2, one line, nothing written), the messages of predict on
# non-finite input and on a directory given as a file, the memory plan's refusal, and the
# split of tools/setup.sh.
cd "$(dirname "$0")/../.." && source tests/lib.sh
d=$(t_tmpdir)
trap 'rm -rf "$d"' EXIT
"$BUILD/tests/nn/test_unet" --write-ckpt "$d/c.safetensors" >/dev/null 2>&1 || t_fail "write a checkpoint"
t_cbin bash tests/cli/bad_inputs.sh "$d/c.safetensors"

"$PYTHON" - "$d" <<'PY'
import sys, numpy as np
d = sys.argv[1]
np.save(d + "/nan.npy", np.full((3, 8, 8, 8), np.nan, np.float32))
v = np.ones((3, 8, 8, 8), np.float32); v[1, 2, 3, 4] = -np.inf; v[2, 0, 0, 0] = np.nan
np.save(d + "/two.npy", v)
np.save(d + "/ok.npy", np.ones((3, 8, 8, 8), np.float32))
PY
# predict on non-finite input: rejected with the count, no mask written (it used to report
# "foreground 19.53%" and write one).
t_expect_fail "predict: all-NaN volume rejected with the count" 2 "nan.npy: 1536 of 1536 values are not finite" \
    "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/nan.npy" --mask "$d/m.npy"
t_expect_fail "predict: two non-finite voxels counted" 2 "two.npy: 2 of 1536 values are not finite" \
    "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/two.npy" --mask "$d/m.npy"
[ ! -e "$d/m.npy" ] && t_ok "predict: no mask for a non-finite volume" || t_fail "predict: no mask for a non-finite volume"
# A truncated input is the user's file: the message says what is wrong with it, not "delete it and
# regenerate" (advice for the files the program makes).
"$PYTHON" -c "import numpy as np, sys; np.save(sys.argv[1], np.zeros((3, 8, 8, 8), np.float32))" "$d/tr.npy"
truncate -s 2000 "$d/tr.npy"
out=$("$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/tr.npy" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "tr.npy: truncated .npy file: header promises 6144 data bytes, file has 1872; --input must be a whole .npy file" <<<"$out" \
    && ! grep -q regenerate <<<"$out" && t_ok "predict: a truncated input is described, not to be regenerated" || t_fail "predict: truncated input" "rc=$rc $out"
t_check "predict: a finite volume still works" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/ok.npy" --mask "$d/m.npy"
# A directory where a file is expected is named as such (it was "too short ... (9223372036854775807 bytes)").
mkdir -p "$d/adir"
t_expect_fail "predict: directory as --checkpoint" 2 "--checkpoint .*adir is a directory" \
    "$SCAFFOLD" predict --checkpoint "$d/adir" --input "$d/ok.npy"
t_expect_fail "predict: directory as --input" 2 "adir: Is a directory" \
    "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/adir"
t_expect_fail "config: directory as -c" 2 "adir: Is a directory" "$SCAFFOLD" generate_fractals -c "$d/adir"
# The memory plan refuses, before anything is written, a run no node can hold (4096^3 voxels
# per sample), naming the estimate, the node's memory and the fixes; an option already set is
# not suggested again.
printf 'problem_scale: 12\nunet_bottleneck_dim: 3\nfract_base_dir: %s/mp/fr\ndataset_dir: %s/mp/ds\nbase_run_dir: %s/mp/runs\n' \
    "$d" "$d" "$d" > "$d/mp.yml"
t_expect_fail "memory plan: a run larger than the node refused" 2 \
    "needs an estimated [0-9.]+ TiB per rank \(activations .* for batch 1 of 4096x4096x4096 voxels.*more than its [0-9.]+ [GT]iB of memory; .*dc_num_shards.*activation_checkpointing: 1" \
    "$SCAFFOLD" benchmark -c configs/benchmark_default.yml -c "$d/mp.yml"
out=$("$SCAFFOLD" benchmark -c configs/benchmark_default.yml -c "$d/mp.yml" --activation-checkpointing 1 2>&1)
grep -q "more than its" <<<"$out" && ! grep -q "activation_checkpointing" <<<"$out" \
    && t_ok "memory plan: activation_checkpointing not suggested when it is on" || t_fail "memory plan: suggestions" "$out"
# The plan is the engine's: its activation figure (fp32) is nn_unet_memory_estimate's, and
# activation checkpointing lowers it.
act() { sed -n 's/.*(activations \([0-9.]*\) TiB for batch.*/\1/p' <<<"$1"; }
plain=$(act "$("$SCAFFOLD" benchmark -c configs/benchmark_default.yml -c "$d/mp.yml" --torch-amp 0 2>&1)")
ckpt=$(act "$("$SCAFFOLD" benchmark -c configs/benchmark_default.yml -c "$d/mp.yml" --torch-amp 0 --activation-checkpointing 1 2>&1)")
eng=$("$BUILD/tests/nn/test_unet" --activation-mib 4096 4096 4096 64 9 0)
t_check "memory plan: activations are the engine's estimate ($plain TiB)" "$PYTHON" -c \
    "import sys; p, e = float(sys.argv[1]), float(sys.argv[2]) / 2**20; sys.exit(abs(p - e) > 0.005 * e)" "$plain" "$eng"
t_check "memory plan: checkpointing lowers the activations ($ckpt < $plain TiB)" "$PYTHON" -c \
    "import sys; sys.exit(not 0 < float(sys.argv[1]) < 0.6 * float(sys.argv[2]))" "$ckpt" "$plain"
[ ! -e "$d/mp" ] && t_ok "memory plan: nothing written by a refused run" || t_fail "memory plan: nothing written" "$(ls -R "$d/mp")"
# tools/setup.sh: building and running need no test tools (it used to install Chromium and
# PyTorch for `make run`); --test adds them.
run_pk=$(bash tools/setup.sh --list)
test_pk=$(bash tools/setup.sh --test --list)
if grep -qxE 'python3(-numpy|-torch|-yaml)?|chromium|clang|mpich|libmpich-dev' <<<"$run_pk"; then
    t_fail "setup without --test installs only build and run packages" "$(tr '\n' ' ' <<<"$run_pk")"
else
    t_ok "setup without --test installs only build and run packages"
fi
missing=""
for p in libopenmpi-dev libyaml-dev python3-torch python3-numpy chromium clang libmpich-dev; do
    grep -qx "$p" <<<"$test_pk" || missing="$missing $p"
done
[ -z "$missing" ] && t_ok "setup --test adds the test tools" || t_fail "setup --test adds the test tools" "missing:$missing"
t_report
