#!/usr/bin/env bash
# Tracer overhead against no tracing (the baseline) and against dftracer 2.2.0's preload library
# (PyPI, bench-only venv from bench/venv.sh), all measured in the same run, interleaved.
#
#  1. Short runs: N calls per thread (1-byte pread from a cached file, 4 KiB reads) at 1 and 2
#     threads, for: no preload, tracer preloaded but disabled, enabled, enabled with the flusher
#     held until exit (the application thread's own cost), dftracer. Thread CPU time per call is
#     the primary figure (robust on a shared machine); wall time is shown too.
#  2. Sustained: 1M back-to-back 1-byte preads on one thread, where the flusher (JSON + gzip)
#     must keep up on the other core: wall ns per call in the loop, the whole process (with the
#     final flush) and its CPU time, the trace size per event; for no preload, our tracer at
#     compression levels 0/1/6 (libdeflate) and 1 (zlib fallback build), and dftracer.
#  3. Instructions per call (callgrind), which a busy machine cannot perturb.
# Every figure is the median of REPS runs. Env: REPS (5), N (100000), SN (1000000), SREPS (3).
# Run it alone: flock -x /tmp/scaffold-cpu.lock bash bench/trace/run.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/libscaffold_trace.so
BIN=$PWD/$BUILD/bench/trace/ovh_calls
REPS=${REPS:-5}
N=${N:-100000}
SN=${SN:-1000000}
SREPS=${SREPS:-3}
if [ ! -f "$LIB" ] || [ ! -x "$BIN" ]; then
    echo "bench trace: build first (make): missing $LIB or $BIN" >&2
    exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-bench-trace.XXXXXX")
trap 'rm -rf "$T"' EXIT
head -c 1048576 /dev/urandom >"$T/f.bin"
cat "$T/f.bin" >/dev/null # cached

source bench/venv.sh
DFT=""
if DPY=$(bench_venv dftracer); then
    DFT=$("$DPY" -c "import dftracer, os; print(os.path.join(os.path.dirname(dftracer.__file__), 'lib64', 'libdftracer_preload.so'))" 2>/dev/null)
    [ -f "$DFT" ] || DFT=""
fi
[ -z "$DFT" ] && echo "(dftracer's preload library is not available: the dftracer columns are missing)"

