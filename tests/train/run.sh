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
# files_state DIR: names, sizes, times and inodes of every file below DIR (not the folders, whose
# times the pre-flight's probe of a writable folder moves).
files_state() { find "$1" -type f -printf '%P %s %T@ %i\n' | sort | md5sum; }

# 1. Two ranks, checkpoints every epoch: every file of the run folder.
out=$($MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runs2 --checkpoint-interval 1 2>&1)
rc=$?
[ $rc -eq 0 ] && t_ok "benchmark -n 2 runs" || t_fail "benchmark -n 2 runs" "$out"
echo "$out" | grep -q "^benchmark: " && t_ok "summary line printed" || t_fail "summary line" "$out"
grep -Eq '^benchmark: .*; threads waiting for a CPU [0-9]+\.[0-9]% \(max\); precision fp32; run folder ' <<<"$out" \
    && t_ok "summary line: the threads' wait for a CPU" || t_fail "summary line: wait for a CPU" "$out"
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
# A figure writer killed before its rename (the temporary of a process that is gone) is debris
# the resume removes; a live writer's temporary is kept.
dead=$(sh -c 'echo $$')
touch "$rk/figures/.val_dice.png.tmp.$dead.0" "$rk/figures/.val_loss.png.tmp.$$.0"
out=$(bash "$rk/restart.sh" 2>&1)
[ $? -eq 0 ] && t_ok "restart.sh resumes and finishes" || t_fail "restart.sh resumes" "$out"
[ ! -e "$rk/figures/.val_dice.png.tmp.$dead.0" ] && [ -e "$rk/figures/.val_loss.png.tmp.$$.0" ] &&
    t_ok "resume removed a dead figure writer's temporary, kept a live one's" || t_fail "figure debris" "$(ls -a "$rk/figures")"
rm -f "$rk/figures/.val_loss.png.tmp.$$.0"
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

