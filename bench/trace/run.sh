#!/usr/bin/env bash
# Tracer overhead: nanoseconds per intercepted call (1-byte pread from a cached file, 4 KiB
# reads) at 1 and 2 threads, for: no preload (the baseline), tracer preloaded but disabled,
# tracer enabled, and dftracer's preload library when `pip install dftracer` provides it.
# Each configuration runs REPS times, interleaved; the median is reported, with the ratio and
# the nanoseconds added against the no-preload baseline of the same run. Thread CPU time per
# call is the primary figure (robust on a shared machine); wall time is shown too.
# Env: REPS (default 5), N (calls per thread, default 100000).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PY=${PYTHON_DFT:-python3}
LIB=$PWD/$BUILD/libscaffold_trace.so
BIN=$PWD/$BUILD/bench/trace/ovh_calls
REPS=${REPS:-5}
N=${N:-100000}
if [ ! -f "$LIB" ] || [ ! -x "$BIN" ]; then
    echo "bench trace: build first (make): missing $LIB or $BIN" >&2
    exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-bench-trace.XXXXXX")
trap 'rm -rf "$T"' EXIT
head -c 1048576 /dev/urandom >"$T/f.bin"
cat "$T/f.bin" >/dev/null # cached

DFT=$($PY -c "import dftracer, os; print(os.path.join(os.path.dirname(dftracer.__file__), 'lib64', 'libdftracer_preload.so'))" 2>/dev/null)
[ -f "$DFT" ] || DFT=""

# run VARIANT MODE THREADS -> "wall cpu"
run() {
    local v=$1 mode=$2 th=$3
    rm -rf "$T/out"
    mkdir -p "$T/out"
    case $v in
    none) "$BIN" "$mode" "$th" "$N" "$T/f.bin" ;;
    disabled) SCAFFOLD_TRACE_DISABLE=1 LD_PRELOAD="$LIB" "$BIN" "$mode" "$th" "$N" "$T/f.bin" ;;
    enabled) SCAFFOLD_TRACE_BUFFER_MIB=64 SCAFFOLD_TRACE_PREFIX="$T/out/trace" LD_PRELOAD="$LIB" \
        "$BIN" "$mode" "$th" "$N" "$T/f.bin" ;;
    deferred) SCAFFOLD_TRACE_BUFFER_MIB=64 SCAFFOLD_TRACE_FLUSH_MIB=1024 SCAFFOLD_TRACE_FLUSH_MS=3600000 \
        SCAFFOLD_TRACE_PREFIX="$T/out/trace" LD_PRELOAD="$LIB" "$BIN" "$mode" "$th" "$N" "$T/f.bin" ;;
    dftracer) DFTRACER_ENABLE=1 DFTRACER_INC_METADATA=1 DFTRACER_INIT=PRELOAD DFTRACER_DATA_DIR=all \
        DFTRACER_LOG_FILE="$T/out/trace" LD_PRELOAD="$DFT" "$BIN" "$mode" "$th" "$N" "$T/f.bin" ;;
    esac | awk '/ns_per_call/ {print $2, $4}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# deferred = enabled, with the flusher held until exit: the application thread's own cost, without
# the flusher competing for the same cores.
variants="none disabled enabled deferred"
[ -n "$DFT" ] && variants="$variants dftracer"
echo "tracer overhead: N=$N calls/thread, median of $REPS interleaved runs; baseline = no preload"
[ -z "$DFT" ] && echo "(dftracer preload library not found: pip install dftracer to compare)"
printf "%-7s %-3s %-9s %10s %10s %8s %10s\n" mode thr variant cpu_ns wall_ns ratio added_ns
for mode in pread1 read4k; do
    for th in 1 2; do
        declare -A W C
        for v in $variants; do W[$v]=""; C[$v]=""; done
        for _ in $(seq "$REPS"); do
            for v in $variants; do
                r=$(run "$v" "$mode" "$th")
                W[$v]="${W[$v]} ${r% *}"
                C[$v]="${C[$v]} ${r#* }"
            done
        done
        base=$(echo "${C[none]}" | tr ' ' '\n' | grep . | median)
        for v in $variants; do
            c=$(echo "${C[$v]}" | tr ' ' '\n' | grep . | median)
            w=$(echo "${W[$v]}" | tr ' ' '\n' | grep . | median)
            awk -v m="$mode" -v t="$th" -v v="$v" -v c="$c" -v w="$w" -v b="$base" \
                'BEGIN {printf "%-7s %-3s %-9s %10.1f %10.1f %8.2f %10.1f\n", m, t, v, c, w, c / b, c - b}'
        done
        unset W C
    done
done

# Deterministic cost: user-space instructions per call inside the loop (callgrind), which a busy
# machine cannot perturb. Clock reads are system calls under valgrind and are not counted.
if command -v valgrind >/dev/null 2>&1; then
    ir() { # ENV... -> instructions in worker() for 10000 and 30000 calls, per call difference
        local a b
        a=$(env "$@" valgrind --tool=callgrind --callgrind-out-file="$T/cg" --toggle-collect=worker \
            "$BIN" pread1 1 10000 "$T/f.bin" 2>&1 | sed -n 's/.*Collected : //p')
        b=$(env "$@" valgrind --tool=callgrind --callgrind-out-file="$T/cg" --toggle-collect=worker \
            "$BIN" pread1 1 30000 "$T/f.bin" 2>&1 | sed -n 's/.*Collected : //p')
        echo $(((b - a) / 20000))
    }
    i0=$(ir X=1)
    i1=$(ir SCAFFOLD_TRACE_DISABLE=1 LD_PRELOAD="$LIB")
    i2=$(ir SCAFFOLD_TRACE_BUFFER_MIB=64 SCAFFOLD_TRACE_PREFIX="$T/out/trace" LD_PRELOAD="$LIB")
    echo "instructions per pread1 call (callgrind): none $i0, disabled $i1 (+$((i1 - i0))), enabled $i2 (+$((i2 - i0)))"
fi

# Sustained rate: 1M events with the default 8 MiB ring, so the flusher (JSON + gzip) is the
# limit once the ring fills; and the trace size per event.
rm -rf "$T/out"
mkdir -p "$T/out"
r0=$("$BIN" pread1 1 1000000 "$T/f.bin" | awk '{print $2}')
start=$(date +%s.%N)
r1=$(SCAFFOLD_TRACE_PREFIX="$T/out/trace" LD_PRELOAD="$LIB" "$BIN" pread1 1 1000000 "$T/f.bin" | awk '{print $2}')
end=$(date +%s.%N)
bytes=$(cat "$T"/out/*.pfw.gz | wc -c)
awk -v a="$r0" -v b="$r1" -v s="$start" -v e="$end" -v n="$bytes" 'BEGIN {
    printf "sustained 1M preads, default ring: %.1f ns/call wall vs %.1f baseline (ratio %.2f); process %.2f s incl. final flush; %.1f bytes/event gzip\n", b, a, b / a, e - s, n / 1e6 }'
