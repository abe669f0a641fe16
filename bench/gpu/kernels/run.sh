#!/usr/bin/env bash
# bench/gpu/kernels/run.sh [--cpu-only] [--quick] [--reps N] [--only "NAME ..."]
# Runs every per-kernel program of bench/gpu/kernels/ (one per own CUDA kernel of src/nn/cuda;
# see kh.h) and prints one table: per kernel and version, what was checked, the tolerance, the
# largest error and its ratio to the tolerance, PASS/FAIL, the time and the bandwidth. The rows
# "cpu" are the CPU reference (src/nn) against an independent formula, timed on the CPU; the rows
# "v1", "v2", ... are the GPU versions against that reference, timed on the GPU (median of
# --reps, L2 flushed). Without a GPU (or with --cpu-only) only the cpu rows run and each program
# prints one SKIP line for its GPU half.
# Ends with "N passed, N failed" (every check of every program; a program that crashes or
# prints no summary counts as one failure) and exits 1 when anything failed.
#   make -j CUDA=1 && bash bench/gpu/kernels/run.sh                  # on a GPU machine
#   bash bench/gpu/kernels/run.sh --cpu-only --quick                 # anywhere (tests/cuda)
# BUILD selects the build (default build-cuda when it has the programs, else build).
cd "$(dirname "$0")/../../.." || exit 1
args=()
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --cpu-only | --quick) args+=("$1") ;;
    --reps)
        [ $# -ge 2 ] || { echo "run.sh: --reps needs a number" >&2; exit 2; }
        args+=(--reps "$2"); shift ;;
    --only)
        [ $# -ge 2 ] || { echo "run.sh: --only needs kernel names" >&2; exit 2; }
        only=$2; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (--cpu-only, --quick, --reps N, --only NAMES)" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "${BUILD:-}" ]; then
    BUILD=build
    [ -d build-cuda/bench/gpu/kernels ] && BUILD=build-cuda
fi
dir=$BUILD/bench/gpu/kernels
progs=""
for src in bench/gpu/kernels/*.c; do
    n=$(basename "$src" .c)
    if [ -n "$only" ] && ! grep -qw -- "$n" <<<"$only"; then continue; fi
    progs="$progs $n"
done
if [ -z "$progs" ]; then
    echo "run.sh: no kernel program matches '$only'" >&2
    exit 2
fi
passed=0 failed=0 rows="" skips=""
for n in $progs; do
    if [ ! -x "$dir/$n" ]; then
        echo "FAIL $n: $dir/$n is not built (make${BUILD/#build-cuda/ CUDA=1})"
        failed=$((failed + 1))
        continue
    fi
    out=$("$dir/$n" "${args[@]}" 2>&1)
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
    if [ -z "$line" ]; then
        echo "FAIL $n: no summary line (exit $rc)"
        tail -n 5 <<<"$out"
        failed=$((failed + 1))
        continue
    fi
    p=${line%% passed*}
    f=${line#* passed, }
    f=${f%% failed*}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$f" -ne 0 ] && grep -vE '^(KROW|SKIP|==|[0-9]+ passed)' <<<"$out" | head -n 20
    rows+=$(grep '^KROW ' <<<"$out")$'\n'
    skips+=$(grep '^SKIP ' <<<"$out")$'\n'
done
# The table: one line per KROW (fields key=value; "what" may hold spaces, so it is taken
# between "what=" and " tol=").
printf '%s' "$rows" | awk '
    BEGIN {
        printf "%-19s %-4s %-46s %-14s %9s %8s %-5s %10s %8s\n", "kernel", "ver", "check",
               "tolerance", "max err", "err/tol", "", "ms", "GB/s"
    }
    /^KROW / {
        k = v = w = t = e = r = c = m = g = ""
        for (i = 2; i <= NF; i++) {
            split($i, kv, "=")
            if (kv[1] == "kernel") k = kv[2]
            else if (kv[1] == "ver") v = kv[2]
            else if (kv[1] == "tol") t = kv[2]
            else if (kv[1] == "maxerr") e = kv[2]
            else if (kv[1] == "worst") r = kv[2]
            else if (kv[1] == "check") c = kv[2]
            else if (kv[1] == "ms") m = kv[2]
            else if (kv[1] == "gbps") g = kv[2]
        }
        w = $0
        sub(/.* what=/, "", w)
        sub(/ tol=.*/, "", w)
        if (length(w) > 46) w = substr(w, 1, 45) "~"
        printf "%-19s %-4s %-46s %-14s %9s %8s %-5s %10s %8s\n", k, v, w, t, e, r, c, m, g
    }'
skips=$(grep -v '^$' <<<"$skips")
if [ -n "$skips" ]; then
    # one line for all: the reason is the same for every program
    echo "SKIP GPU halves of $(wc -l <<<"$skips") kernel programs: $(head -1 <<<"$skips" | sed 's/^SKIP [^:]*: //')"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
