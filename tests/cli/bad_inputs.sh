#!/usr/bin/env bash
# tests/cli/bad_inputs.sh: malformed invocations of every subcommand, as a new user or a hostile
# tester would type them. Each must exit with status 2, print exactly one line on stderr that
# starts with "scaffold CMD:" (naming the culprit), print nothing else, and write nothing (the
# working directory and every configured output directory stay empty). Prints one ok/FAIL line
# per case and "N passed, N failed"; the count of cases is what docs/reliability.md reports tried.
# usage: bash tests/cli/bad_inputs.sh   (from the repository root; BUILD selects the build)
cd "$(dirname "$0")/../.." && source tests/lib.sh
S=$SCAFFOLD
W=$(t_tmpdir)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/in" "$W/run"
cd "$W/run" || exit 1
# Inputs the cases point at (outside the watched working directory).
printf 'problem_scale: 4\nn_categories: 1\nfract_base_dir: %s/run/fr\ndataset_dir: %s/run/ds\nbase_run_dir: %s/run/runs\n' "$W" "$W" "$W" > "$W/in/ok.yml"
printf 'problem_scale: 4\nbogus: 1\n' > "$W/in/unknown.yml"
printf 'problem_scale: [4, 5]\n' > "$W/in/sweep.yml"
printf 'seed: "x"\n' > "$W/in/quoted.yml"
printf 'problem_scale: 4\n  bad: : [\n' > "$W/in/syntax.yml"
printf -- '- a\n- b\n' > "$W/in/list.yml"
printf 'not a checkpoint' > "$W/in/junk.safetensors"
printf '\x93NUMPY\x01\x00\x10\x00{junk}           \n' > "$W/in/junk.npy"
: > "$W/in/empty.npy"
"$PYTHON" - "$W/in" <<'PY'
import sys, numpy as np
d = sys.argv[1]
np.save(d + "/nan.npy", np.full((3, 16, 16, 16), np.nan, np.float32))
v = np.zeros((3, 16, 16, 16), np.float32); v[0, 1, 2, 3] = np.inf
np.save(d + "/inf.npy", v)
np.save(d + "/f64.npy", np.zeros((3, 16, 16, 16)))
np.save(d + "/two_d.npy", np.zeros((16, 16), np.float32))
np.save(d + "/trunc.npy", np.zeros((3, 16, 16, 16), np.float32))
PY
truncate -s 1000 "$W/in/trunc.npy"
mkdir -p "$W/in/adir"
C="-c $W/in/ok.yml"

