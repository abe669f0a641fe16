#!/usr/bin/env bash
# scaffold benchmark: run folder contents, 1 vs 2 ranks, kill/restart, checkpoint crash safety,
# bad inputs at -n 2.
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=1
d=$(t_tmpdir)
root=$PWD
cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml"
cd "$d"
lastrun() { ls -d "$d"/$1/*/ | tail -n 1; }
quiet() { "$@" >/dev/null 2>&1; }

# 1. Two ranks, checkpoints every epoch: every file of the run folder.
out=$($MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runs2 --checkpoint-interval 1 2>&1)
rc=$?
[ $rc -eq 0 ] && t_ok "benchmark -n 2 runs" || t_fail "benchmark -n 2 runs" "$out"
echo "$out" | grep -q "^benchmark: " && t_ok "summary line printed" || t_fail "summary line" "$out"
[ "$(grep -c 'memory plan per rank: parameters .* activations .* per rank, .* for the 2 rank(s) on this node, of ' <<<"$out")" -eq 1 ] \
    && t_ok "memory plan printed once, before data generation" || t_fail "memory plan printed" "$out"
run2=$(lastrun runs2)
t_check "run folder complete (files, CSV, figures, checkpoints)" "$PYTHON" "$root/tests/train/check_run.py" "$run2" 2 1
[ "$(grep -c 'epoch 1:' <<<"$out")" -eq 1 ] && t_ok "one line per epoch on rank 0 only" || t_fail "one line per epoch on rank 0 only"
ino_last=$(stat -c %i "$run2/checkpoints/checkpoint_last.safetensors")
ino_best=$(stat -c %i "$run2/checkpoints/checkpoint_best.safetensors")
[ "$(head -n 1 "$run2/train_stats.csv")" = "epoch,epoch_loss,overall_loss,val_loss_epoch,val_loss_avg,train_dice,val_dice,epoch_duration,optimizer_steps,total_optimizer_steps" ] \
    && t_ok "train_stats.csv has upstream's 10 columns" || t_fail "train_stats.csv header" "$(head -n 1 "$run2/train_stats.csv")"
# best is a hard link to last (same inode) exactly when the last epoch had the lowest validation
# loss so far; otherwise it is the file an earlier last was, never a byte copy.
last_is_best=$(awk -F, 'NR > 1 { last = (NR == 2 || $5 < best); if (last) best = $5 } END { print last }' "$run2/train_stats.csv")
if [ "$last_is_best" = 1 ]; then
    [ "$ino_best" = "$ino_last" ] && t_ok "best is a hard link to last (the last epoch was best)" || t_fail "best is a hard link to last" "inodes $ino_best vs $ino_last"
else
    [ "$ino_best" != "$ino_last" ] && t_ok "best is an earlier epoch's file (the last epoch was not best)" || t_fail "best is an earlier file" "same inode $ino_best"
fi

# Progress inside epochs: none on a small run at the default interval (10 s), one line per step
# (but the last) when the interval is 0, rank 0 only.
[ "$(grep -c ': step [0-9]*/' <<<"$out")" -eq 0 ] && t_ok "no progress lines on a small run" || t_fail "no progress lines on a small run" "$out"
outp=$(SCAFFOLD_PROGRESS_SECONDS=0 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsp --epochs 1 2>&1)
[ $? -eq 0 ] || t_fail "run with progress at interval 0" "$outp"
steps=$(tail -n 1 "$(lastrun runsp)/train_stats.csv" | cut -d, -f9)
np=$(grep -cE 'epoch 1: step [0-9]+/'"$steps"', [0-9.]+ samples/s, [0-9.]+ s elapsed, training ETA [0-9]+ s' <<<"$outp")
[ "$np" -eq $((steps - 1)) ] && t_ok "progress: one line per step at interval 0 ($np for $steps steps)" || t_fail "progress lines at interval 0" "$np lines for $steps steps: $outp"
grep -q 'rank=1.*step' <<<"$outp" && t_fail "progress on rank 0 only" "$outp" || t_ok "progress on rank 0 only"

# A final checkpoint after an epoch the interval skipped carries that epoch's scalars.
t_check "run with checkpoint interval 2, 3 epochs" quiet "$SCAFFOLD" benchmark $cfg --base-run-dir runsfin --checkpoint-interval 2 --epochs 3
t_check "final checkpoint (interval 2, 3 epochs) saves epoch 3's scalars" "$PYTHON" "$root/tests/train/check_run.py" "$(lastrun runsfin)" 3 1

# 2. Same global batch on 1 rank (batch 2) and 2 ranks (batch 1): same first-epoch loss.
out1=$("$SCAFFOLD" benchmark $cfg --base-run-dir runs1 --local-batch-size 2 --epochs 1 2>&1) || t_fail "1-rank run" "$out1"
out2=$($MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runs2b --local-batch-size 1 --epochs 1 2>&1) || t_fail "2-rank run" "$out2"
l1=$(sed -n 2p "$(lastrun runs1)/train_stats.csv" | cut -d, -f3)
l2=$(sed -n 2p "$(lastrun runs2b)/train_stats.csv" | cut -d, -f3)
# DDP averages per-replica losses while one rank averages over its batch, so the CE terms are
# normalised per replica instead of over the whole batch: equal up to that (a few 1e-3 here).
if awk -v a="$l1" -v b="$l2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d/a < 0.02)}'; then
    t_ok "first-epoch loss 1 rank vs 2 ranks ($l1 vs $l2)"
else
    t_fail "first-epoch loss 1 rank vs 2 ranks" "$l1 vs $l2"
fi

# 3. Killed during epoch 2, restart.sh finishes; no duplicate epochs in the CSV.
SCAFFOLD_FAULT_KILL_AT_EPOCH=2 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsk --checkpoint-interval 1 --epochs 3 >/dev/null 2>&1
rc=$?
[ $rc -ne 0 ] && t_ok "the kill in epoch 2 ends the run with a failure (exit $rc)" || t_fail "the kill in epoch 2 ends the run" "exit 0"
rk=$(lastrun runsk)
[ "$(tail -n +2 "$rk/train_stats.csv" | wc -l)" -eq 1 ] && t_ok "run killed in epoch 2 after 1 epoch" || t_fail "killed run state" "$(cat "$rk/train_stats.csv")"
out=$(bash "$rk/restart.sh" 2>&1)
[ $? -eq 0 ] && t_ok "restart.sh resumes and finishes" || t_fail "restart.sh resumes" "$out"
echo "$out" | grep -q "resumed from checkpoint_last: epoch 1" && t_ok "resumed from epoch 1" || t_fail "resumed from epoch 1" "$out"
eps=$(tail -n +2 "$rk/train_stats.csv" | cut -d, -f1 | tr '\n' ' ')
[ "$eps" = "1 2 3 " ] && t_ok "CSV epochs 1 2 3, no duplicates" || t_fail "CSV epochs" "$eps"
t_check "resumed run folder complete" "$PYTHON" "$root/tests/train/check_run.py" "$rk" 3 1
# The resumed epochs equal an uninterrupted run's (deterministic data order and weights).
t_check "uninterrupted reference run" quiet $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsu --checkpoint-interval 1 --epochs 3
ru=$(lastrun runsu)
if [ "$(cut -d, -f1-7 "$rk/train_stats.csv")" = "$(cut -d, -f1-7 "$ru/train_stats.csv")" ]; then
    t_ok "interrupted + resumed run has the same losses as an uninterrupted one"
else
    t_fail "resumed losses" "$(diff <(cut -d, -f1-7 "$rk/train_stats.csv") <(cut -d, -f1-7 "$ru/train_stats.csv"))"
fi

# 4. kill -9 inside a checkpoint write (model file, after the sidecar): no corrupt file under
# the final name; the next start detects the torn pair, renames it *.corrupt and uses best.
( SCAFFOLD_FAULT_KILL_IN_SAVE=2:2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsc --checkpoint-interval 1 --epochs 3 >/dev/null 2>&1 ) 2>/dev/null
rc=$?
[ $rc -eq 137 ] && t_ok "killed inside the save (SIGKILL, exit 137)" || t_fail "killed inside the save" "exit $rc"
rc_=$(lastrun runsc)
ok=1
for f in "$rc_"/checkpoints/*.safetensors; do
    "$PYTHON" - "$f" <<'PY' || ok=0
import json, os, struct, sys
p = sys.argv[1]
with open(p, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
assert os.path.getsize(p) == 8 + n + end, p
PY
done
[ $ok -eq 1 ] && t_ok "no torn checkpoint under a final name after kill -9 in a save" || t_fail "torn checkpoint under a final name"
ls -a "$rc_/checkpoints" | grep -q '\.tmp\.' && t_ok "the interrupted write is only a temporary file" || t_fail "temporary file of the interrupted write"
out=$(bash "$rc_/restart.sh" 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "resumed from checkpoint_best" && t_ok "torn last pair detected, best used, run finished" || t_fail "torn last pair detected" "exit $rc: $out"
ls "$rc_/checkpoints" | grep -q 'corrupt' && t_ok "torn pair renamed *.corrupt" || t_fail "torn pair renamed *.corrupt"
# The killed writer's temporary is removed by the resume (it used to stay forever).
ls -a "$rc_/checkpoints" | grep -q '\.tmp\.' && t_fail "resume removed the dead writer's temporary" "$(ls -a "$rc_/checkpoints")" \
    || t_ok "resume removed the dead writer's temporary"
echo "$out" | grep -q "removed 1 temporary file(s) of an interrupted save" && t_ok "the removal is reported" || t_fail "the removal is reported" "$out"

# 5. data_store: memory (the in-memory store as the data path) gives the same losses as files.
$MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsm --data-store memory > "$d/mem.log" 2>&1
rc=$?
t_check "files reference run for the memory store" quiet $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsf
[ $rc -eq 0 ] && grep -q "data_store memory" "$d/mem.log" && t_ok "memory store loaded, run finished" || t_fail "memory store loaded" "exit $rc: $(cat "$d/mem.log")"
if [ "$(cut -d, -f1-7 "$(lastrun runsm)/train_stats.csv")" = "$(cut -d, -f1-7 "$(lastrun runsf)/train_stats.csv")" ]; then
    t_ok "data_store memory: same train_stats.csv losses as file loading"
else
    t_fail "data_store memory losses" "$(diff <(cut -d, -f1-7 "$(lastrun runsm)/train_stats.csv") <(cut -d, -f1-7 "$(lastrun runsf)/train_stats.csv"))"
fi

# 7. CPU use: a warning when threads share cores (a launcher's binding, or more threads than
# CPUs) or a binding leaves CPUs idle; none for a plain single-process run.
ncpu=$(getconf _NPROCESSORS_ONLN)
cpuwarn() { grep -E "OpenMP threads|stay idle" <<<"$1"; }
out=$(OMP_NUM_THREADS=$ncpu "$SCAFFOLD" benchmark $cfg --base-run-dir runscpu --epochs 1 2>&1)
[ -z "$(cpuwarn "$out")" ] && t_ok "cpu use: no warning for one process on all CPUs" || t_fail "cpu use: spurious warning" "$out"
out=$(OMP_NUM_THREADS=$((2 * ncpu)) "$SCAFFOLD" benchmark $cfg --base-run-dir runscpu --epochs 1 2>&1)
grep -q "run $((2 * ncpu)) OpenMP threads on $ncpu CPU(s).*OMP_NUM_THREADS=$ncpu" <<<"$out" \
    && t_ok "cpu use: more threads than CPUs" || t_fail "cpu use: more threads than CPUs" "$out"
if $MPIRUN --version 2>&1 | grep -q "Open MPI" && [ "$ncpu" -ge 2 ]; then
    out=$(OMP_NUM_THREADS=2 $MPIRUN -n 1 --bind-to core "$SCAFFOLD" benchmark $cfg --base-run-dir runscpu --epochs 1 2>&1)
    grep -q "1 of the 1 rank(s) on this node run more OpenMP threads than the CPUs they are bound to.*--bind-to none" <<<"$out" \
        && t_ok "cpu use: threads over a bound core (Open MPI --bind-to core)" || t_fail "cpu use: bound threads" "$out"
    out=$(OMP_NUM_THREADS=1 $MPIRUN -n 1 --bind-to core "$SCAFFOLD" benchmark $cfg --base-run-dir runscpu --epochs 1 2>&1)
    grep -q "bound to 1 of the $ncpu CPUs their launcher may use, so $((ncpu - 1)) stay idle" <<<"$out" \
        && t_ok "cpu use: a binding that leaves CPUs idle" || t_fail "cpu use: idle CPUs" "$out"
fi

# 6. Bad inputs at -n 2: one clear message, same exit status on all ranks, no hang.
t_expect_fail "global batch larger than the validation set" 2 "global batch size 4 .* exceeds the validation set" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad --local-batch-size 2
t_expect_fail "world size not divisible by the shard count" 2 "world size 2 is not divisible by the number of spatial shards 4" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad --dc-num-shards 4 1 1
touch afile
t_expect_fail "unwritable run directory" 1 "afile" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir afile/runs
dsfile=$(find datasets -name '*_mask.npy' | grep training | head -n 1)
rm -f "$dsfile"
t_expect_fail "missing dataset file" 1 "$(basename "$dsfile")" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad
out=$(timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad --local-batch-size 2 2>&1)
[ "$(grep -c 'scaffold benchmark:' <<<"$out")" -eq 1 ] && t_ok "error printed once (rank 0)" || t_fail "error printed once" "$out"
t_expect_fail "read failure on rank 1 mid-epoch: agreed, no hang" 1 "rank 1.*injected read failure|injected read failure at training step 3 on rank 1" \
    env SCAFFOLD_FAULT_FAIL_STEP=1:3 timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg \
    --base-run-dir runsbad --warmup-batches 0 --dataset-dir ds_fault
t_expect_fail "--restart without --run-dir" 2 "needs --run-dir" "$SCAFFOLD" benchmark $cfg --restart

# 8. Step-level parity with upstream's training in PyTorch, and the options behind it.
source "$root/tests/train/parity.sh"
cd "$root"
rm -rf "$d"
t_report
