# Step-level parity with upstream's training in PyTorch (sourced by tests/train/run.sh, in its
# temporary folder, with $root, $SCAFFOLD, $MPIRUN, $PYTHON and the t_* helpers).
#
# From the same initial weights, on the same samples in the same order, scaffold's per-step
# training losses and soft Dice, and its per-epoch training loss, validation loss and validation
# hard Dice, equal those of PyTorch in float64 within measured fp32 noise
# (tests/train/fixtures/parity.json, made by tools/train_parity_ref.py with
# bench/train/torch_train.py; tests/train/check_parity.py says how close). Three variants: one
# rank through a cosine step and a warm restart (3 epochs, T_0 2), two replicas (DDP's mean
# gradient), batch 2. scaffold's warmup (1 batch) runs and is rolled back; the reference has none,
# so a rollback that left anything behind fails here. Then the options' bad inputs and resume.
pcfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/parity.yml"
pfix="$root/tests/train/fixtures/parity.json"
parity_run() { # NAME RANKS FLAGS...: a run with both parity outputs; prints its run folder
    local name=$1 n=$2; shift 2
    local launch=()
    [ "$n" -gt 1 ] && launch=($MPIRUN -n "$n")
    "${launch[@]}" "$SCAFFOLD" benchmark $pcfg --base-run-dir "par_$name" --dataset-dir par_ds \
        --fract-base-dir par_fr --save-initial-weights "par_$name.safetensors" \
        --save-sample-order "$@" >"par_$name.log" 2>&1 || { cat "par_$name.log"; return 1; }
    ls -d "$d/par_$name"/*/ | tail -n 1
}
for v in "r1b1 1 --epochs 3" "r2b1 2 --epochs 2" "r1b2 1 --epochs 2 --local-batch-size 2"; do
    read -r name n flags <<<"$v"
    if ! pr=$(parity_run "$name" "$n" $flags); then
        t_fail "parity $name: scaffold run" "$pr"
        continue
    fi
    out=$("$PYTHON" "$root/tests/train/check_parity.py" "$pfix" "$name" "$pr" "par_$name.safetensors" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && t_ok "parity with PyTorch, $name (${out#*: })" || t_fail "parity with PyTorch, $name (exit $rc)" "$out"
done

# The files themselves: upstream's tensor names (strict load in PyTorch: tests/nn), the order of
# every replica and step.
pr=$(ls -d "$d"/par_r2b1/*/ | tail -n 1)
[ "$(head -n 1 "$pr/sample_order.csv")" = "epoch,step,replica,samples,loss,dice" ] \
    && [ "$(tail -n +2 "$pr/sample_order.csv" | wc -l)" -eq 12 ] \
    && [ "$(cut -d, -f3 "$pr/sample_order.csv" | grep -c '^1$')" -eq 6 ] \
    && t_ok "sample_order.csv: a row per step and replica (2 epochs x 3 steps x 2 replicas)" \
    || t_fail "sample_order.csv rows" "$(cat "$pr/sample_order.csv")"
"$PYTHON" - "$d/par_r1b1.safetensors" <<'PY' && t_ok "initial weights: upstream state_dict names, metadata names the seed" || t_fail "initial weights file"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
meta = h.pop("__metadata__")
assert meta["seed"] == "42" and meta["source"] == "scaffold initial weights", meta
assert "down_list.0.double_conv.0.weight" in h and "up_list.2.conv.bias" in h, sorted(h)
assert not any(k.startswith("exp_avg") for k in h)
PY
# The harness's port of scaffold's sampler (--sampler scaffold) gives the recorded order.
if "$PYTHON" -c "import torch" 2>/dev/null; then
    "$PYTHON" - "$root/bench/train" "$pr/sample_order.csv" "$d/par_ds" <<'PY' && t_ok "harness --sampler scaffold reproduces sample_order.csv (2 replicas)" || t_fail "harness --sampler scaffold"
import csv, glob, os, sys
sys.path.insert(0, sys.argv[1])
from torch_train import sampler_steps
rows = list(csv.DictReader(open(sys.argv[2])))
ids = sorted(f.split("_shard")[0] for f in os.listdir(glob.glob(sys.argv[3] + "/*/*/volumes/training")[0]))
got = [(str(e), str(k + 1), str(r), " ".join(ids[i] for i in st[r]))
       for e in (1, 2) for k, st in enumerate(sampler_steps(len(ids), 2, 1, 42, e, "scaffold")) for r in range(2)]
assert got == [(r["epoch"], r["step"], r["replica"], r["samples"]) for r in rows], (got, rows)
PY
else
    echo "SKIP harness sampler port check: no torch for $PYTHON (bash tools/setup.sh --test)"
fi

# Bad inputs: refused before anything is written, exit 2, naming the option and the path.
touch par_file
t_expect_fail "--save-initial-weights under a file: refused" 2 "save-initial-weights par_file/w.safetensors" \
    "$SCAFFOLD" benchmark $pcfg --base-run-dir par_bad --save-initial-weights par_file/w.safetensors
t_expect_fail "--save-initial-weights naming a directory: refused" 2 "save-initial-weights: 'par_ds' is not a file name" \
    "$SCAFFOLD" benchmark $pcfg --base-run-dir par_bad --save-initial-weights par_ds
[ ! -e par_bad ] && t_ok "nothing written for a refused option" || t_fail "nothing written for a refused option" "$(ls -R par_bad)"
t_expect_fail "--save-sample-order takes no value" 2 "unexpected argument 'yes'" \
    "$SCAFFOLD" benchmark $pcfg --base-run-dir par_bad --save-sample-order yes

# Resume: checkpoints every 2 epochs, killed in epoch 4, so epoch 3's rows are in the order file
# but not in the checkpoint; resumed with the options, the run trains epochs 3 and 4 again. The
# file must then hold each epoch once and equal an uninterrupted run's (same order, same losses).
# A resumed run's weights are not initial: none are written, a warning says so.
( SCAFFOLD_FAULT_KILL_AT_EPOCH=4 "$SCAFFOLD" benchmark $pcfg --base-run-dir par_k --dataset-dir par_ds \
    --fract-base-dir par_fr --checkpoint-interval 2 --epochs 4 --save-sample-order >/dev/null 2>&1 ) 2>/dev/null
pk=$(ls -d "$d"/par_k/*/ | tail -n 1)
[ "$(tail -n 1 "$pk/sample_order.csv" | cut -d, -f1)" = 3 ] && t_ok "killed run: epoch 3's rows written, its checkpoint not" \
    || t_fail "killed run's order file" "$(cat "$pk/sample_order.csv")"
out=$(bash "$pk/restart.sh" --save-sample-order --save-initial-weights "$d/par_resumed.safetensors" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "resumes after epoch 2, so its weights are not initial" <<<"$out" && [ ! -e par_resumed.safetensors ] \
    && t_ok "resume: no initial weights written, a warning says why" || t_fail "resume with --save-initial-weights" "exit $rc: $out"
pu=$(parity_run u 1 --epochs 4) || t_fail "uninterrupted reference run" "$pu"
if [ "$(cut -d, -f1-6 "$pk/sample_order.csv")" = "$(cut -d, -f1-6 "$pu/sample_order.csv")" ]; then
    t_ok "resume: sample_order.csv has each epoch once and equals an uninterrupted run's"
else
    t_fail "resume: sample_order.csv" "$(diff "$pk/sample_order.csv" "$pu/sample_order.csv")"
fi
