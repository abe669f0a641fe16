#!/usr/bin/env bash
# Tracer tests: runs small C programs (prog_io.c), Python/numpy, `true` and `ls` under
# libscaffold_trace.so and checks the traces with check.py (events, args, FH mapping and file-system
# types, byte counts, summaries, threads, fork, exec, SIGTERM, SIGKILL, escaping), the fast
# encoder and the clock choices, a 4 x 1M-event stress run (all events after a normal exit and
# after a later SIGKILL; whole gzip members when killed mid-storm), errno preservation, the
# disable switches, the `scaffold trace` command, the 1.x shape on request, dftracer-utils from the
# test venv (validate, event counts, dftracer_stats per category and pid against the analyzer), the
# zlib fallback build, and an ASan/UBSan build of the library on the core scenarios.
cd "$(dirname "$0")/../.." && source tests/lib.sh
LIB=$PWD/$BUILD/libscaffold_trace.so
PROG=$PWD/$BUILD/tests/trace/prog_io
CHECK="$PYTHON tests/trace/check.py"
T=$(t_tmpdir)
trap 'rm -rf "$T"' EXIT

if [ ! -f "$LIB" ] || [ ! -x "$PROG" ]; then
    t_fail "tracer build" "missing $LIB or $PROG (run make)"
    t_report
    exit 1
fi

# traced NAME MODE [ARGS...]: runs prog_io MODE in $T/NAME/d with traces in $T/NAME/out.
# Extra environment comes from $TENV. Sets RC and OUT (stdout).
traced() {
    local name=$1 mode=$2
    shift 2
    mkdir -p "$T/$name/d" "$T/$name/out"
    OUT=$(env $TENV SCAFFOLD_TRACE_PREFIX="$T/$name/out/trace" LD_PRELOAD="${PRELOAD:-$LIB}" \
        "$PROG" "$mode" "$T/$name/d" "$@" 2>"$T/$name/stderr")
    RC=$?
}

# check_sc TEST SCENARIO NAME [ARGS...]
check_sc() {
    local test=$1 sc=$2 name=$3
    shift 3
    if [ "$RC" -ne 0 ]; then
        t_fail "$test" "exit $RC: $(head -c 400 "$T/$name/stderr")"
        return
    fi
    local out
    if out=$($CHECK "$sc" "$T/$name/out" "$T/$name/d" "$@" 2>&1); then
        t_ok "$test"
    else
        echo "$out" | head -20
        t_fail "$test"
    fi
}

TENV=""
traced basic basic
check_sc "basic POSIX/STDIO events, args, FH, summary, errno" basic basic

traced threads threads 4 200
check_sc "4 threads: per-thread tids, offsets and region nesting" threads threads 4 200

traced fork fork
child=$(echo "$OUT" | sed -n 's/^child //p')
check_sc "fork + _exit: child writes its own file, no repeats" fork fork "${child:-0}"
traced forkexit fork-exit
child=$(echo "$OUT" | sed -n 's/^child //p')
check_sc "fork + exit: child writes its own file" fork forkexit "${child:-0}"

traced exec exec
check_sc "exec: flushed before exec, resumed after a failed exec" exec exec

traced annot annot
check_sc "annotations: regions, nesting, int/str args, metadata" annot annot

traced escape escape
check_sc "JSON escaping of odd file names" escape escape

TENV="SCAFFOLD_TRACE_BUFFER_MIB=1 SCAFFOLD_TRACE_FLUSH_MIB=1"
traced loop loop 200000
check_sc "200k events through a 1 MiB ring (wrap, back-pressure, several members)" loop loop 200000
TENV=""