# 4. kill -9 inside a checkpoint write (the model file, after the sidecar): the new pair is
# written in the staging folder, so the previous pair is untouched and the next start resumes
# from it (it used to find a torn last pair, rename it *.corrupt and fall back to best).
( SCAFFOLD_FAULT_KILL_IN_SAVE=2:2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsc --checkpoint-interval 1 --epochs 3 >/dev/null 2>&1 ) 2>/dev/null
rc=$?
[ $rc -eq 137 ] && t_ok "killed inside the save (SIGKILL, exit 137)" || t_fail "killed inside the save" "exit $rc"
rc_=$(lastrun runsc)
# pair_ids DIR: "model-id sidecar-id" of checkpoint_last and of checkpoint_best, then "torn" for
# any file under a final name whose size is not its header's.
pair_ids() {
    "$PYTHON" - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
out = []
for tag in ("last", "best"):
    ids = []
    for suf in ("", ".optim"):
        p = os.path.join(d, f"checkpoint_{tag}{suf}.safetensors")
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
        if os.path.getsize(p) != 8 + n + end:
            out.append("torn")
        ids.append(h["__metadata__"]["pair_id"])
    out.append(" ".join(ids))
print(" | ".join(out))
PY
}
consistent() { awk -F' [|] ' '{ for (i = 1; i <= NF; i++) { split($i, a, " "); if ($i == "torn" || a[1] != a[2]) exit 1 } }' <<<"$1"; }
ids=$(pair_ids "$rc_/checkpoints")
consistent "$ids" && t_ok "after kill -9 in a save: last and best are consistent pairs, none torn" || t_fail "pairs after a kill in a save" "$ids"
[ -n "$(find "$rc_/checkpoints" -name '.*.tmp.*')" ] && t_ok "the interrupted write is only a temporary file (in the staging folder)" || t_fail "temporary file of the interrupted write"
out=$(bash "$rc_/restart.sh" 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "resumed from checkpoint_last: epoch 1 done" && t_ok "the previous pair resumed, run finished" || t_fail "resume after a kill in a save" "exit $rc: $out"
ls "$rc_/checkpoints" | grep -q 'corrupt' && t_fail "nothing renamed *.corrupt" "$(ls "$rc_/checkpoints")" || t_ok "nothing renamed *.corrupt"
# The killed writer's temporary is removed by the resume (it used to stay forever).
[ -n "$(find "$rc_/checkpoints" -name '.*.tmp.*')" ] && t_fail "resume removed the dead writer's temporary" "$(find "$rc_/checkpoints")" \
    || t_ok "resume removed the dead writer's temporary"
echo "$out" | grep -q "removed 1 temporary file(s) of an interrupted save" && t_ok "the removal is reported" || t_fail "the removal is reported" "$out"

# 4b. kill -9 between the renames of a save (both files complete): between last's sidecar and
# model (last torn: new sidecar, old model) and between best's (best torn). The resume pairs the
# files by their pair id, takes the newest consistent pair (the new one, from the staging
# folder), repairs the torn tag and ends with the statistics of an uninterrupted run.
t_check "uninterrupted 1-rank reference, 3 epochs" quiet "$SCAFFOLD" benchmark $cfg --base-run-dir runs1u --checkpoint-interval 1 --epochs 3
for k in 2 4; do
    ( SCAFFOLD_FAULT_KILL_IN_PAIR=2:$k "$SCAFFOLD" benchmark $cfg --base-run-dir runsp$k --checkpoint-interval 1 --epochs 3 >/dev/null 2>&1 ) 2>/dev/null
    rc=$?
    rp=$(lastrun runsp$k)
    ids=$(pair_ids "$rp/checkpoints" 2>&1)
    if [ $rc -ne 137 ] || consistent "$ids"; then t_fail "kill between renames $k: a torn pair" "exit $rc, ids $ids"; continue; fi
    out=$(bash "$rp/restart.sh" 2>&1)
    rc=$?
    ids=$(pair_ids "$rp/checkpoints" 2>&1)
    if [ $rc -eq 0 ] && grep -q "resumed from .*: epoch 2 done" <<<"$out" && consistent "$ids" &&
        [ "$(cut -d, -f1-7 "$rp/train_stats.csv")" = "$(cut -d, -f1-7 "$(lastrun runs1u)/train_stats.csv")" ]; then
        t_ok "kill between renames $k of epoch 2's save: the new pair resumed (epoch 2 kept), pairs repaired, same statistics"
    else
        t_fail "kill between renames $k" "exit $rc, ids $ids: $out"
    fi
done
# Both tags torn and nothing staged (what two kills left before): no consistent pair; the resume
# says so, naming each file, and renames nothing (it used to rename last *.corrupt, then fail).
( SCAFFOLD_FAULT_KILL_IN_PAIR=2:2 "$SCAFFOLD" benchmark $cfg --base-run-dir runst --checkpoint-interval 1 --epochs 3 >/dev/null 2>&1 ) 2>/dev/null
rt=$(lastrun runst)/checkpoints
rm -rf "$rt/.pending"
cp "$rt/checkpoint_last.optim.safetensors" "$rt/best.tmp" && mv "$rt/best.tmp" "$rt/checkpoint_best.optim.safetensors"
before=$(files_state "$rt")
t_expect_fail "last and best both torn: refused, each file named" 1 \
    "no consistent checkpoint pair in .*checkpoint_last: no optimizer file has its pair id .*checkpoint_best: no optimizer file has its pair id" \
    bash "$rt/../restart.sh"
[ "$(files_state "$rt")" = "$before" ] && t_ok "no consistent pair: nothing renamed" || t_fail "no consistent pair: nothing renamed" "$(ls -la "$rt")"

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

# 8. A resume continues the same run: keys that change what it computes are refused before
# anything is written (it used to train epoch 4 at another seed and learning rate while
# config.yaml still said the old ones); the keys that may change are recorded.
before=$(files_state "$ru")
t_expect_fail "resume with another seed and learning rate refused, keys named" 2 \
    "--restart: 2 keys would change what the resumed run computes: seed \(7 now, 42 in the run\), starting_learning_rate \(0.5 now, 0.001 in the run\); .*config.yaml holds" \
    bash "$ru/restart.sh" --seed 7 --starting-learning-rate 0.5
[ "$(files_state "$ru")" = "$before" ] && t_ok "the refused resume wrote nothing" \
    || t_fail "the refused resume wrote nothing" "$(ls -la "$ru" "$ru/checkpoints")"
out=$(bash "$ru/restart.sh" --epochs 4 --dataloader-num-workers 2 2>&1)
[ $? -eq 0 ] && grep -q "resume: changed dataloader_num_workers: \[1, 2\], epochs: \[3, 4\]" <<<"$out" &&
    [ "$(tail -n +2 "$ru/train_stats.csv" | wc -l)" -eq 4 ] && t_ok "resume with a higher epoch cap and more workers trains epoch 4" \
    || t_fail "resume with mutable keys changed" "$out"
grep -q '^  changed: {dataloader_num_workers: \[1, 2\], epochs: \[3, 4\]}$' "$ru/config_changes.yaml" &&
    grep -q '^epochs: 4$' "$ru/config.yaml" && ! grep -q '^run_dir:' "$ru/config.yaml" &&
    t_ok "the changes are recorded in config_changes.yaml and config.yaml" || t_fail "changes recorded" "$(cat "$ru/config_changes.yaml" "$ru/config.yaml")"

# 9. Signals (SIGTERM at a time limit, SIGINT, SIGUSR1) finish the step, save a checkpoint when
# checkpointing is on, print one line and exit 128 + the signal; they used to end the run within
# 0.1 s with no message and no checkpoint. A signal to one rank only stops every rank at the same
# step, and the resumed run ends with the statistics of an uninterrupted one.
stats3() { head -n 4 "$1/train_stats.csv" | cut -d, -f1-7,9,10; }
out=$(SCAFFOLD_FAULT_SIGNAL_AT_STEP=1:15:4 timeout 120 $MPIRUN -n 2 sh -c '"$0" "$@"; echo "st $?"' "$SCAFFOLD" benchmark $cfg \
    --base-run-dir runsig --checkpoint-interval 1 --epochs 3 2>&1)
rs=$(lastrun runsig)
if [ "$(grep -c '^st 143$' <<<"$out")" -eq 2 ] &&
    [ "$(grep -c '^benchmark: stopped by SIGTERM after step 1 of 3 of epoch 2; checkpoint saved there; resume with .*restart.sh' <<<"$out")" -eq 1 ]; then
    t_ok "SIGTERM to rank 1 only at its 4th step: both ranks stop after step 1 of epoch 2, exit 143, one line"
else
    t_fail "SIGTERM to rank 1 only" "$out"
fi
out=$(bash "$rs/restart.sh" 2>&1)
[ $? -eq 0 ] && grep -q "resumed from checkpoint_last: epoch 1 done and 1 step(s) of epoch 2" <<<"$out" &&
    [ "$(stats3 "$rs")" = "$(stats3 "$ru")" ] && t_ok "resumed inside epoch 2: the statistics of an uninterrupted run" ||
    t_fail "resume after SIGTERM inside an epoch" "$out $(diff <(stats3 "$rs") <(stats3 "$ru"))"
# signal_when SIG LOG PATTERN MS ARGS...: a benchmark whose sample reads sleep MS ms, sent SIG
# once LOG shows PATTERN; its exit status.
signal_when() {
    local sig=$1 log=$2 pat=$3 ms=$4 pid i
    shift 4
    SCAFFOLD_FAULT_SLOW_READ=$ms "$SCAFFOLD" benchmark $cfg "$@" > "$log" 2>&1 &
    pid=$!
    for i in $(seq 1 300); do grep -q "$pat" "$log" && break; sleep 0.1; done
    kill -"$sig" $pid
    wait $pid
}
# SIGINT from outside (a user's Ctrl-C), wherever it lands (slow reads make the epochs long).
signal_when INT int.log "epoch 1:" 150 --base-run-dir runint --checkpoint-interval 1 --epochs 3
rc=$?
ri=$(lastrun runint)
[ $rc -eq 130 ] && [ "$(grep -c '^benchmark: stopped by SIGINT ' int.log)" -eq 1 ] && grep -q "checkpoint saved there" int.log &&
    t_ok "SIGINT: exit 130, one line, checkpoint saved" || t_fail "SIGINT" "exit $rc: $(tail -n 3 int.log)"
out=$(bash "$ri/restart.sh" 2>&1)
[ $? -eq 0 ] && [ "$(stats3 "$ri")" = "$(stats3 "$(lastrun runs1u)")" ] && t_ok "resumed after SIGINT: the statistics of an uninterrupted run" ||
    t_fail "resume after SIGINT" "$out $(diff <(stats3 "$ri") <(stats3 "$(lastrun runs1u)"))"
# Checkpointing off: SIGUSR1 still stops cleanly and says there is no checkpoint; with
# --checkpoint-on-signal 1 it saves one, and the resume goes on from it.
t_expect_fail "SIGUSR1 without checkpointing: exit 138, no checkpoint, says how to get one" 138 \
    "^benchmark: stopped by SIGUSR1 after step 2 of 6 of epoch 1; no checkpoint \(checkpointing is off: set checkpoint_interval, or --checkpoint-on-signal 1\)" \
    env SCAFFOLD_FAULT_SIGNAL_AT_STEP=0:10:2 "$SCAFFOLD" benchmark $cfg --base-run-dir runusr --epochs 3
out=$(SCAFFOLD_FAULT_SIGNAL_AT_STEP=0:15:8 "$SCAFFOLD" benchmark $cfg --base-run-dir runcos --checkpoint-on-signal 1 --epochs 3 2>&1)
rc=$?
rcs=$(lastrun runcos)
out2=$(bash "$rcs/restart.sh" 2>&1)
[ $rc -eq 143 ] && grep -q "after step 2 of 6 of epoch 2; checkpoint saved there" <<<"$out" &&
    [ "$(stats3 "$rcs")" = "$(stats3 "$(lastrun runs1u)")" ] &&
    t_ok "--checkpoint-on-signal 1 (no interval): saved at the signal, resumed to the same statistics" ||
    t_fail "--checkpoint-on-signal" "exit $rc: $out $out2"
# A signal during the warmup: the warmup state is dropped, nothing trained, one line.
signal_when TERM wu.log "warmup: 6 training" 300 --base-run-dir runwu --warmup-batches 6 --epochs 1
rc=$?
[ $rc -eq 143 ] && grep -q "^benchmark: stopped by SIGTERM during the warmup (nothing trained since the start); resume with .* once a checkpoint exists" wu.log &&
    [ ! -e "$(lastrun runwu)/train_stats.csv" ] && t_ok "SIGTERM during the warmup: exit 143, one line, nothing trained" ||
    t_fail "SIGTERM during the warmup" "exit $rc: $(tail -n 3 wu.log)"
# restart.sh resumes with the launcher the run was started with (srun here: its variables).
env SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0 SLURM_STEP_ID=0 "$SCAFFOLD" benchmark $cfg --base-run-dir runsrun --epochs 1 >/dev/null 2>&1
grep -q '^MPIRUN=${MPIRUN:-srun --mpi=pmi[x2]}$' "$(lastrun runsrun)/restart.sh" && grep -q '^# started by srun' "$(lastrun runsrun)/restart.sh" &&
    t_ok "restart.sh of a run started by srun resumes with srun" || t_fail "restart.sh launcher" "$(cat "$(lastrun runsrun)/restart.sh")"
grep -q '^MPIRUN=${MPIRUN:-$(command -v mpirun' "$rs/restart.sh" && t_ok "restart.sh of a run started by mpirun resumes with mpirun" ||
    t_fail "restart.sh launcher (mpirun)" "$(cat "$rs/restart.sh")"
# A finished run resumed: nothing to train, said as such (it printed "stopped at epoch 0 ...
# 0 samples/s").
out=$(bash "$ri/restart.sh" 2>&1)
[ $? -eq 0 ] && grep -q "^benchmark: nothing to train: the run had ended at epoch 3 (cap 3) with val dice [0-9.]* < 0.950; raise the cap" <<<"$out" &&
    t_ok "a finished run resumed: nothing to train, the epoch it ended at" || t_fail "finished run resumed" "$out"

# 10. Threads from the CPUs given (they were all the CPUs a rank saw, whatever ran beside it):
# the affinity mask, shared by the node's ranks on the same mask, at most SLURM_CPUS_PER_TASK;
# OMP_NUM_THREADS wins; one line says the choice.
thr() { grep -o 'threads: [0-9]* per rank from [A-Za-z_ ]*' <<<"$1" | head -n 1; }
one() { env -u OMP_NUM_THREADS "$@" "$SCAFFOLD" benchmark $cfg --base-run-dir runthr --epochs 1 2>&1; }
nmask=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc obeys OMP_NUM_THREADS
out=$(one)
[ "$(thr "$out")" = "threads: $nmask per rank from the CPUs given" ] && [ "$(grep -c 'threads: ' <<<"$out")" -eq 1 ] &&
    grep -q "$nmask CPU(s) in the affinity mask, shared by 1 rank(s) of this node" <<<"$out" &&
    t_ok "threads: one process takes its mask's $nmask CPU(s), said once" || t_fail "threads: one process" "$out"
out=$(one taskset -c 0)
[ "$(thr "$out")" = "threads: 1 per rank from the CPUs given" ] && t_ok "threads: a 1-CPU affinity mask gives 1 thread" || t_fail "threads: taskset -c 0" "$out"
out=$(one SLURM_CPUS_PER_TASK=1)
[ "$(thr "$out")" = "threads: 1 per rank from the CPUs given" ] && grep -q "SLURM_CPUS_PER_TASK 1" <<<"$out" &&
    t_ok "threads: SLURM_CPUS_PER_TASK=1 gives 1 thread" || t_fail "threads: SLURM_CPUS_PER_TASK" "$out"
out=$(OMP_NUM_THREADS=3 "$SCAFFOLD" benchmark $cfg --base-run-dir runthr --epochs 1 2>&1)
[ "$(thr "$out")" = "threads: 3 per rank from OMP_NUM_THREADS" ] && t_ok "threads: OMP_NUM_THREADS wins" || t_fail "threads: OMP_NUM_THREADS" "$out"
if $MPIRUN --version 2>&1 | grep -q "Open MPI"; then bind="--bind-to none"; else bind=""; fi
out=$(env -u OMP_NUM_THREADS $MPIRUN -n 2 $bind "$SCAFFOLD" benchmark $cfg --base-run-dir runthr --epochs 1 2>&1)
want=$((nmask / 2 > 0 ? nmask / 2 : 1))
[ "$(thr "$out")" = "threads: $want per rank from the CPUs given" ] && grep -q "shared by 2 rank(s) of this node" <<<"$out" &&
    [ -z "$(cpuwarn "$out")" ] && t_ok "threads: 2 unbound ranks share the mask: $want each, no oversubscription warning" ||
    t_fail "threads: 2 unbound ranks" "$out"
# Waiting threads spin briefly, then sleep (the OpenMP runtime linked statically takes the
# default set before it starts), unless the user chose.
grep -q "waiting threads spin GOMP_SPINCOUNT=[0-9]* iterations, then sleep" <<<"$out" && t_ok "threads: the wait policy default is said" ||
    t_fail "threads: wait policy" "$out"
out=$(OMP_WAIT_POLICY=active "$SCAFFOLD" benchmark $cfg --base-run-dir runthr --epochs 1 2>&1)
grep -q "waiting threads as set: OMP_WAIT_POLICY=active" <<<"$out" && t_ok "threads: the user's OMP_WAIT_POLICY is kept" || t_fail "threads: OMP_WAIT_POLICY" "$out"
out=$("$SCAFFOLD" trace --out "$d/envtrace" -- env 2>&1)
! grep -q '^GOMP_SPINCOUNT=' <<<"$out" && grep -q '^PATH=' <<<"$out" && t_ok "threads: the default does not leak into child processes" ||
    t_fail "threads: GOMP_SPINCOUNT leaked to a child" "$out"
# 11. Conv3d algorithms by measurement (nn/algo.h), bf16: the choices land in the run folder and
# the cache, -v prints them; a run pinned to the folder's file has the first run's losses bit
# for bit (it measures nothing); a pin of other choices gives the losses of those choices forced
# (direct everywhere), not of the rule's (winograd where it applies).
amp="--torch-amp 1 --epochs 1"
losses() { cut -d, -f1-7 "$(lastrun "$1")/train_stats.csv"; }
# (SCAFFOLD_NN_ALGO_QUIET=0: cached even if the test host is busy; that case: test_algo)
out=$(SCAFFOLD_NN_ALGO=measure SCAFFOLD_NN_ALGO_QUIET=0 SCAFFOLD_NN_ALGO_CACHE="$d/algo.tsv" "$SCAFFOLD" benchmark $cfg $amp --base-run-dir runsa -v 2>&1)
ra=$(lastrun runsa)
[ -s "$ra/nn_algorithms.tsv" ] && [ -s "$d/algo.tsv" ] && grep -q 'nn algorithms: [0-9]* Conv3d passes chosen by the warmup, [0-9]* measured in' <<<"$out" \
    && grep -q 'nn: conv3d fwd bf16 1x16x16x16 8+0->8: .*(measured' <<<"$out" \
    && ! grep -q 'nn settings' <<<"$out" \
    && t_ok "measured choices: run folder, cache, cost and -v lines (no settings table)" || t_fail "measured choices" "$out"
out=$(SCAFFOLD_NN_ALGO=measure SCAFFOLD_NN_ALGO_CACHE=0 SCAFFOLD_NN_ALGO_PIN="$ra/nn_algorithms.tsv" "$SCAFFOLD" benchmark $cfg $amp --base-run-dir runsp2 2>&1)
[ "$(losses runsa)" = "$(losses runsp2)" ] && ! grep -q "measured in" <<<"$out" \
    && t_ok "a pinned run reproduces the losses bit for bit, measuring nothing" || t_fail "pinned run" "$(losses runsa) / $(losses runsp2): $out"
awk -F'\t' 'BEGIN { OFS = "\t" } /^#/ { print; next } { $15 = "direct"; print }' "$ra/nn_algorithms.tsv" > "$d/direct.tsv"
quiet env SCAFFOLD_NN_ALGO_PIN="$d/direct.tsv" "$SCAFFOLD" benchmark $cfg $amp --base-run-dir runsp3
out=$(env SCAFFOLD_NN_ALGO=direct "$SCAFFOLD" benchmark $cfg $amp --base-run-dir runsp4 -vv 2>&1)
# -vv: the engine's settings (nn/settings.h) once, each with where it came from
[ "$(grep -c 'nn settings (docs/nn.md' <<<"$out")" = 1 ] \
    && grep -q '  SCAFFOLD_NN_ALGO  *direct (environment)$' <<<"$out" \
    && grep -q '  SCAFFOLD_NN_WINOGRAD  *1 (default)$' <<<"$out" \
    && t_ok "-vv prints the engine's settings once" || t_fail "-vv settings table" "$out"
out=$(env SCAFFOLD_NN_ALGO=winograd SCAFFOLD_NN_SLAB_BYTES=lots "$SCAFFOLD" benchmark $cfg $amp --base-run-dir runsp5 2>&1)
# a value a setting does not take: one warning at the default verbosity, the default used
[ "$(grep -c 'SCAFFOLD_NN_SLAB_BYTES="lots" is not a value it takes (bytes > 0, or with K, M, G.*running with 50331648' <<<"$out")" = 1 ] \
    && t_ok "a setting's bad value is warned about once" || t_fail "bad setting warning" "$out"
[ "$(losses runsp3)" = "$(losses runsp4)" ] && [ "$(losses runsp3)" != "$(losses runsp5)" ] \
    && t_ok "a pin of other choices gives their losses" || t_fail "pin of direct" "$(losses runsp3) / $(losses runsp4) / $(losses runsp5)"
printf 'not\ta\tchoice\n' > "$d/bad.tsv"
t_expect_fail "a malformed pinned file" 2 "SCAFFOLD_NN_ALGO_PIN=.*bad.tsv line 1" \
    env SCAFFOLD_NN_ALGO_PIN="$d/bad.tsv" "$SCAFFOLD" benchmark $cfg --base-run-dir runsbadpin
t_expect_fail "an unknown SCAFFOLD_NN_ALGO" 2 "SCAFFOLD_NN_ALGO=fastest: unknown" \
    env SCAFFOLD_NN_ALGO=fastest "$SCAFFOLD" benchmark $cfg --base-run-dir runsbadpin
[ ! -d runsbadpin ] && t_ok "no run folder for a bad algorithm setting" || t_fail "no run folder for a bad algorithm setting" "$(ls runsbadpin)"

# 5b. A run beside twice as many spinning processes as CPUs: its threads wait for a CPU, and the
# summary says the times are not the machine's (a quiet host: about 1%, not tested here, since
# a test host may be busy).
spin=()
for _ in $(seq $((2 * $(nproc)))); do (while :; do :; done) & spin+=($!); done
out=$(timeout 120 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbusy --epochs 4 2>&1)
kill "${spin[@]}" 2>/dev/null; wait "${spin[@]}" 2>/dev/null
w=$(sed -nE 's/.*threads waiting for a CPU ([0-9.]+)% .*/\1/p' <<<"$out")
[ -n "$w" ] && awk -v w="$w" 'BEGIN { exit !(w > 10) }' \
    && grep -q "warning.*the training threads waited [0-9]*% of the time for a CPU .* not this machine's" <<<"$out" \
    && t_ok "a busy host: the threads waited $w% for a CPU, and a warning" || t_fail "a busy host's warning" "$out"

# 6. Bad inputs at -n 2: one clear message, same exit status on all ranks, no hang.
t_expect_fail "global batch larger than the validation set" 2 "global batch size 4 .* exceeds the validation set" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad --local-batch-size 2
t_expect_fail "world size not divisible by the shard count" 2 "world size 2 is not divisible by the number of spatial shards 4" \
    timeout 120 $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir runsbad --dc-num-shards 4 1 1
touch afile
t_expect_fail "unwritable run directory" 2 "base_run_dir: cannot create directory .*afile" \
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
