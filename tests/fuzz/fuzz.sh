#!/usr/bin/env bash
# tests/fuzz/fuzz.sh SECONDS FUZZ_BUILD [NAME...]: runs each libFuzzer harness (all, or the
# NAMEs) for SECONDS on a working copy of its seed corpus, then prints one line per harness
# (executions, executions/s, corpus size, findings) and "harnesses: N, executions: N, findings: N".
# Exit 1 if any harness found something (the input is in FUZZ_BUILD/findings/NAME/) or failed to
# run. `make fuzz FUZZ_SECONDS=N` calls it; long local campaigns: run it under nice -n 19.
# FUZZ_SEED=N: libFuzzer's -seed (the same inputs in the same order on a clean working corpus, as
# far as the time allows); unset, a random seed.
set -u
cd "$(dirname "$0")/../.."
secs=${1:?usage: fuzz.sh SECONDS FUZZ_BUILD [NAME...]}
fb=${2:?usage: fuzz.sh SECONDS FUZZ_BUILD [NAME...]}
seed=${FUZZ_SEED:-}
if [ -n "$seed" ] && ! [[ $seed =~ ^[0-9]+$ ]]; then
    echo "fuzz.sh: FUZZ_SEED must be a non-negative integer, got '$seed'" >&2
    exit 2
fi
shift 2
names=${*:-$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||')}
total=0
bad=0
n=0
printf '%-16s %8s %14s %10s %8s %9s\n' harness seconds executions exec/s corpus findings
for name in $names; do
    bin=$fb/fuzz_$name
    work=$fb/corpus/$name
    found=$fb/findings/$name
    mkdir -p "$work" "$found"
    log=$fb/fuzz_$name.log
    # -timeout: a single input taking FUZZ_TIMEOUT s (default 30) is a hang: inputs run in well
    # under a second, but a campaign at nice 19 on a busy machine can be descheduled for
    # seconds; -rss_limit_mb: 2 GiB per input is a leak or a bomb. The committed seeds are read
    # but never written; new inputs go to $work.
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        "$bin" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb=2048 -print_final_stats=1 \
        ${seed:+-seed="$seed"} \
        -artifact_prefix="$found/" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    nfound=$(find "$found" -type f | wc -l)
    ncorp=$(find "$work" -type f | wc -l)
    if [ -z "$execs" ] || [ $rc -ne 0 ] || [ "$nfound" -gt 0 ]; then
        bad=$((bad + 1))
        tail -n 30 "$log"
    fi
    execs=${execs:-0}
    total=$((total + execs))
    n=$((n + 1))
    printf '%-16s %8s %14s %10s %8s %9s\n' "$name" "$secs" "$execs" "$((execs / (secs > 0 ? secs : 1)))" "$ncorp" "$nfound"
done
echo "harnesses: $n, executions: $total, findings or failures: $bad"
[ "$bad" -eq 0 ]