# case NAME CMD...: status 2, one "scaffold " line on stderr, nothing on stdout, nothing written.
case_() {
    local name=$1 out err rc n
    shift
    out=$("$@" 2>"$W/err"); rc=$?
    err=$(cat "$W/err")
    n=$(grep -c '' "$W/err")
    if [ "$rc" -ne 2 ]; then t_fail "$name" "exit $rc: $err"; return; fi
    if [ "$n" -ne 1 ] || ! grep -qE '^scaffold( [a-z_-]+)?: ' "$W/err"; then
        t_fail "$name" "stderr is not one 'scaffold CMD:' line: $err"; return
    fi
    if [ -n "$out" ]; then t_fail "$name" "stdout not empty: $out"; return; fi
    if [ -n "$(ls -A "$W/run")" ] || [ -n "$(ls -A "$W/in/empty_run" 2>/dev/null)" ]; then t_fail "$name" "wrote $(ls -A "$W/run")"; rm -rf "${W:?}"/run/* "$W"/run/.[!.]*; return; fi
    t_ok "$name: $err"
}

# The top level (without a command it prints the command list: that is help, not a case).
case_ "unknown command" "$S" frobnicate
# Configuration-driven commands: the same parser and validation for all three.
for cmd in generate_fractals generate_dataset benchmark; do
    case_ "$cmd: no -c" "$S" $cmd
    case_ "$cmd: missing file" "$S" $cmd -c "$W/in/none.yml"
    case_ "$cmd: directory as -c" "$S" $cmd -c "$W/in/adir"
    case_ "$cmd: unknown key" "$S" $cmd -c "$W/in/unknown.yml"
    case_ "$cmd: unknown flag" "$S" $cmd $C --frobnicate 1
    case_ "$cmd: positional argument" "$S" $cmd $C extra
    case_ "$cmd: flag without value" "$S" $cmd $C --seed
    case_ "$cmd: list flag with 2 values" "$S" $cmd $C --dc-num-shards 1 1
    case_ "$cmd: text for an integer" "$S" $cmd $C --problem-scale five
    case_ "$cmd: problem_scale out of range" "$S" $cmd $C --problem-scale 40
done
case_ "sweep list in a file" "$S" benchmark -c "$W/in/sweep.yml"
case_ "quoted number" "$S" benchmark -c "$W/in/quoted.yml"
case_ "YAML syntax error" "$S" benchmark -c "$W/in/syntax.yml"
case_ "YAML list document" "$S" benchmark -c "$W/in/list.yml"
case_ "negative batch" "$S" benchmark $C --local-batch-size -1
case_ "zero categories" "$S" benchmark $C --n-categories 0
case_ "bottleneck above scale" "$S" benchmark $C --unet-bottleneck-dim 9
case_ "groups not dividing base" "$S" benchmark $C --group-norm-groups 5
case_ "unknown optimizer" "$S" benchmark $C --optimizer LBFGS
case_ "target dice above 1" "$S" benchmark $C --target-dice 1.5
case_ "NaN learning rate" "$S" benchmark $C --starting-learning-rate nan
case_ "epoch cap 0" "$S" benchmark $C --epochs 0
case_ "duplicate shard dims" "$S" benchmark $C --dc-shard-dims 2 2 4
case_ "data_store typo" "$S" benchmark $C --data-store ram
case_ "checkpoint_dir with a slash" "$S" benchmark $C --checkpoint-dir a/b
case_ "boolean key = 2" "$S" benchmark $C --async-save 2
case_ "--restart without --run-dir" "$S" benchmark $C --restart
case_ "--run-dir that does not exist" "$S" benchmark $C --run-dir "$W/in/none"
mkdir -p "$W/in/empty_run"
case_ "--restart --run-dir on an empty folder" "$S" benchmark $C --restart --run-dir "$W/in/empty_run"
case_ "--run-dir without a checkpoint" "$S" benchmark $C --run-dir "$W/in/empty_run"
case_ "model wider than the engine allows" "$S" benchmark $C --unet-base-channels 100000
case_ "run larger than the node's memory" "$S" benchmark $C --problem-scale 12 --unet-bottleneck-dim 3
case_ "global batch larger than the validation split" "$S" benchmark $C --local-batch-size 64
# Directories that cannot be created, proven before anything is written (root passes access()
# on /proc: it used to write a run folder and a fractal library first, then exit 1).
case_ "dataset_dir under /proc" "$S" benchmark $C --dataset-dir /proc/x
case_ "fract_base_dir under /proc" "$S" benchmark $C --fract-base-dir /proc/x
case_ "base_run_dir under /proc" "$S" benchmark $C --base-run-dir /proc/x/runs
case_ "dataset_dir below a file" "$S" benchmark $C --dataset-dir "$W/in/junk.npy/ds"
# predict
case_ "predict: no arguments" "$S" predict
case_ "predict: unknown option" "$S" predict --frobnicate
case_ "predict: --threads 0" "$S" predict --checkpoint x --input y --threads 0
case_ "predict: --threads -3" "$S" predict --checkpoint x --input y --threads -3
case_ "predict: missing checkpoint" "$S" predict --checkpoint "$W/in/none" --input "$W/in/nan.npy"
case_ "predict: directory as --checkpoint" "$S" predict --checkpoint "$W/in/adir" --input "$W/in/nan.npy"
case_ "predict: junk checkpoint" "$S" predict --checkpoint "$W/in/junk.safetensors" --input "$W/in/nan.npy"
# The remaining predict cases need a valid checkpoint (the nn fixtures hold tensors, not a model);
# tests/cli/run.sh builds one and passes it as $1.
if [ -n "${1:-}" ]; then
    case_ "predict: directory as --input" "$S" predict --checkpoint "$1" --input "$W/in/adir" --mask m.npy
    case_ "predict: empty .npy" "$S" predict --checkpoint "$1" --input "$W/in/empty.npy" --mask m.npy
    case_ "predict: corrupt .npy header" "$S" predict --checkpoint "$1" --input "$W/in/junk.npy" --mask m.npy
    case_ "predict: float64 volume" "$S" predict --checkpoint "$1" --input "$W/in/f64.npy" --mask m.npy
    case_ "predict: 2-D array" "$S" predict --checkpoint "$1" --input "$W/in/two_d.npy" --mask m.npy
    case_ "predict: all-NaN volume" "$S" predict --checkpoint "$1" --input "$W/in/nan.npy" --mask m.npy
    case_ "predict: one Inf voxel" "$S" predict --checkpoint "$1" --input "$W/in/inf.npy" --mask m.npy
    case_ "predict: truncated .npy" "$S" predict --checkpoint "$1" --input "$W/in/trunc.npy" --mask m.npy
fi
# store-bench (arguments are checked before MPI starts)
case_ "store-bench: negative rows" "$S" store-bench --rows-per-rank -5
case_ "store-bench: text count" "$S" store-bench --nget lots
case_ "store-bench: unknown method" "$S" store-bench --method tcp
case_ "store-bench: batch 0" "$S" store-bench --batch 0
case_ "store-bench: missing value" "$S" store-bench --repeats
case_ "store-bench: positional" "$S" store-bench 12
case_ "store-bench: batch buffer past the node's memory" "$S" store-bench --row-bytes 4g
# trace, analyze, compare
case_ "trace: no command" "$S" trace --out "$W/in/t"
case_ "trace: --flush-ms 0" "$S" trace --flush-ms 0 -- true
case_ "trace: unknown option" "$S" trace --bogus -- true
case_ "analyze: no trace" "$S" analyze
case_ "analyze: missing file" "$S" analyze "$W/in/none.pfw"
case_ "analyze: --window -1" "$S" analyze --window -1 "$W/in/none.pfw"
case_ "analyze: --top x" "$S" analyze --top x "$W/in/none.pfw"
case_ "compare: no separator" "$S" compare a b
case_ "compare: --noise -1" "$S" compare --noise -1 a -- b
t_report
