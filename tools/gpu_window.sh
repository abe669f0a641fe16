#!/usr/bin/env bash
# tools/gpu_window.sh [--seconds N] [--out DIR] [--dry-run] [--only STAGES] [--self-test]
#
# Everything a short GPU window must run, in order of value, within N seconds (default 600),
# every log and result under one folder, stopping cleanly at the deadline:
#   setup       prerequisites: Debian packages (tools/setup.sh), the CUDA toolkit's nvcc, cuDNN,
#               cuBLAS, NCCL, compute-sanitizer, nvidia-smi; installs what apt can, names the rest
#   build       make -j CUDA=1 tests-bin (scaffold, the tests, the GPU benchmarks) into $BUILD
#   gpu         nvidia-smi (the line naming the GPU and driver) and the backend's own probe
#   kernels     bench/gpu/kernels/run.sh: every own kernel against the CPU engine, timed
#   gpu-tests   tests/gpu/run.sh without its sanitizer runs: every op and the whole U-Net
#   sanitizer   compute-sanitizer memcheck (op tests, kernel programs), then racecheck
#   step-bench  bench/gpu/run.sh parts 1-2: convolutions against cuDNN's best, step times
#   full-suite  make CUDA=1 test: the whole suite on the CUDA build
#   dice        bench/gpu/run.sh part 3: time to Dice 0.95 with the default configuration
# A stage gets its own budget (below) or what is left before the deadline, whichever is less,
# runs in its own process group and is killed with all its children when its time is up; a
# stage is skipped when less than its minimum is left, or when a stage it needs failed (build,
# gpu). After each stage the summary is rewritten, so whatever ends the window, the results so
# far are on disk. Statuses: passed, failed, timed out, skipped (why), dry (shown, not run).
#
#   --seconds N   the whole window (default 600; at least 30)
#   --out DIR     the results folder (default bench/gpu/results/window-<UTC time>-<commit>;
#                 with --dry-run a new folder under $TMPDIR)
#   --dry-run     on a machine without a GPU: runs the CPU parts (the prerequisite check without
#                 installing, the build, the kernel programs' CPU references, the GPU scripts up
#                 to their SKIP) and shows the command of every other stage
#   --only LIST   comma-separated stages (e.g. a second window: --only gpu,gpu-tests)
#   --self-test   checks this script's deadline handling on synthetic stages (no build, no GPU):
#                 a stage that overruns is killed with its children, later ones are skipped;
#                 prints "N passed, N failed"
# Environment: BUILD (default build-cuda), CUDA_HOME (default /usr/local/cuda), JOBS (make -j,
# default all cores). Exit status: 0 when no stage failed or timed out, 1 otherwise, 2 for bad
# usage.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
SECONDS_TOTAL=600
OUT=""
DRY=0
ONLY=""
SELFTEST=0
usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds)
        [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 5 ] || {
            echo "gpu_window: --seconds needs a whole number of seconds (at least 30)" >&2
            exit 2
        }
        SECONDS_TOTAL=$2
        shift
        ;;
    --out)
        [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu_window: --out needs a folder" >&2; exit 2; }
        OUT=$2
        shift
        ;;
    --only)
        [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu_window: --only needs stage names" >&2; exit 2; }
        ONLY=",$2,"
        shift
        ;;
    --dry-run) DRY=1 ;;
    --self-test) SELFTEST=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_window: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ "$SELFTEST" = 0 ] && [ "$SECONDS_TOTAL" -lt 30 ]; then
    echo "gpu_window: --seconds $SECONDS_TOTAL: at least 30 (the build alone needs more)" >&2
    exit 2
fi
BUILD=${BUILD:-build-cuda}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
export BUILD CUDA_HOME
START=$(date +%s)
DEADLINE=$((START + SECONDS_TOTAL))
RESERVE=5 # seconds kept for the summary at the end
GRACE=3   # seconds between TERM and KILL of a stage's process group

if [ -z "$OUT" ]; then
    if [ "$DRY" = 1 ] || [ "$SELFTEST" = 1 ]; then
        OUT=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-gpu-window.XXXXXX")
    else
        rev=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
        OUT=bench/gpu/results/window-$(date -u +%Y%m%d-%H%M%S)-$rev
    fi
