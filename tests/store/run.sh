#!/usr/bin/env bash
# Store tests: the C suite (tests/store/test_store.c, mirroring DDStore's test_single,
# test_multirank and test_get_batch) at 1, 2, 3 and 4 ranks for both methods; indices and
# offsets past 2^31 (when 6 GiB are free); a window that
# cannot be created fails cleanly; `scaffold store-bench` arguments, CSV output and data checks;
# ASan/UBSan and TSan builds of the suite when they exist (make test-asan / test-tsan build them).
cd "$(dirname "$0")/../.." && source tests/lib.sh
T=$BUILD/tests/store/test_store
# Open MPI leaks its own init-time allocations; leaks are checked below, filtered to our code.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$PWD/tests/store/tsan.supp}

quiet() { "$@" >/dev/null; }
# MPICH progresses passive-target RMA only inside the target's MPI calls unless its progress
# thread is on (docs/reliability.md, "MPICH"); the rma method's reads from a computing rank
# need it.
[ "${SCAFFOLD_MPI:-openmpi}" = mpich ] && export MPIR_CVAR_ASYNC_PROGRESS=${MPIR_CVAR_ASYNC_PROGRESS:-1}

for m in rma coll; do
    t_cbin timeout 120 "$T" "$m"
    for n in 2 3 4; do
        t_cbin timeout 120 $MPIRUN -n $n "$T" "$m"
    done
done

# 64-bit sizes: 2^31 + 64 one-byte rows on rank 0 (~2.2 GiB); skipped when memory is short.
avail_kb=$(awk '/^MemAvailable:/{print $2}' /proc/meminfo)
if [ "${avail_kb:-0}" -ge $((6 * 1024 * 1024)) ]; then
    for m in rma coll; do t_cbin timeout 120 $MPIRUN -n 2 "$T" "$m" big; done
else
    echo "skip 64-bit size test: MemAvailable ${avail_kb:-?} kB < 6 GiB"
fi

# Open MPI's pt2pt one-sided component refuses MPI_THREAD_MULTIPLE: store_add must say so on
# every rank and exit, not hang; the coll method needs no window and still works there.
tiny=(--row-bytes 64 --batch 1,8 --repeats 1 --nget 64)
if [ "${SCAFFOLD_MPI:-openmpi}" = openmpi ]; then
    t_expect_fail "rma without a usable window: clear error, no hang" 1 "MPI_Win_allocate of [0-9]+ bytes failed.*coll method" \
        timeout 60 $MPIRUN --mca osc pt2pt -n 2 "$SCAFFOLD" store-bench --method rma "${tiny[@]}"
    t_check "coll runs where no window can be created" \
        quiet timeout 60 $MPIRUN --mca osc pt2pt -n 2 "$SCAFFOLD" store-bench --method coll "${tiny[@]}"
else
    echo "skip the Open MPI pt2pt window test (SCAFFOLD_MPI=$SCAFFOLD_MPI)"
fi

# Command line.
t_check "store-bench --help" quiet "$SCAFFOLD" store-bench --help
t_expect_fail "unknown option" 2 "unknown option '--bogus'" "$SCAFFOLD" store-bench --bogus 1
t_expect_fail "unknown method" 2 "unknown store method 'foo'" "$SCAFFOLD" store-bench --method foo
t_expect_fail "malformed size" 2 "^scaffold store-bench: --row-bytes: expected .*got '12x'" "$SCAFFOLD" store-bench --row-bytes 12x
t_expect_fail "batch 0" 2 "^scaffold store-bench: --batch: expected .*\\[1, 1048576\\].*got '0'" "$SCAFFOLD" store-bench --batch 0
t_expect_fail "missing value" 2 "^scaffold store-bench: --nget needs a value" "$SCAFFOLD" store-bench --nget
# A negative count is a range error, not "not a number"; the prefix is every command's.
t_expect_fail "negative count" 2 "^scaffold store-bench: --rows-per-rank: expected a positive whole number.*, got '-5'$" \
    "$SCAFFOLD" store-bench --rows-per-rank -5
t_expect_fail "repeats out of range" 2 "^scaffold store-bench: --repeats: expected an integer in \\[1, 63\\], got '64'" \
    "$SCAFFOLD" store-bench --repeats 64
t_expect_fail "malformed DDSTORE_ALLTOALL_MAX_BYTES" 2 "DDSTORE_ALLTOALL_MAX_BYTES" \
    env DDSTORE_ALLTOALL_MAX_BYTES=lots "$SCAFFOLD" store-bench --method coll "${tiny[@]}"
t_expect_fail "DDSTORE_MAX_READ_BYTES above 2^31-1" 2 "DDSTORE_MAX_READ_BYTES" \
    env DDSTORE_MAX_READ_BYTES=4294967296 "$SCAFFOLD" store-bench --method rma "${tiny[@]}"