# The zlib fallback build of the tracer, for the level table (one gcc call).
ZLIB_LIB=$T/libscaffold_trace_zlib.so
gcc -std=c11 -D_GNU_SOURCE -O2 -fPIC -fvisibility=hidden -shared -Isrc -Iinclude src/trace/*.c \
    -o "$ZLIB_LIB" -ldl -lpthread -lz 2>"$T/zlib.err" || ZLIB_LIB=""

# env_of VARIANT: the environment that selects it.
env_of() {
    case $1 in
    none) echo "X=1" ;;
    disabled) echo "SCAFFOLD_TRACE_DISABLE=1 LD_PRELOAD=$LIB" ;;
    enabled) echo "SCAFFOLD_TRACE_PREFIX=$T/out/trace LD_PRELOAD=$LIB" ;;
    deferred) echo "SCAFFOLD_TRACE_BUFFER_MIB=64 SCAFFOLD_TRACE_FLUSH_MIB=1024 SCAFFOLD_TRACE_FLUSH_MS=3600000 SCAFFOLD_TRACE_PREFIX=$T/out/trace LD_PRELOAD=$LIB" ;;
    level0 | level1 | level6) echo "SCAFFOLD_TRACE_LEVEL=${1#level} SCAFFOLD_TRACE_PREFIX=$T/out/trace LD_PRELOAD=$LIB" ;;
    zlib1) echo "SCAFFOLD_TRACE_LEVEL=1 SCAFFOLD_TRACE_PREFIX=$T/out/trace LD_PRELOAD=$ZLIB_LIB" ;;
    dftracer) echo "DFTRACER_ENABLE=1 DFTRACER_INC_METADATA=1 DFTRACER_INIT=PRELOAD DFTRACER_DATA_DIR=all DFTRACER_LOG_FILE=$T/out/trace LD_PRELOAD=$DFT" ;;
    esac
}

# run VARIANT MODE THREADS CALLS -> "loop_wall_ns loop_cpu_ns process_wall_s process_cpu_s bytes"
run() {
    rm -rf "$T/out"
    mkdir -p "$T/out"
    local line
    # time(1) outside the preload: only the benchmark process is traced and timed.
    line=$(/usr/bin/time -f "TIME %e %U %S" env $(env_of "$1") "$BIN" "$2" "$3" "$4" "$T/f.bin" 2>&1)
    local bytes
    bytes=$(cat "$T"/out/* 2>/dev/null | wc -c)
    awk -v b="$bytes" '/ns_per_call/ {w = $2; c = $4} /^TIME/ {e = $2; u = $3 + $4}
        END {printf "%s %s %s %s %s\n", w, c, e, u, b}' <<<"$line"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() { tr ' ' '\n' | grep . | median; } # median of a space-separated list

echo "== 1. short runs: N=$N calls/thread, median of $REPS interleaved runs; baseline = no preload"
short="none disabled enabled deferred"
[ -n "$DFT" ] && short="$short dftracer"
printf "%-7s %-3s %-9s %10s %10s %8s %10s\n" mode thr variant cpu_ns wall_ns ratio added_ns
for mode in pread1 read4k; do
    for th in 1 2; do
        declare -A W C
        for v in $short; do W[$v]=""; C[$v]=""; done
        for _ in $(seq "$REPS"); do
            for v in $short; do
                read -r w c _ <<<"$(run "$v" "$mode" "$th" "$N")"
                W[$v]="${W[$v]} $w"
                C[$v]="${C[$v]} $c"
            done
        done
        base=$(col <<<"${C[none]}")
        for v in $short; do
            c=$(col <<<"${C[$v]}")
            w=$(col <<<"${W[$v]}")
            awk -v m="$mode" -v t="$th" -v v="$v" -v c="$c" -v w="$w" -v b="$base" \
                'BEGIN {printf "%-7s %-3s %-9s %10.1f %10.1f %8.2f %10.1f\n", m, t, v, c, w, c / b, c - b}'
        done
        unset W C
    done
done

echo
echo "== 2. sustained: $SN back-to-back 1-byte preads, 1 thread, median of $SREPS interleaved runs"
sustained="none level1"
[ -n "$DFT" ] && sustained="$sustained dftracer"
sustained="$sustained level0 level6"
[ -n "$ZLIB_LIB" ] && sustained="$sustained zlib1"
printf "%-9s %12s %8s %12s %8s %12s %12s\n" variant loop_ns/call ratio process_s ratio cpu_s bytes/event
declare -A LW PW PC PB
for v in $sustained; do LW[$v]=""; PW[$v]=""; PC[$v]=""; PB[$v]=""; done
for _ in $(seq "$SREPS"); do
    for v in $sustained; do
        read -r w _ e u b <<<"$(run "$v" pread1 1 "$SN")"
        LW[$v]="${LW[$v]} $w"
        PW[$v]="${PW[$v]} $e"
        PC[$v]="${PC[$v]} $u"
        PB[$v]="${PB[$v]} $b"
    done
done
lbase=$(col <<<"${LW[none]}")
pbase=$(col <<<"${PW[none]}")
for v in $sustained; do
    name=$v
    [ "$v" == level1 ] && name="enabled"
    awk -v v="$name" -v l="$(col <<<"${LW[$v]}")" -v p="$(col <<<"${PW[$v]}")" -v c="$(col <<<"${PC[$v]}")" \
        -v b="$(col <<<"${PB[$v]}")" -v lb="$lbase" -v pb="$pbase" -v n="$SN" \
        'BEGIN {printf "%-9s %12.1f %8.2f %12.2f %8.2f %12.2f %12.1f\n", v, l, l / lb, p, p / pb, c, b / n}'
done
echo "(enabled = libdeflate level 1, the default; level0/level6 = SCAFFOLD_TRACE_LEVEL; zlib1 = the zlib fallback build)"

# Deterministic cost: user-space instructions per call inside the loop (callgrind). Clock reads
# are rdtsc (or vDSO calls) of a few ns each outside valgrind.
if command -v valgrind >/dev/null 2>&1; then
    ir() { # ENV... -> instructions in worker() for 10000 and 30000 calls, per call difference
        local a b
        a=$(env "$@" valgrind --tool=callgrind --callgrind-out-file="$T/cg" --toggle-collect=worker \
            "$BIN" pread1 1 10000 "$T/f.bin" 2>&1 | sed -n 's/.*Collected : //p')
        b=$(env "$@" valgrind --tool=callgrind --callgrind-out-file="$T/cg" --toggle-collect=worker \
            "$BIN" pread1 1 30000 "$T/f.bin" 2>&1 | sed -n 's/.*Collected : //p')
        echo $(((b - a) / 20000))
    }
    mkdir -p "$T/out"
    i0=$(ir X=1)
    i1=$(ir SCAFFOLD_TRACE_DISABLE=1 LD_PRELOAD="$LIB")
    i2=$(ir SCAFFOLD_TRACE_BUFFER_MIB=64 SCAFFOLD_TRACE_PREFIX="$T/out/trace" LD_PRELOAD="$LIB")
    echo
    echo "== 3. instructions per pread1 call (callgrind): none $i0, disabled $i1 (+$((i1 - i0))), enabled $i2 (+$((i2 - i0)))"
fi