fi
mkdir -p "$OUT" || { echo "gpu_window: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)

# ---- the stage table ---------------------------------------------------------------------------
# name | budget s | minimum s | needs (stages that must have passed) | what it runs
NAMES=() BUDGET=() MINIMUM=() NEEDS=() WHAT=()
stage() { NAMES+=("$1"); BUDGET+=("$2"); MINIMUM+=("$3"); NEEDS+=("$4"); WHAT+=("$5"); }
if [ "$SELFTEST" = 1 ]; then
    stage st-pass 5 1 "" "a stage that passes"
    stage st-fail 5 1 "" "a stage that fails (exit 3)"
    stage st-overrun 3 1 "" "a stage that outlives its budget, with a child in the background"
    stage st-needs 5 1 "st-fail" "a stage that needs the failed one"
    stage st-late 5 3600 "" "a stage for which too little time is left"
else
    stage setup 90 10 "" "prerequisites: Debian packages (tools/setup.sh), CUDA toolkit, cuDNN, NCCL"
    stage build 240 30 "" "make -j$JOBS CUDA=1 BUILD=$BUILD tests-bin"
    stage gpu 20 5 "build" "nvidia-smi; $BUILD/tests/gpu/cu_ops --probe"
    stage kernels 120 20 "build gpu" "bash bench/gpu/kernels/run.sh --reps 10"
    stage gpu-tests 180 30 "build gpu" "SCAFFOLD_GPU_SANITIZE=0 bash tests/gpu/run.sh"
    stage sanitizer 150 30 "build gpu" "compute-sanitizer memcheck: cu_ops fp32 --quick, kernels --quick; racecheck: cu_ops fp32 --quick"
    stage step-bench 180 30 "build gpu" "PARTS='1 2' SCALES='5 6 7' bash bench/gpu/run.sh 3"
    stage full-suite 900 60 "build" "make CUDA=1 BUILD=$BUILD test (sanitizers left to their stage)"
    stage dice 900 60 "build gpu" "PARTS=3 bash bench/gpu/run.sh"
fi
N=${#NAMES[@]}
if [ -n "$ONLY" ]; then
    for s in ${ONLY//,/ }; do
        found=0
        for n in "${NAMES[@]}"; do [ "$n" = "$s" ] && found=1; done
        [ $found = 1 ] || { echo "gpu_window: --only: no stage '$s' (${NAMES[*]})" >&2; exit 2; }
    done
fi
STATUS=() RC=() TOOK=()
for ((i = 0; i < N; i++)); do STATUS+=("not reached"); RC+=("-"); TOOK+=("-"); done

# ---- results ------------------------------------------------------------------------------------
status_of() { # the status of a stage by name
    local i
    for ((i = 0; i < N; i++)); do [ "${NAMES[$i]}" = "$1" ] && echo "${STATUS[$i]}"; done
}
summary() {
    local i
    {
        echo "GPU window $(date -u -d @"$START" +%Y-%m-%dT%H:%M:%SZ)$([ "$DRY" = 1 ] && echo ", dry run")$([ "$SELFTEST" = 1 ] && echo ", self-test"): $SECONDS_TOTAL s, $(($(date +%s) - START)) s used; results in $OUT"
        printf '%-3s %-11s %-36s %6s %6s %5s  %s\n' "#" stage status "s" budget rc log
        for ((i = 0; i < N; i++)); do
            printf '%-3s %-11s %-36s %6s %6s %5s  %s\n' "$((i + 1))" "${NAMES[$i]}" "${STATUS[$i]}" \
                "${TOOK[$i]}" "${BUDGET[$i]}" "${RC[$i]}" "$(printf '%02d' $((i + 1)))-${NAMES[$i]}.log"
        done
        local ran=0 pass=0 fail=0 tout=0 skip=0
        for ((i = 0; i < N; i++)); do
            case "${STATUS[$i]}" in
            passed) ran=$((ran + 1)); pass=$((pass + 1)) ;;
            failed*) ran=$((ran + 1)); fail=$((fail + 1)) ;;
            "timed out"*) ran=$((ran + 1)); tout=$((tout + 1)) ;;
            skipped* | dry* | "not reached") skip=$((skip + 1)) ;;
            esac
        done
        echo "stages: $ran ran, $pass passed, $fail failed, $tout timed out, $skip skipped or not run"
    } >"$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
}

