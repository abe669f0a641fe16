#!/usr/bin/env bash
# tests/reliability.sh [FUZZ_SECONDS]: measures the figures of docs/reliability.md.
#
#  1. Kills: `scaffold benchmark` (tests/train/tiny.yml, 4 epochs, a checkpoint every epoch)
#     killed with SIGKILL at every checkpoint file write (SCAFFOLD_FAULT_KILL_AT_COMMIT, 1 rank),
#     inside the sidecar and the model file of each save (SCAFFOLD_FAULT_KILL_IN_SAVE, 2 ranks),
#     before each rename of two saves (SCAFFOLD_FAULT_KILL_IN_PAIR, 2 ranks) and in the middle
#     of an epoch (SCAFFOLD_FAULT_KILL_AT_EPOCH, 1 and 2 ranks), each followed by the
#     run folder's restart.sh. A kill is survived when no file under a final name is torn, the
#     resume exits 0, no temporary file is left, and the resumed train_stats.csv has the same
#     losses and Dice as an uninterrupted run on as many ranks. A kill inside the first save
#     leaves nothing to resume from: survived there means no torn file and a resume that refuses
#     with one message (exit 2) before writing anything.
#     Then stop signals (SIGTERM, SIGINT, SIGUSR1 via SCAFFOLD_FAULT_SIGNAL_AT_STEP) to one rank
#     of two, inside an epoch and at its end: survived when the run exits, leaves no torn file and
#     its restart.sh resumes to the statistics of an uninterrupted run.
#  2. Bad inputs: tests/cli/bad_inputs.sh (exit 2, one line, nothing written).
#  3. Fuzzing: `make fuzz FUZZ_SECONDS=N` when N > 0 (default 0: the long campaigns are run on
#     their own; see docs/reliability.md).
# Prints one line per case and a summary. Run from the repository root after `make`.
cd "$(dirname "$0")/.." && source tests/lib.sh
export OMP_NUM_THREADS=1
FUZZ=${1:-0}
root=$PWD
d=$(t_tmpdir)
trap 'rm -rf "$d"' EXIT
cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml --epochs 4 --checkpoint-interval 1"
cfg="$cfg --fract-base-dir $d/fr --dataset-dir $d/ds"
cd "$d" || exit 1
lastrun() { ls -d "$d"/$1/*/ | tail -n 1; }
stats() { cut -d, -f1-7 "$1/train_stats.csv"; }

# The reference runs on 1 and 2 ranks (the first also generates the library and the dataset, so
# that the killed runs' atomic writes are the run folder's and the checkpoints').
"$SCAFFOLD" benchmark $cfg --base-run-dir ref1 >/dev/null 2>&1 || { t_fail "reference run"; t_report; exit 1; }
$MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir ref2 >/dev/null 2>&1 || { t_fail "2-rank reference run"; t_report; exit 1; }

# torn_files RUN: files under a final name that do not parse (safetensors sizes, CSV rows).
torn_files() {
    "$PYTHON" - "$1" <<'PY'
import json, os, struct, sys, glob
run = sys.argv[1]
bad = 0
for p in glob.glob(os.path.join(run, "checkpoints", "*.safetensors")):
    try:
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        end = max([v["data_offsets"][1] for k, v in h.items() if k != "__metadata__"] or [0])
        bad += os.path.getsize(p) != 8 + n + end
    except Exception:
        bad += 1
p = os.path.join(run, "train_stats.csv")
if os.path.exists(p):
    rows = open(p).read().splitlines()
    bad += any(len(r.split(",")) != 10 for r in rows)
print(bad)
PY
}

kills=0
survived=0
# kill_case NAME NP EXPECT ENV...: one killed run and its resume (EXPECT: resume or refuse).
kill_case() {
    local name=$1 np=$2 expect=$3 dir ref
    shift 3
    ref=$(lastrun ref$np)
    dir=k$kills
    kills=$((kills + 1))
    if [ "$np" -gt 1 ]; then
        (env "$@" $MPIRUN -n "$np" "$SCAFFOLD" benchmark $cfg --base-run-dir "$dir" >/dev/null 2>&1) 2>/dev/null
    else
        (env "$@" "$SCAFFOLD" benchmark $cfg --base-run-dir "$dir" >/dev/null 2>&1) 2>/dev/null
    fi
    local rc=$? run
    run=$(lastrun "$dir")
    if [ "$rc" -eq 0 ] || [ -z "$run" ]; then
        t_fail "kill $name" "the run was not killed (exit $rc)"
        return
    fi
    local torn
    torn=$(torn_files "$run")
    local out
    out=$(bash "$run/restart.sh" 2>&1)
    local rrc=$?
    local temps
    temps=$(find "$run" -name '.*.tmp.*' -o -name '*.link.*' | wc -l)
    if [ "$torn" != 0 ]; then
        t_fail "kill $name" "$torn torn file(s) under a final name"
    elif [ "$expect" = refuse ]; then
        if [ $rrc -eq 2 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -q "holds no checkpoint" <<<"$out"; then
            survived=$((survived + 1))
            t_ok "kill $name: no torn file; the resume refuses with one message (nothing saved yet)"
        else
            t_fail "kill $name" "expected a one-line refusal, got exit $rrc: $out"
        fi
    elif [ $rrc -ne 0 ]; then
        t_fail "kill $name" "resume exit $rrc: $(tail -n 3 <<<"$out")"
    elif [ "$temps" -ne 0 ]; then
        t_fail "kill $name" "$temps temporary file(s) left after the resume"
    elif [ "$(stats "$run")" != "$(stats "$ref")" ]; then
        t_fail "kill $name" "resumed statistics differ from the uninterrupted run"
    else
        survived=$((survived + 1))
        t_ok "kill $name: no torn file, resumed, no temporary left, same statistics"
    fi
}

# Atomic writes of a run: config.yaml, overrides.yaml, base_config.yaml, restart.sh, then two
# per checkpoint save (sidecar, model): commits 5..12 are the four saves' files.
for n in 5 6; do
    kill_case "inside checkpoint file write $n (epoch 1's save, 1 rank)" 1 refuse SCAFFOLD_FAULT_KILL_AT_COMMIT=$n 2>/dev/null
done
for n in 7 8 9 10 11 12; do
    kill_case "inside checkpoint file write $n (1 rank)" 1 resume SCAFFOLD_FAULT_KILL_AT_COMMIT=$n 2>/dev/null
done
for e in 2 3 4; do
    for k in 1 2; do
        kill_case "inside file $k of epoch $e's save (2 ranks)" 2 resume SCAFFOLD_FAULT_KILL_IN_SAVE=$e:$k 2>/dev/null
    done
done
# Between the renames of a save, both files complete (1, 2: last's sidecar and model; 3, 4:
# best's): the resume pairs the files by their id and takes the newest consistent pair.
for e in 1 3; do
    for k in 1 2 3 4; do
        kill_case "before rename $k of epoch $e's save (2 ranks)" 2 resume SCAFFOLD_FAULT_KILL_IN_PAIR=$e:$k 2>/dev/null
    done
done
for e in 2 3 4; do
    kill_case "in the middle of epoch $e (1 rank)" 1 resume SCAFFOLD_FAULT_KILL_AT_EPOCH=$e 2>/dev/null
    kill_case "in the middle of epoch $e (2 ranks)" 2 resume SCAFFOLD_FAULT_KILL_AT_EPOCH=$e 2>/dev/null
done

# Stop signals (what a time limit or a user sends), to one rank of two at one of its steps (the
# other rank learns it at the step's agreement): exit 128 + signal, then the resume.
k0=$kills
s0=$survived
for sig in 15 2 10; do
    for k in 4 9; do
        kill_case "signal $sig to rank 1 at its step $k (2 ranks)" 2 resume SCAFFOLD_FAULT_SIGNAL_AT_STEP=1:$sig:$k 2>/dev/null
    done
done
stops=$((kills - k0))
stops_ok=$((survived - s0))
kills=$k0
survived=$s0

cd "$root" || exit 1
"$BUILD/tests/nn/test_unet" --write-ckpt "$d/c.safetensors" >/dev/null 2>&1
bad=$(bash tests/cli/bad_inputs.sh "$d/c.safetensors" 2>&1 | tail -n 1)
echo "bad inputs: $bad"
execs=""
if [ "$FUZZ" -gt 0 ]; then
    execs=$(make -s fuzz FUZZ_SECONDS="$FUZZ" 2>&1 | tee /dev/stderr | sed -n 's/^harnesses: .*executions: \([0-9]*\).*/\1/p')
fi
echo "reliability: $kills kill -9s, $survived survived; $stops stop signals, $stops_ok resumed; bad inputs: $bad${execs:+; fuzz executions: $execs in ${FUZZ} s per harness}"
t_report
