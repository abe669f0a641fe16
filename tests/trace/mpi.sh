# MPI tracing (sourced by tests/trace/run.sh, which provides tests/lib.sh, $T, $LIB, $MPIRUN and
# $SCAFFOLD): the MPI sibling libscaffold_trace_mpi.so of this build's MPI (Open MPI by default,
# MPICH with make MPI=mpich), preloaded by `scaffold trace`, on 4 ranks of tests/trace/mpi_calls:
# every call with its bytes and communicator, the linked-cause finding of a rank-0 checkpoint
# before barriers, the short-phase guard, the switches, and `scaffold benchmark` on 2 ranks.
MPILIB=$PWD/$BUILD/libscaffold_trace_mpi.so
MPIPROG=$PWD/$BUILD/tests/trace/mpi_calls
if [ ! -f "$MPILIB" ] || [ ! -x "$MPIPROG" ]; then
    t_fail "MPI tracer build" "missing $MPILIB or $MPIPROG (run make)"
    return 0 2>/dev/null || exit 1
fi
t_check "libscaffold_trace_mpi.so does not link libmpi" \
    bash -c "! readelf -d '$MPILIB' | grep -qE 'NEEDED.*lib(mpi|mpich)'"

# Open MPI's one-sided windows need the pt2pt osc component here (as in tests/store/run.sh:
# without a single-copy mechanism in containers, osc rdma refuses MPI_Win_create); MPICH ignores it.
export OMPI_MCA_osc=pt2pt

mpi_json() { # DIR -> DIR.json (scaffold analyze --json)
    "$SCAFFOLD" analyze --json --top 50 "$1" >"$1.json" 2>"$1.err"
}
jcheck() { # NAME FILE PYTHON-EXPR (r = the JSON)
    t_check "$1" "$PYTHON" -c "
import json, sys
r = json.load(open(sys.argv[1]))
ok = $3
if not ok:
    print('findings:', [(f['id'], f['severity']) for f in r['findings']], 'mpi:', {k: v for k, v in r['mpi'].items() if k != 'calls'})
sys.exit(0 if ok else 1)" "$2"
}