# ---- running one stage in its own process group ----------------------------------------------
CUR_PGID=""
kill_group() { # kill_group PGID: TERM, then KILL after the grace period
    local g=$1 t
    kill -TERM -- "-$g" 2>/dev/null || return 0
    for ((t = 0; t < GRACE * 10; t++)); do
        kill -0 -- "-$g" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL -- "-$g" 2>/dev/null
    return 0
}
on_signal() {
    echo "gpu_window: interrupted; stopping the running stage" >&2
    [ -n "$CUR_PGID" ] && kill_group "$CUR_PGID"
    for ((i = 0; i < N; i++)); do
        [ "${STATUS[$i]}" = running ] && STATUS[$i]="timed out (interrupted)"
    done
    summary
    cat "$OUT/summary.txt"
    exit 1
}
trap on_signal INT TERM

# run_cmd I SECONDS CMD: runs CMD (a bash command) as stage I's process group with its output in
# the stage's log; sets RC[I] and the status (passed, failed, timed out).
run_cmd() {
    local i=$1 limit=$2 cmd=$3 log pg rcf t0 end
    log="$OUT/$(printf '%02d' $((i + 1)))-${NAMES[$i]}.log"
    pg="$OUT/.pgid.$i"
    rcf="$OUT/.rc.$i"
    rm -f "$pg" "$rcf"
    t0=$(date +%s)
    end=$((t0 + limit))
    {
        echo "== stage ${NAMES[$i]}: $cmd"
        echo "== budget $limit s, started $(date -u +%H:%M:%S)"
    } >>"$log"
    # the session leader records its process group and, when the command ends, its status
    setsid bash -c 'echo $$ > "$1"; bash -c "$2"; echo $? > "$3"' stage "$pg" "$cmd" "$rcf" \
        >>"$log" 2>&1 </dev/null &
    local leader=$!
    local t=0
    while [ ! -s "$pg" ] && [ $t -lt 50 ] && kill -0 "$leader" 2>/dev/null; do
        sleep 0.1
        t=$((t + 1))
    done
    CUR_PGID=$(cat "$pg" 2>/dev/null)
    STATUS[$i]=running
    while kill -0 "$leader" 2>/dev/null; do
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "== stage ${NAMES[$i]}: budget of $limit s spent; killing its process group" >>"$log"
            [ -n "$CUR_PGID" ] && kill_group "$CUR_PGID"
            break
        fi
        sleep 0.2
    done
    # a process stuck in the driver may not die even by KILL: wait 10 s at most, then go on
    t=0
    while kill -0 "$leader" 2>/dev/null && [ $t -lt 100 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    kill -0 "$leader" 2>/dev/null || wait "$leader" 2>/dev/null
    # the command's children outlive a normal end only if the command left them behind
    [ -n "$CUR_PGID" ] && kill -0 -- "-$CUR_PGID" 2>/dev/null && kill_group "$CUR_PGID"
    CUR_PGID=""
    TOOK[$i]=$(($(date +%s) - t0))
    if [ -s "$rcf" ]; then
        RC[$i]=$(cat "$rcf")
        if [ "${RC[$i]}" = 0 ]; then STATUS[$i]=passed; else STATUS[$i]="failed"; fi
    else
        RC[$i]="-"
        STATUS[$i]="timed out"
    fi
    rm -f "$pg" "$rcf"
    echo "== stage ${NAMES[$i]}: ${STATUS[$i]} after ${TOOK[$i]} s (exit ${RC[$i]})" >>"$log"
}

# ---- the stages' commands -----------------------------------------------------------------------
# Debian packages of tools/setup.sh (build and run, and the tests') that are not installed.
missing_debs() {
    local p out=""
    for p in $(bash tools/setup.sh --test --list 2>/dev/null); do
        dpkg -s "$p" >/dev/null 2>&1 || out="$out $p"
    done
    echo "$out"
}
# The CUDA pieces: "name: path" for each one found, "MISSING name (what needs it)" otherwise.
cuda_check() {
    local inc=$CUDA_HOME/include lib=$CUDA_HOME/lib64 miss=0 f
    chk() { # chk LABEL NEEDED-BY CANDIDATE...
        local label=$1 by=$2 c
        shift 2
        for c in "$@"; do
            if [ -e "$c" ] || command -v "$c" >/dev/null 2>&1; then
                echo "ok      $label: $(command -v "$c" 2>/dev/null || echo "$c")"
                return 0
            fi
        done
        echo "MISSING $label (needed by $by): looked for $*"
        miss=1
    }
    chk nvcc build "$CUDA_HOME/bin/nvcc"
    chk "CUDA runtime" build "$lib/libcudart.so"
    chk cudnn.h build "$inc/cudnn.h" /usr/include/cudnn.h
    chk nccl.h build "$inc/nccl.h" /usr/include/nccl.h
    chk cublas_v2.h build "$inc/cublas_v2.h"
    for f in libcudnn.so.9 libcublas.so.13 libnccl.so.2; do
        chk "$f" "run time (opened on first use)" "$lib/$f" "/usr/lib/x86_64-linux-gnu/$f"
    done
    chk mpicc build mpicc
    local build_miss=$miss
    # the GPU tools: their stages say so themselves; missing here is not a failed setup
    chk nvidia-smi "the gpu stage" nvidia-smi
    chk compute-sanitizer "the sanitizer stage" compute-sanitizer "$CUDA_HOME/bin/compute-sanitizer"
    return "$build_miss"
}
stage_setup() {
    echo "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    local miss
    miss=$(missing_debs)
    if [ -z "$miss" ]; then
        echo "Debian packages of tools/setup.sh --test: all installed"
    elif [ "$DRY" = 1 ]; then
        echo "Debian packages missing (a real window runs tools/setup.sh for them):$miss"
    else
        echo "Debian packages missing:$miss; trying tools/setup.sh (needs apt sources)"
        if timeout 60 bash tools/setup.sh; then
            miss=$(missing_debs)
        else
            echo "tools/setup.sh failed (no network or no root?)"
        fi
        [ -n "$miss" ] && echo "STILL MISSING Debian packages:$miss (install them: apt-get install -y$miss)"
    fi
    cuda_check
    local cuda=$?
    # what the build cannot do without: a compiler, MPI, libyaml, zlib, libpng, cairo, CUDA
    local hard=""
    for p in build-essential libopenmpi-dev libyaml-dev zlib1g-dev libpng-dev libcairo2-dev; do
        grep -qw "$p" <<<"$miss" && hard="$hard $p"
    done
    [ -n "$hard" ] && echo "the build needs:$hard"
    # a dry run reports the other missing packages; a window fails on them (its tests need them)
    [ -z "$hard" ] && [ $cuda = 0 ] && { [ -z "$miss" ] || [ "$DRY" = 1 ]; }
}
stage_gpu() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm \
            --format=csv | tee "$OUT/nvidia-smi.csv"
        nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    "$BUILD/tests/gpu/cu_ops" --probe
}
stage_sanitizer() {
    local cs rc=0
    cs=$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" 2>/dev/null)
    [ -n "$cs" ] || { echo "compute-sanitizer: not found (the CUDA toolkit's, $CUDA_HOME/bin)"; return 1; }
    # --report-api-errors no: NCCL's communicator setup probes kernels of other architectures
    # (cudaFuncGetAttributes -> cudaErrorNoKernelImageForDevice, handled inside NCCL), which
    # memcheck would count as errors; memory errors are still reported, and every CUDA call of
    # the backend checks its own status.
    echo "-- memcheck: cu_ops fp32 --quick"
    "$cs" --tool memcheck --report-api-errors no --error-exitcode 9 "$BUILD/tests/gpu/cu_ops" fp32 --quick 2>&1 | tail -n 40
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    echo "-- memcheck: the kernel programs, --quick"
    "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
        bash bench/gpu/kernels/run.sh --quick --reps 2 2>&1 | tail -n 40
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    echo "-- racecheck: cu_ops fp32 --quick"
    "$cs" --tool racecheck --error-exitcode 9 "$BUILD/tests/gpu/cu_ops" fp32 --quick 2>&1 | tail -n 40
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    return $rc
}
selftest_cmd() {
    case "$1" in
    st-pass) echo "echo one stage passes" ;;
    st-fail) echo "echo this stage fails; exit 3" ;;
    st-overrun) echo "bash -c 'exec -a scaffold-window-selftest-$$ sleep 300' & sleep 300" ;;
    *) echo "echo should not run; exit 4" ;;
    esac
}
# The command of stage I, or "" when it is only shown (dry run); a dry run's stages run their
# CPU parts.
stage_cmd() {
    local name=${NAMES[$1]}
    case "$name" in
    st-*) selftest_cmd "$name" ;;
    setup) echo stage_setup ;;
    build) # tests-bin holds everything the window runs (the GPU tests and benchmarks included)
        echo "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -j$JOBS CUDA=1 CUDA_HOME=$(printf '%q' "$CUDA_HOME") BUILD=$BUILD tests-bin" ;;
    gpu) echo stage_gpu ;;
    kernels)
        if [ "$DRY" = 1 ]; then echo "bash bench/gpu/kernels/run.sh --cpu-only --quick"
        else echo "bash bench/gpu/kernels/run.sh --reps 10"; fi ;;
    gpu-tests) echo "SCAFFOLD_GPU_SANITIZE=0 bash tests/gpu/run.sh" ;;
    sanitizer) [ "$DRY" = 1 ] || echo stage_sanitizer ;;
    step-bench) echo "PARTS='1 2' SCALES='5 6 7' bash bench/gpu/run.sh 3" ;;
    full-suite) # the sanitizers ran in their own stage
        [ "$DRY" = 1 ] || echo "SCAFFOLD_GPU_SANITIZE=0 env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make CUDA=1 CUDA_HOME=$(printf '%q' "$CUDA_HOME") BUILD=$BUILD test" ;;
    dice) [ "$DRY" = 1 ] || echo "PARTS=3 bash bench/gpu/run.sh" ;;
    esac
}
# A stage whose GPU part said SKIP (no GPU) and ran nothing: skipped, not passed.
skipped_no_gpu() {
    local log=$1
    grep -qE '^SKIP' "$log" && ! grep -qE '^[1-9][0-9]* passed' "$log" &&
        ! grep -qE '^RESULT ' "$log"
}