# The buffer that cannot fit is named with its fix (the batch buffer: --row-bytes 4g x --batch 128
# = 512 GiB; it used to blame "1 rows of 4294967296 bytes"), before anything runs, and every
# error is said once for all ranks (an argument error was printed by every rank).
out=$(timeout 60 $MPIRUN -n 2 "$SCAFFOLD" store-bench --row-bytes 4g 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(grep -c 'scaffold store-bench:' <<<"$out")" -eq 1 ] &&
    grep -q "^scaffold store-bench: the batch buffer needs 512 GiB (the largest --batch 128 x --threads 1 rows of --row-bytes 4294967296), more than this node's .*: lower --batch or --row-bytes" <<<"$out" &&
    t_ok "--row-bytes 4g: the batch buffer named, once for 2 ranks" || t_fail "--row-bytes 4g" "rc=$rc: $out"
out=$(timeout 60 $MPIRUN -n 3 "$SCAFFOLD" store-bench --nget 0 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(grep -c 'scaffold store-bench:' <<<"$out")" -eq 1 ] &&
    t_ok "an argument error is said once for 3 ranks" || t_fail "argument error once" "rc=$rc: $out"
d=$(t_tmpdir)
t_expect_fail "CSV in a missing directory" 1 "cannot write $d/no/r.csv" \
    "$SCAFFOLD" store-bench "${tiny[@]}" --csv "$d/no/r.csv"

# A small real run: both methods, 2 reader threads, a 4096-byte read limit (split Gets),
# profiling on, rows checked inside; then the CSV: (memcpy baseline + 2 methods) x 2 batches per row size.
out=$(DDSTORE_MAX_READ_BYTES=4096 timeout 120 $MPIRUN -n 2 "$SCAFFOLD" store-bench --row-bytes 3136,100000 \
    --batch 1,32 --nget 256 --repeats 2 --threads 2 --profile --csv "$d/r.csv" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q '^summary rma: get_batch(32)' <<<"$out" && grep -q '^summary coll:' <<<"$out"; then
    t_ok "store-bench at 2 ranks (both methods, threads, split reads)"
else
    t_fail "store-bench at 2 ranks" "exit $rc: $out"
fi
t_check "store-bench CSV has every configuration" "$PYTHON" - "$d/r.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 12, len(rows)  # 2 row sizes x (memcpy, rma, coll) x 2 batches
for r in rows:
    assert r["ranks"] == "2" and float(r["us_per_row"]) > 0 and float(r["mb_per_s_rank"]) > 0, r
    if r["method"] != "memcpy":
        assert float(r["fraction_of_memcpy"]) > 0 and float(r["speedup_vs_get"]) > 0, r
        # --profile: the store's own time split per row. coll runs one call at a time, so its
        # parts add up to the measured time; rma's reader threads overlap, so their parts can
        # only be at most the measured time summed over the threads.
        parts = sum(float(r[k]) for k in ("post_us_per_row", "wait_us_per_row", "copy_us_per_row"))
        us = float(r["us_per_row"])
        if r["method"] == "coll":
            assert abs(parts - us) <= 0.1 * us, ("coll parts do not add up", parts, us, r)
        else:
            assert 0 < parts <= 1.1 * us * int(r["threads"]), ("rma parts exceed the time", parts, us, r)
    else:
        assert r["post_us_per_row"] == "", r
assert {(r["method"], r["batch"]) for r in rows} >= {("rma", "1"), ("rma", "32"), ("coll", "1"), ("coll", "32")}
assert all(r["threads"] == "2" for r in rows if r["method"] == "rma")
PY
rm -rf "$d"

# Sanitizer builds, when present and not already the build under test.
A=build-address-undefined/tests/store/test_store
if [ -x "$A" ] && [ "$A" != "$T" ]; then
    for m in rma coll; do t_cbin timeout 300 $MPIRUN -n 2 "$A" "$m"; done
fi
if [ -x "$A" ]; then
    # Leaks whose allocation site (first frame after the allocator) is in our code. The exit
    # status is the leak report's (Open MPI's own init-time leaks), so the run is judged by its
    # summary line: every check passed and nothing else (a sanitizer error) ended it early.
    out=$(ASAN_OPTIONS=detect_leaks=1 timeout 300 "$A" rma 2>&1)
    ours=$(awk '/^(Direct|Indirect) leak/{f=1; next} f && /#1 /{print; f=0}' <<<"$out" | grep -E 'src/store/|tests/store/')
    if ! grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$out"; then
        t_fail "store under ASan with leak detection" "no clean summary: $(tail -n 5 <<<"$out")"
    elif [ -z "$ours" ]; then t_ok "no leaks from the store (ASan, 1 rank)"; else t_fail "store leaks" "$ours"; fi
fi
TS=build-thread/tests/store/test_store
if [ -x "$TS" ]; then
    # 4 reader threads per rank next to main-thread all-reduces, under TSan.
    t_cbin timeout 300 $MPIRUN -n 2 "$TS" rma
fi
t_report
