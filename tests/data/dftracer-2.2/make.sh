#!/usr/bin/env bash
# make.sh: writes the dftracer 2.2.0 traces of this folder with dftracer's own LD_PRELOAD library
# (libdftracer_preload.so of the PyPI wheel in the pinned test venv, tools/setup.sh --test).
#
#   bash tests/data/dftracer-2.2/make.sh OUTDIR [VENV_PYTHON]
#
# The workloads run in a fixed scratch folder ($SCAFFOLD_DFT22_WORK, default /tmp/scaffold-dft22)
# with relative script names, so the paths inside the traces do not depend on the checkout.
# OUTDIR receives numpy/, numpyagg/, forkexec/ and threads/ (see README.md).
set -euo pipefail
out=$(realpath -m "$1")
here=$(cd "$(dirname "$0")" && pwd)
py=${2:-$(bash "$here/../../../tools/test_venv.sh" --print)}
vbin=$(dirname "$py")
pre=$("$py" -c 'import dftracer, os; print(os.path.join(os.path.dirname(dftracer.__file__), "lib64", "libdftracer_preload.so"))')
[ -f "$pre" ] || { echo "make.sh: no libdftracer_preload.so in $py's dftracer" >&2; exit 2; }
W=${SCAFFOLD_DFT22_WORK:-/tmp/scaffold-dft22}
rm -rf "$W"
mkdir -p "$W/data" "$W/out" "$out"
cp "$here"/numpy_loop.py "$here"/fork_exec.py "$here"/thread_reader.py "$W/"
cd "$W"
# run NAME VAR=VALUE... -- SCRIPT ARGS...: one traced run; its files go to $W/out/NAME/.
run() {
    local name=$1
    shift
    local vars=()
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done
    shift
    mkdir -p "out/$name"
    env PATH="$vbin:$PATH" LD_PRELOAD="$pre" DFTRACER_ENABLE=1 DFTRACER_INIT=PRELOAD \
        DFTRACER_DATA_DIR="$W/data" DFTRACER_LOG_FILE="$W/out/$name/$name" "${vars[@]}" \
        python "$@" >/dev/null
}
# Absolute data paths: dftracer matches DFTRACER_DATA_DIR against the path as given.
run numpy DFTRACER_INC_METADATA=1 -- numpy_loop.py "$W/data" 3
run numpyagg DFTRACER_INC_METADATA=1 DFTRACER_ENABLE_AGGREGATION=1 -- numpy_loop.py "$W/data" 50
run forkexec DFTRACER_INC_METADATA=1 -- fork_exec.py "$W/data"
run threads DFTRACER_INC_METADATA=0 -- thread_reader.py "$W/data"
for d in numpy numpyagg forkexec threads; do
    rm -rf "${out:?}/$d"
    cp -r "out/$d" "$out/$d"
done
echo "make.sh: dftracer $("$py" -c 'import importlib.metadata as m; print(m.version("dftracer"))') traces in $out"