# The stage functions run as commands of their own process group (bash -c): exported.
export DRY OUT
export -f missing_debs cuda_check stage_setup stage_gpu stage_sanitizer

# ---- the window ----------------------------------------------------------------------------------
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo none)$(git status --porcelain 2>/dev/null | grep -q . && echo ' (with local changes)')"
    echo "host: $(uname -srm), $(nproc) cores"
    echo "seconds: $SECONDS_TOTAL, dry run: $DRY, only: ${ONLY:-all}, BUILD=$BUILD, CUDA_HOME=$CUDA_HOME"
    [ -x "$CUDA_HOME/bin/nvcc" ] && echo "nvcc: $("$CUDA_HOME/bin/nvcc" --version | tail -1)"
    for h in "$CUDA_HOME/include/cudnn_version.h" "$CUDA_HOME/include/nccl.h"; do
        [ -f "$h" ] && echo "$(basename "$h"): $(grep -E '#define (CUDNN|NCCL)_(MAJOR|MINOR|PATCH(LEVEL)?) ' "$h" | awk '{printf "%s ", $3}')"
    done
} >"$OUT/env.txt" 2>/dev/null
echo "gpu_window: $SECONDS_TOTAL s$([ "$DRY" = 1 ] && echo ', dry run')$([ "$SELFTEST" = 1 ] && echo ', self-test'); results in $OUT"
summary
for ((i = 0; i < N; i++)); do
    name=${NAMES[$i]}
    if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then
        STATUS[$i]="skipped (not in --only)"
        continue
    fi
    blocked=""
    for need in ${NEEDS[$i]}; do
        st=$(status_of "$need")
        case "$st" in
        passed | "skipped (not in --only)") ;;
        "skipped (no GPU"*) [ "$DRY" = 1 ] || blocked="$need $st" ;; # a dry run goes on
        *) blocked="$need $st" ;;
        esac
        [ -n "$blocked" ] && break
    done
    if [ -n "$blocked" ]; then
        STATUS[$i]="skipped ($blocked)"
        summary
        continue
    fi
    left=$((DEADLINE - RESERVE - $(date +%s)))
    if [ "$left" -lt "${MINIMUM[$i]}" ]; then
        STATUS[$i]="skipped (no time: ${left} s left)"
        summary
        continue
    fi
    limit=${BUDGET[$i]}
    [ "$left" -lt "$limit" ] && limit=$left
    cmd=$(stage_cmd "$i")
    if [ -z "$cmd" ]; then
        STATUS[$i]="dry (not run)"
        real=$(DRY=0 stage_cmd "$i") # what a window runs
        [[ "$real" == stage_* ]] && real="${WHAT[$i]}"
        echo "== stage $name (dry run, not run): $real" >"$OUT/$(printf '%02d' $((i + 1)))-$name.log"
        printf '%-11s dry: would run: %s\n' "$name" "$real"
        summary
        continue
    fi
    case "$cmd" in
    stage_*) shown=${WHAT[$i]} ;;
    *) shown=$cmd ;;
    esac
    printf '%-11s running (budget %s s): %s\n' "$name" "$limit" "$shown"
    run_cmd "$i" "$limit" "$cmd"
    log="$OUT/$(printf '%02d' $((i + 1)))-$name.log"
    if [ "$DRY" = 1 ] && [ "${STATUS[$i]}" = passed ] && skipped_no_gpu "$log"; then
        STATUS[$i]="skipped (no GPU: ran to its SKIP)"
    fi
    if [ "$name" = gpu ] && [ "${STATUS[$i]}" = failed ] && grep -q '^no GPU' "$log"; then
        STATUS[$i]="skipped (no GPU visible)"
        [ "$DRY" = 1 ] || STATUS[$i]="failed (no GPU visible)"
    fi
    printf '%-11s %s after %s s\n' "$name" "${STATUS[$i]}" "${TOOK[$i]}"
    summary
