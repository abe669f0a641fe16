#!/usr/bin/env bash
# bench/venv.sh: throwaway, bench-only Python environments with the baselines users install from
# PyPI (PyTorch 2.x, dftracer, dftracer-utils). Created on first use under
# $SCAFFOLD_BENCH_VENVS (default ~/.cache/scaffold-bench); the tests never use them.
#
#   source bench/venv.sh
#   PY=$(bench_venv torch) || exit 1        # python of a venv with PyTorch 2.x (+ numpy)
#   PY=$(bench_venv dftracer) || exit 1     # dftracer (preload library) + dftracer-utils
#   BIN=$(dirname "$PY")                    # console scripts (dftracer_stats, ...)
#
# A venv counts as usable only once its `.complete` marker exists (written after every install
# step succeeded), so an interrupted install is removed and redone, never used half-made.
# Installs are serialised with a lock, so concurrent benches do not build the same venv twice.
# Progress goes to stderr; stdout is the interpreter's path.
SCAFFOLD_BENCH_VENVS=${SCAFFOLD_BENCH_VENVS:-$HOME/.cache/scaffold-bench}

# The packages of each venv (pinned where a bench depends on a version's behaviour).
bench_venv_pkgs() {
    case $1 in
    torch) echo "torch numpy" ;;
    dftracer) echo "dftracer==2.2.0 dftracer-utils==0.0.14" ;;
    *) return 1 ;;
    esac
}

bench_venv() {
    local name=$1 pkgs dir py
    pkgs=$(bench_venv_pkgs "$name") || {
        echo "bench_venv: unknown venv '$name' (known: torch, dftracer)" >&2
        return 2
    }
    dir=$SCAFFOLD_BENCH_VENVS/$name
    mkdir -p "$SCAFFOLD_BENCH_VENVS" || return 1
    (
        flock 9
        [ -f "$dir/.complete" ] && exit 0
        rm -rf "$dir"
        py=${BENCH_VENV_PYTHON:-python3}
        echo "bench_venv: creating $dir ($pkgs; first use only, can take minutes)" >&2
        "$py" -m venv "$dir" >&2 &&
            "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $pkgs >&2 &&
            touch "$dir/.complete" && exit 0
        rm -rf "$dir"
        echo "bench_venv: installing $pkgs failed (is PyPI reachable?)" >&2
        exit 1
    ) 9>"$SCAFFOLD_BENCH_VENVS/.lock" || return 1
    echo "$dir/bin/python"
}