# Every call, on 4 ranks.
M=$T/mpi
mkdir -p "$M/d"
out=$("$SCAFFOLD" trace --out "$M/calls" -- $MPIRUN -n 4 "$MPIPROG" calls "$M/d" 2>"$M/calls.err")
rc=$?
if [ $rc -eq 0 ] && [ "$out" == "calls ok" ] && grep -q "libscaffold_trace_mpi.so\|trace files" "$M/calls.err"; then
    t_ok "4 ranks under scaffold trace with the MPI sibling: the program runs unchanged"
    t_check "every MPI call on every rank: bytes, count, root/peer, comm size and id, waits, MPI-IO" \
        "$PYTHON" tests/trace/check_mpi.py "$M/calls" "$M/d"
    mpi_json "$M/calls"
    jcheck "analyze: MPI time per call and rank, collectives matched, the launcher not a rank" "$M/calls.json" \
        "r['mpi']['present'] and r['mpi']['complete_instances'] == 18 and any(c['name']=='MPI_Alltoall' and c['calls']==4 and c['bytes']==4*128 for c in r['mpi']['calls']) and sorted(p['rank'] for p in r['processes'] if p['mpi_calls'])==[0,1,2,3] and all(p['rank']==-1 for p in r['processes'] if p['launcher']) and any(p['launcher'] for p in r['processes'])"
    VPY=$(t_venv_python)
    if [ -n "$VPY" ] && [ -x "$(dirname "$VPY")/dftracer_stats" ]; then
        t_check "dftracer_stats agrees with scaffold analyze on the MPI traces (cat mpi, mpiio)" \
            "$PYTHON" tests/trace/stats_cmp.py "$(dirname "$VPY")/dftracer_stats" "$SCAFFOLD" "$M/sidx" "$M/calls"/*.pfw.gz
    fi
else
    t_fail "4 ranks under scaffold trace with the MPI sibling" "rc $rc, out '$out': $(tail -5 "$M/calls.err")"
fi

# The fast line encoder (what a flusher falling behind uses) on MPI lines: same events.
SCAFFOLD_TRACE_ADAPT=2 "$SCAFFOLD" trace --out "$M/fast" -- $MPIRUN -n 4 "$MPIPROG" calls "$M/d" >/dev/null 2>&1
t_check "fast encoder: the MPI lines decode to the same calls" \
    "$PYTHON" tests/trace/check_mpi.py "$M/fast" "$M/d"

# Rank 0 writes its checkpoint (a write that sleeps ~0.36 s) before every barrier: the waits of
# ranks 1-3 and rank 0's checkpoint writes are one phenomenon. 16 barriers (~6 s) are ranked;
# 3 (~1.5 s) trip the short-phase guard: the same facts, not ranked, nothing proposed.
for n in 16 3; do
    "$SCAFFOLD" trace --out "$M/stall$n" -- $MPIRUN -n 4 "$MPIPROG" stall "$M/d" "$n" >"$M/stall$n.out" 2>&1 ||
        t_fail "stall run ($n barriers)" "$(tail -3 "$M/stall$n.out")"
    mpi_json "$M/stall$n"
done
jcheck "a checkpoint on rank 0 before each barrier: one linked finding naming rank 0's checkpoint writes" "$M/stall16.json" \
    "any(f['id']=='mpi.collective_wait_linked' and f['severity'] not in ('info','unranked') and f['category']=='checkpoint' and 'rank 0' in f['message'] and any('checkpoint.fifo' in e for e in f['entities']) for f in r['findings']) and r['mpi']['linked_cause']['rank']==0 and r['mpi']['linked_cause']['activity']=='checkpoint writes' and r['mpi']['linked_cause']['collective']=='MPI_Barrier' and r['mpi']['linked_cause']['instances']>=14 and not any(f['id']=='run.short_phase' for f in r['findings'])"
jcheck "a ~1.5 s run: bottlenecks not ranked (run.short_phase), no proposal" "$M/stall3.json" \
    "any(f['id']=='run.short_phase' and f['severity']=='guard' for f in r['findings']) and all(f['severity'] in ('guard','unranked','info') for f in r['findings']) and any(f['id']=='mpi.collective_wait_linked' for f in r['findings']) and not r['proposals'] and all('not ranked' in c['reason'] for c in r['checklist'] if c['verdict']=='not applicable')"

# Switches: SCAFFOLD_TRACE_MPI=0 records no MPI call; --no-mpi does not preload the sibling; the
# sibling preloaded without the tracer only passes the calls through.
SCAFFOLD_TRACE_MPI=0 "$SCAFFOLD" trace --out "$M/off" -- $MPIRUN -n 2 "$MPIPROG" loop 10 >/dev/null 2>&1
t_check "SCAFFOLD_TRACE_MPI=0: no MPI event" bash -c "! zcat '$M'/off/*.pfw.gz | grep -q '\"cat\":\"MPI\"'"
"$SCAFFOLD" trace --no-mpi --out "$M/nompi" -- $MPIRUN -n 2 "$MPIPROG" loop 10 >/dev/null 2>&1
t_check "scaffold trace --no-mpi: no MPI event" bash -c "! zcat '$M'/nompi/*.pfw.gz | grep -q '\"cat\":\"MPI\"'"
out=$(LD_PRELOAD="$MPILIB" $MPIRUN -n 4 "$MPIPROG" calls "$M/d" 2>&1)
t_check "the sibling alone (no tracer): calls pass straight through" test "$out" == "calls ok"

# scaffold benchmark on 2 ranks, traced: its gradient all-reduces appear as MPI events beside its
# own comm/all_reduce annotations, on both ranks.
B=$M/bench
OMP_NUM_THREADS=1 "$SCAFFOLD" trace --out "$B/tr" -- $MPIRUN -n 2 "$SCAFFOLD" benchmark \
    -c configs/benchmark_default.yml -c tests/train/tiny.yml --epochs 1 --base-run-dir "$B/runs" \
    --dataset-dir "$B/ds" --fract-base-dir "$B/fr" >"$B.log" 2>&1
if [ $? -eq 0 ]; then
    t_check "scaffold benchmark, 2 ranks traced: MPI_Allreduce events (comm size 2) beside the all_reduce annotations" \
        "$PYTHON" - "$B/tr" <<'EOF'
import sys, os
sys.path.insert(0, "tests/trace")
import check
per = {}
for f in check.load_dir(sys.argv[1]):
    ev = f["events"]
    ar = [e for e in ev if e["name"] == "MPI_Allreduce" and e["args"].get("comm_size") == 2]
    ann = [e for e in ev if e["cat"] == "comm" and e["name"] == "all_reduce"]
    if ar:
        per[ar[0]["args"]["rank"]] = (len(ar), len(ann))
ok = sorted(per) == [0, 1] and all(a > 0 and n > 0 for a, n in per.values()) and not check.FAILS
print(per)
sys.exit(0 if ok else 1)
EOF
else
    t_fail "scaffold benchmark, 2 ranks traced" "$(tail -5 "$B.log")"
fi