done
trap - INT TERM
summary
cat "$OUT/summary.txt"

if [ "$SELFTEST" = 1 ]; then
    # The script's own checks on its synthetic stages.
    p=0 f=0
    expect() { # expect STAGE STATUS-PREFIX
        local st
        st=$(status_of "$1")
        if [[ "$st" == "$2"* ]]; then echo "ok   $1: $st"; p=$((p + 1));
        else echo "FAIL $1: '$st', expected '$2'"; f=$((f + 1)); fi
    }
    expect st-pass passed
    expect st-fail failed
    expect st-overrun "timed out"
    expect st-needs "skipped (st-fail failed"
    expect st-late "skipped (no time"
    if pgrep -f "scaffold-window-selftest-$$" >/dev/null 2>&1; then
        echo "FAIL st-overrun: its background child survived the kill"
        f=$((f + 1))
    else
        echo "ok   st-overrun: no process of its group survived"
        p=$((p + 1))
    fi
    took=$(($(date +%s) - START))
    if [ "$took" -le $((SECONDS_TOTAL + GRACE + 2)) ]; then
        echo "ok   ended within the window ($took s of $SECONDS_TOTAL)"; p=$((p + 1))
    else
        echo "FAIL took $took s for a $SECONDS_TOTAL s window"; f=$((f + 1))
    fi
    if grep -q "one stage passes" "$OUT/01-st-pass.log" && [ -s "$OUT/summary.txt" ]; then
        echo "ok   logs and summary written"; p=$((p + 1))
    else
        echo "FAIL logs or summary missing in $OUT"; f=$((f + 1))
    fi
    echo "$p passed, $f failed"
    [ "$f" = 0 ]
    exit
fi
bad=0
for ((i = 0; i < N; i++)); do
    case "${STATUS[$i]}" in failed* | "timed out"*) bad=1 ;; esac
done
exit $bad