# The fast line encoder the flusher switches to when it falls behind (forced here).
TENV="SCAFFOLD_TRACE_ADAPT=2"
traced fbasic basic
check_sc "fast encoder: basic scenario decodes to the same events" basic fbasic
traced fthreads threads 4 200
check_sc "fast encoder: threads" threads fthreads 4 200
TENV="SCAFFOLD_TRACE_ADAPT=2 SCAFFOLD_TRACE_BUFFER_MIB=1 SCAFFOLD_TRACE_FLUSH_MIB=1"
traced floop loop 200000
check_sc "fast encoder: 200k events, several members" loop floop 200000
TENV="SCAFFOLD_TRACE_CLOCK=monotonic"
traced mthreads threads 4 200
check_sc "clock_gettime clock (SCAFFOLD_TRACE_CLOCK=monotonic)" threads mthreads 4 200
TENV=""
t_check "start event names the clock (tsc or monotonic)" \
    bash -c "zcat '$T'/basic/out/*.gz | grep -qE '\"clock\":\"(tsc|monotonic)\"' && zcat '$T'/mthreads/out/*.gz | grep -q '\"clock\":\"monotonic\"'"
t_check "FH lines name each path's file-system type" $CHECK fs "$T/basic/out" "$T/basic/d"

# Stress: 4 threads x 1M back-to-back 1-byte preads. After a normal exit every event is there
# (counted in the trace text and by the analyzer per file); the file is valid gzip throughout.
SN=${SCAFFOLD_TRACE_STRESS_N:-1000000}
stress_count() { # DIR -> number of pread events
    zcat "$1"/*.pfw.gz | grep -c '"name":"pread"'
}
traced stress stress 4 "$SN"
if [ "$RC" -ne 0 ]; then
    t_fail "stress: 4 threads x $SN preads" "exit $RC: $(head -c 300 "$T/stress/stderr")"
else
    n=$(stress_count "$T/stress/out")
    end=$(zcat "$T"/stress/out/*.pfw.gz | grep '"name":"end"')
    if gzip -t "$T"/stress/out/*.pfw.gz && [ "$n" -eq $((4 * SN)) ] && grep -q '"dropped":0' <<<"$end"; then
        t_ok "stress: 4 threads x $SN preads, all $n events after a normal exit, none dropped"
    else
        t_fail "stress: 4 threads x $SN preads" "$n preads; end: $end"
    fi
    "$SCAFFOLD" analyze --json --top 10 "$T/stress/out" >"$T/stress.json" 2>/dev/null
    t_check "stress: the analyzer counts $SN bytes read on each thread's file" "$PYTHON" -c "
import json,sys
r=json.load(open(sys.argv[1])); f=[x for x in r['files'] if '/s' in x['path'] and x['path'].endswith('.bin')]
sys.exit(0 if len(f)==4 and all(x['bytes_read']==$SN for x in f) else 1)" "$T/stress.json"
fi

# SIGKILL during a storm, with a flush every 20 ms: whatever is on disk is whole gzip members
# (each member is compressed in memory and written with one write()), readable by gzip and zcat.
for k in 1 2 3; do
    name=kill$k
    mkdir -p "$T/$name/d" "$T/$name/out"
    SCAFFOLD_TRACE_FLUSH_MS=20 SCAFFOLD_TRACE_PREFIX="$T/$name/out/trace" LD_PRELOAD="$LIB" \
        "$PROG" stress "$T/$name/d" 2 100000000 2>/dev/null &
    pid=$!
    sleep "0.$((3 * k))"
    kill -KILL "$pid"
    { wait "$pid"; } 2>/dev/null
    last=$(zcat "$T/$name"/out/*.pfw.gz 2>/dev/null | tail -n 1)
    if gzip -t "$T/$name"/out/*.pfw.gz 2>"$T/$name.gz.err" &&
        "$PYTHON" -c "import json,sys; json.loads(sys.argv[1])" "$last" 2>/dev/null &&
        [ "$(stress_count "$T/$name/out")" -gt 0 ]; then
        t_ok "SIGKILL during a storm ($k): gzip -t passes, the last line is whole"
    elif grep -q "unexpected end of file" "$T/$name.gz.err" &&
        [ "$(grep -c . "$T/$name.gz.err")" -eq 1 ] &&
        "$SCAFFOLD" analyze "$T/$name"/out/*.pfw.gz >"$T/$name.an" 2>&1 &&
        grep -q "gzip stream truncated inside member [0-9]*; kept every complete line" "$T/$name.an" &&
        [ "$(stress_count "$T/$name/out")" -gt 0 ]; then
        # The kernel may cut the one write() of the member being written when SIGKILL lands
        # during its copy (a page boundary): only the last member is cut, and the analyzer
        # keeps every complete line before it, saying so.
        t_ok "SIGKILL during a storm ($k): the kill cut the last member's write; earlier members whole, the analyzer keeps every complete line"
    else
        t_fail "SIGKILL during a storm ($k)" "$(head -c 200 "$T/$name.gz.err") last: ${last:0:120} $(head -c 300 "$T/$name.an" 2>/dev/null)"
    fi
done

# Bounded loss after SIGKILL: the storm ends, the process waits; killed three flush intervals
# later, every one of the 4 x SN events is on disk. (The bound is one flush interval plus the
# time to drain what the rings still hold; 1 MiB rings keep that short on a busy machine.)
mkdir -p "$T/killwait/d" "$T/killwait/out"
SCAFFOLD_TRACE_BUFFER_MIB=1 SCAFFOLD_TRACE_FLUSH_MS=200 SCAFFOLD_TRACE_PREFIX="$T/killwait/out/trace" LD_PRELOAD="$LIB" \
    "$PROG" stress "$T/killwait/d" 4 "$SN" wait 2>/dev/null &
pid=$!
for _ in $(seq 600); do
    [ -e "$T/killwait/d/ready" ] && break
    sleep 0.05
done
sleep 0.6
kill -KILL "$pid"
{ wait "$pid"; } 2>/dev/null
n=$(stress_count "$T/killwait/out")
if gzip -t "$T"/killwait/out/*.pfw.gz && [ "$n" -eq $((4 * SN)) ]; then
    t_ok "SIGKILL after a 4 x $SN storm: all $n events older than the flush interval survive"
else
    t_fail "SIGKILL after a storm" "$n of $((4 * SN)) preads"
fi

# Signals: the process sleeps after its writes; flush every 200 ms.
signal_run() { # NAME SIG
    local name=$1 sig=$2
    mkdir -p "$T/$name/d" "$T/$name/out"
    SCAFFOLD_TRACE_FLUSH_MS=200 SCAFFOLD_TRACE_PREFIX="$T/$name/out/trace" LD_PRELOAD="$LIB" \
        "$PROG" sleep "$T/$name/d" 50 2>"$T/$name/stderr" &
    local pid=$!
    for _ in $(seq 100); do
        [ -e "$T/$name/d/ready" ] && break
        sleep 0.05
    done
    sleep 0.6 # three flush intervals: the writes must be on disk by now
    kill "-$sig" "$pid"
    { wait "$pid"; } 2>/dev/null # (no "Killed" job message)
    RC=$?
}
signal_run sigterm TERM
if [ "$RC" -eq 143 ]; then RC=0; else echo "sigterm exit $RC"; fi
check_sc "SIGTERM: final flush, then dies of the signal (status 143)" sigterm sigterm 50
signal_run sigkill KILL
if [ "$RC" -eq 137 ]; then RC=0; else echo "sigkill exit $RC"; fi
check_sc "SIGKILL: events older than the flush interval survive" sigkill sigkill 50

# Python + numpy: only the data file is traced, never Python's own library.
mkdir -p "$T/numpy/d" "$T/numpy/out"
"$PYTHON" -c "import numpy as np; np.save('$T/numpy/d/x.npy', np.arange(1000, dtype=np.float32))"
size=$(stat -c %s "$T/numpy/d/x.npy")
SCAFFOLD_TRACE_PREFIX="$T/numpy/out/trace" LD_PRELOAD="$LIB" "$PYTHON" -c \
    "import numpy; a = numpy.load('$T/numpy/d/x.npy'); assert a.sum() == 499500" 2>"$T/numpy/stderr"
RC=$?
check_sc "python3 numpy.load: bytes read match the file, stdlib excluded" numpy numpy "$size"

# A real client: a PyTorch DataLoader with 2 worker processes reads small .npy samples with numpy
# (Debian's torch), traced; the analyzer must find the small-read pattern on those files.
if "$PYTHON" -c "import torch, numpy" 2>/dev/null; then
    mkdir -p "$T/torch/out"
    "$PYTHON" tests/trace/torch_loader.py write "$T/torch/data" 400
    size=$(stat -c %s "$T/torch/data/sample_00000.npy")
    out=$(SCAFFOLD_TRACE_PREFIX="$T/torch/out/trace" LD_PRELOAD="$LIB" "$PYTHON" \
        tests/trace/torch_loader.py train "$T/torch/data" 400 2>"$T/torch/stderr")
    if [ "$out" != "done 800" ]; then
        t_fail "PyTorch DataLoader under the tracer" "$out $(head -c 300 "$T/torch/stderr")"
    else
        t_ok "PyTorch DataLoader (2 workers) runs unchanged under the tracer"
        "$SCAFFOLD" analyze --json --top 1000 "$T/torch/out" >"$T/torch.json" 2>/dev/null
        t_check "PyTorch DataLoader: the analyzer finds the small reads of the .npy samples" \
            "$PYTHON" - "$T/torch.json" "$size" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); size = int(sys.argv[2])
small = [f for f in r["findings"] if f["category"] == "small-io" and f["severity"] != "info"]
named = [e for f in small for e in f["entities"] if "sample_" in e and ".npy" in e]
files = [f for f in r["files"] if "/sample_" in f["path"]]
got = sum(f["bytes_read"] for f in files)
procs = [p for p in r["processes"] if p["bytes_read"] > 0]
# Every sample is read in each of the 2 epochs; numpy reads the header through Python's buffered
# read (4 KiB) and the data through fdopen + fread, so a byte may be counted at both layers.
ok = small and named and len(files) == 400 and 2 * 400 * size <= got <= 2 * 2 * 400 * size and len(procs) >= 2
if not ok:
    print([f["id"] for f in small], named[:2], len(files), got, 2 * 400 * size, len(procs))
sys.exit(0 if ok else 1)
EOF
    fi
else
    t_fail "PyTorch DataLoader test" "Debian's python3-torch is missing (tools/packages.d/analyze.txt)"
fi

# true and ls: same output, nothing on stderr.
clean() { # NAME CMD...
    local name=$1
    shift
    local want got err
    want=$("$@" 2>&1)
    got=$(SCAFFOLD_TRACE_PREFIX="$T/clean/trace" LD_PRELOAD="$LIB" "$@" 2>"$T/clean.err")
    err=$(cat "$T/clean.err")
    if [ "$got" == "$want" ] && [ -z "$err" ]; then t_ok "$name"; else
        t_fail "$name" "output differs or stderr: $err"; fi
}
mkdir -p "$T/clean"
TRUE=$(type -P true) # the program, not the shell builtin
clean "true runs clean" "$TRUE"
clean "ls runs clean" ls -a "$T/basic/d"
clean "ls -R / of a small tree runs clean" ls -R "$T/basic"

# Switches: disabled means no file at all.
mkdir -p "$T/off/d"
SCAFFOLD_TRACE_DISABLE=1 SCAFFOLD_TRACE_PREFIX="$T/off/trace" LD_PRELOAD="$LIB" "$PROG" basic "$T/off/d" >/dev/null
t_check "SCAFFOLD_TRACE_DISABLE=1 writes nothing" test -z "$(ls "$T/off" | grep pfw)"
DFTRACER_ENABLE=0 SCAFFOLD_TRACE_PREFIX="$T/off/trace" LD_PRELOAD="$LIB" "$PROG" basic "$T/off/d" >/dev/null
t_check "DFTRACER_ENABLE=0 writes nothing" test -z "$(ls "$T/off" | grep pfw)"
out=$("$PROG" annot "$T/off/d" 2>&1)
t_check "annotations without the library: no-op" test "$out" == "active 0"
out=$(SCAFFOLD_TRACE_FLUSH_MS=abc SCAFFOLD_TRACE_PREFIX="$T/off/bad" LD_PRELOAD="$LIB" "$TRUE" 2>&1)
t_check "bad SCAFFOLD_TRACE_FLUSH_MS: one warning naming it" grep -q "SCAFFOLD_TRACE_FLUSH_MS='abc'" <<<"$out"
out=$(SCAFFOLD_TRACE_PREFIX="/proc/nonexistent/x" LD_PRELOAD="$LIB" "$PROG" basic "$T/off/d" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "cannot create trace file" <<<"$out"; then t_ok "unwritable prefix: warning, program unaffected"; else
    t_fail "unwritable prefix" "rc $rc: $out"; fi

# Filtering through `scaffold trace`: include a directory, exclude one file in it.
mkdir -p "$T/cli/d"
"$SCAFFOLD" trace --out "$T/cli/out" --data-dirs "$T/cli/d" --exclude "$T/cli/d/text.txt" \
    -- "$PROG" basic "$T/cli/d" >/dev/null 2>"$T/cli/stderr"
RC=$?
if [ $RC -eq 0 ] && grep -q "scaffold trace: 1 trace file" "$T/cli/stderr" &&
    "$PYTHON" - "$T/cli/out" "$T/cli/d" <<'EOF'; then t_ok "scaffold trace --data-dirs/--exclude"; else t_fail "scaffold trace --data-dirs/--exclude" "$(cat "$T/cli/stderr")"; fi
import sys, os
sys.path.insert(0, "tests/trace")
import check
files = check.load_dir(sys.argv[1])
f = files[0]
used = {e["args"]["fhash"] for e in f["events"] if "fhash" in e["args"] and e["cat"] in ("POSIX", "STDIO")}
paths = [f["fh"][h] for h in used]
assert paths and all(p.startswith(sys.argv[2]) for p in paths), paths
assert not any(p.endswith("/text.txt") for p in paths), paths
assert any(p.endswith("/data.bin") for p in paths), paths
assert not check.FAILS
EOF
t_expect_fail "scaffold trace without a command" 2 "no command" "$SCAFFOLD" trace --out "$T/cli/o2"
t_expect_fail "scaffold trace --flush-ms bad" 2 "flush-ms" "$SCAFFOLD" trace --flush-ms 0 -- true
t_expect_fail "scaffold trace --lib missing" 2 "not readable" "$SCAFFOLD" trace --lib /nonexistent.so -- true
t_expect_fail "scaffold trace of a missing program" 127 "cannot run" "$SCAFFOLD" trace --out "$T/cli/o3" -- /nonexistent-prog
out=$(SCAFFOLD_TRACE_PREFIX="$T/cli/o4/trace" "$SCAFFOLD" trace --out "$T/cli/o4" -- sh -c 'exit 7' 2>&1)
t_check "scaffold trace passes the exit status through" test $? -eq 7
# Processes that outlive the command (an MPI singleton's daemon) are waited for, so their trace
# files are complete when `scaffold trace` returns; --wait 0 does not wait and says so.
mkdir -p "$T/cli/o5"
out=$("$SCAFFOLD" trace --out "$T/cli/o5" -- sh -c "(sleep 1; echo x > '$T/cli/o5/late') &" 2>&1)
if [ -f "$T/cli/o5/late" ] && zcat "$T/cli/o5"/trace-*.pfw.gz | grep -q "o5/late"; then
    t_ok "scaffold trace waits for orphaned descendants and their traces"
else t_fail "scaffold trace waits for orphans" "$out"; fi
t_expect_fail "scaffold trace --wait 0 reports what still runs" 0 "still run after 0 s" \
    "$SCAFFOLD" trace --out "$T/cli/o6" --wait 0 -- sh -c "sleep 2 &"
t_expect_fail "scaffold trace --wait bad" 2 "wait" "$SCAFFOLD" trace --wait -1 -- true

# The 1.x shape on request (SCAFFOLD_TRACE_FORMAT=1): "[" first, "ph":"X"/"M", "]" last.
TENV="SCAFFOLD_TRACE_FORMAT=1"
traced basic1 basic
TRACE_SHAPE=1 check_sc "SCAFFOLD_TRACE_FORMAT=1: the 1.x shape, same events" basic basic1
TENV=""
out=$(SCAFFOLD_TRACE_FORMAT=3 SCAFFOLD_TRACE_PREFIX="$T/off/f3" LD_PRELOAD="$LIB" "$TRUE" 2>&1)
t_check "bad SCAFFOLD_TRACE_FORMAT: one warning naming it" grep -q "SCAFFOLD_TRACE_FORMAT='3'" <<<"$out"

# dftracer-utils 0.0.14 from the pinned test venv reads both shapes: dftracer_validate passes,
# dftracer_event_count counts every record, and dftracer_stats' records per category and per
# pid equal scaffold analyze's.
VPY=$(t_venv_python)
VB=${VPY:+$(dirname "$VPY")}
if [ -n "$VB" ] && [ -x "$VB/dftracer_validate" ] && [ -x "$VB/dftracer_stats" ]; then
    for d in basic basic1 threads annot; do
        mkdir -p "$T/dfu-$d" && cp "$T/$d"/out/*.pfw.gz "$T/dfu-$d/"
        v=$("$VB/dftracer_validate" -d "$T/dfu-$d" 2>&1)
        n=$("$VB/dftracer_event_count" -d "$T/dfu-$d" --index-dir "$T/idx-$d" 2>/dev/null | tail -n 1)
        want=$(TRACE_SHAPE=$([ $d = basic1 ] && echo 1 || echo 2) "$PYTHON" -c "
import sys; sys.path.insert(0, 'tests/trace'); import check
fs = check.load_dir('$T/$d/out')
print(sum(len(f['events']) + len(f['counters']) for f in fs))" 2>/dev/null)
        if grep -q " 0 failed" <<<"$v" && [ -n "$n" ] && [ "$n" == "$want" ]; then
            t_ok "dftracer-utils ($d, $( [ $d = basic1 ] && echo 1.x || echo 2.x) shape): validates, counts $n records"
        else
            t_fail "dftracer-utils ($d)" "validate: $(tail -1 <<<"$v"); count $n want $want"
        fi
        t_check "dftracer_stats agrees with scaffold analyze per category and pid ($d)" \
            "$PYTHON" tests/trace/stats_cmp.py "$VB/dftracer_stats" "$SCAFFOLD" "$T/sidx-$d" "$T/dfu-$d"/*.pfw.gz
    done
else
    echo "SKIP dftracer-utils reader: the test venv is missing (bash tools/setup.sh --test)"
fi

# System metrics (SCAFFOLD_TRACE_METRICS_MS): counter lines ("proc": CPU time, RSS, I/O bytes,
# context switches, run-queue delay; "node": load, memory) every interval and at exit; the
# analyzer tells a busy loop (CPU-bound) from a sleeper (waiting).
mkdir -p "$T/metrics/out"
for m in busy idle; do
    SCAFFOLD_TRACE_METRICS_MS=50 SCAFFOLD_TRACE_PREFIX="$T/metrics/out/trace" LD_PRELOAD="$LIB" "$PYTHON" -c "
import sys, time
open('$T/metrics/' + sys.argv[1], 'w').write('x')
t = time.time()
while time.time() - t < 1.0:
    if sys.argv[1] == 'idle':
        time.sleep(0.05)" "$m" &
done
wait
t_check "metrics: counter lines in every file, valid (check.py), >= 10 samples each" "$PYTHON" -c "
import sys; sys.path.insert(0, 'tests/trace'); import check
fs = check.load_dir('$T/metrics/out')
ok = len(fs) == 2 and all(sum(c['name'] == 'proc' for c in f['counters']) >= 10 and any(c['name'] == 'node' and 'load1_milli' in c['args'] for c in f['counters']) for f in fs)
sys.exit(0 if ok and not check.FAILS else 1)"
"$SCAFFOLD" analyze --json "$T/metrics/out" >"$T/metrics.json" 2>/dev/null
t_check "metrics: the busy process is CPU-bound, the sleeper waiting" "$PYTHON" -c "
import json, sys
r = json.load(open(sys.argv[1]))
c = sorted(p['cpu_class'] for p in r['processes'])
print(c, [(p['cpu_util'], p['cpu_want']) for p in r['processes']]) if c != ['cpu-bound', 'waiting'] else None
sys.exit(0 if c == ['cpu-bound', 'waiting'] and any(f['id'] == 'sys.cpu_vs_wait' for f in r['findings']) else 1)" "$T/metrics.json"
out=$(SCAFFOLD_TRACE_METRICS_MS=3 SCAFFOLD_TRACE_PREFIX="$T/off/m3" LD_PRELOAD="$LIB" "$TRUE" 2>&1)
t_check "bad SCAFFOLD_TRACE_METRICS_MS: one warning naming it" grep -q "SCAFFOLD_TRACE_METRICS_MS='3'" <<<"$out"

# MPI calls through the MPI sibling (Open MPI, or MPICH with make MPI=mpich).
source tests/trace/mpi.sh

# The zlib fallback build (no libdeflate): same scenarios, same checks.
if gcc -std=c11 -D_GNU_SOURCE -O2 -fPIC -fvisibility=hidden -shared -Isrc -Iinclude src/trace/*.c \
    -o "$T/libtrace_zlib.so" -ldl -lpthread -lz 2>"$T/zlib_build.err"; then
    PRELOAD="$T/libtrace_zlib.so"
    traced zbasic basic
    check_sc "zlib fallback build: basic" basic zbasic
    TENV="SCAFFOLD_TRACE_BUFFER_MIB=1 SCAFFOLD_TRACE_FLUSH_MIB=1"
    traced zloop loop 200000
    check_sc "zlib fallback build: 200k events, several members" loop zloop 200000
    TENV=""
    unset PRELOAD
else
    t_fail "zlib fallback build of the tracer" "$(head -c 300 "$T/zlib_build.err")"
fi

# ASan/UBSan build of the library on the core scenarios (built here: one gcc call), with the
# compressor of the default build.
ASAN_RT=$(gcc -print-file-name=libasan.so)
deflate=$([ -f /usr/include/libdeflate.h ] && echo "-DTRC_HAVE_LIBDEFLATE -ldeflate" || echo "-lz")
if [ -f "$ASAN_RT" ] && gcc -std=c11 -D_GNU_SOURCE -O1 -g -fPIC -fvisibility=hidden -shared \
    -fsanitize=address,undefined -fno-omit-frame-pointer -Isrc -Iinclude src/trace/*.c \
    -o "$T/libtrace_asan.so" -ldl -lpthread $deflate 2>"$T/asan_build.err"; then
    export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    PRELOAD="$ASAN_RT:$T/libtrace_asan.so"
    traced abasic basic
    check_sc "ASan/UBSan: basic" basic abasic
    traced athreads threads 4 200
    check_sc "ASan/UBSan: threads" threads athreads 4 200
    traced afork fork
    child=$(echo "$OUT" | sed -n 's/^child //p')
    check_sc "ASan/UBSan: fork" fork afork "${child:-0}"
    traced aannot annot
    check_sc "ASan/UBSan: annotations" annot aannot
    TENV="SCAFFOLD_TRACE_ADAPT=2 SCAFFOLD_TRACE_BUFFER_MIB=1 SCAFFOLD_TRACE_FLUSH_MIB=1"
    traced aloop loop 50000
    check_sc "ASan/UBSan: fast encoder, ring wrap" loop aloop 50000
    TENV=""
    unset PRELOAD ASAN_OPTIONS UBSAN_OPTIONS
else
    echo "skip ASan build of the tracer: $(head -c 300 "$T/asan_build.err" 2>/dev/null)"
fi

t_report
