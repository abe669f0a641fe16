#!/usr/bin/env bash
# The benchmark under a real scheduler: a one-node Slurm (Debian's slurm-wlm and munge, from
# tools/packages.d/slurm.test.txt) started by this script under a temporary folder (its own munge
# key and socket, slurm.conf with MpiDefault=pmix, slurmctld and slurmd in the foreground as
# background jobs on free ports) and stopped at exit with everything it started. Where the
# daemons cannot start it says SKIP (counted as skipped, never as passed). Checks:
#   1. srun -n 2 and sbatch: one world of 2 ranks (one run folder, "on 2 rank(s)").
#   2. An MPICH build (build-mpich/scaffold, when built) under srun --mpi=pmix: every task
#      refused with the launcher's message, nothing written; under --mpi=pmi2 it runs.
#   3. A 4-job array sharing one fresh fractal library and dataset: all succeed, the files are
#      the bytes a job alone writes.
#   4. scaffold scaling --launcher "srun -n {n}" inside an allocation.
#   5. A job ended by its time limit (--signal=TERM@...) checkpoints; resumed with its
#      restart.sh (which uses srun), it ends with the statistics of an uninterrupted run.
# Tiny configurations: a few minutes in all.
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=1
root=$PWD
T=""
pids=()
stop_all() {
    if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
        squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null
    fi
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
    [ -n "$T" ] && rm -rf "$T"
}
trap stop_all EXIT
skip() {
    echo "SKIP slurm: $1"
    stop_all
    trap - EXIT
    t_report
    exit 0
}
for c in munged slurmctld slurmd srun sbatch salloc squeue scancel; do
    command -v $c >/dev/null || skip "$c is not installed (bash tools/setup.sh --test installs slurm-wlm and munge)"
done
T=$(mktemp -d "${TMPDIR:-/tmp}/scaffold-slurm.XXXXXX")
chmod 755 "$T"

# munge: a key and a socket of our own, so that nothing of the machine's is touched.
head -c 1024 /dev/urandom > "$T/munge.key" && chmod 600 "$T/munge.key"
munged -F -f --socket="$T/munge.sock" --key-file="$T/munge.key" --log-file="$T/munged.log" \
    --pid-file="$T/munged.pid" --seed-file="$T/munged.seed" > "$T/munged.out" 2>&1 &
pids+=($!)
for i in $(seq 1 50); do [ -S "$T/munge.sock" ] && break; sleep 0.1; done
[ -S "$T/munge.sock" ] || skip "munged did not start: $(tail -n 2 "$T/munged.out")"

# Two free TCP ports for the daemons.
read -r p1 p2 < <("$PYTHON" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
user=$(id -un)
mem=$(awk '/MemTotal/ { print int($2 / 2048) }' /proc/meminfo)
mkdir -p "$T/state" "$T/spool"
cat > "$T/slurm.conf" <<EOF
ClusterName=scaffoldtest
SlurmctldHost=localhost
SlurmctldPort=$p1
SlurmdPort=$p2
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
NodeName=localhost CPUs=4 RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$T/slurm.conf
# Debian's policy-rc.d blocks the services: the daemons run here, in the foreground, as jobs.
slurmctld -D -f "$SLURM_CONF" > "$T/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" > "$T/slurmd.out" 2>&1 &
pids+=($!)
for i in $(seq 1 100); do
    [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
    sleep 0.2
done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] ||
    skip "the daemons did not start: $(tail -n 2 "$T/slurmctld.out" "$T/slurmd.out" "$T/slurmd.log" 2>/dev/null | tr '\n' ' ')"
t_ok "one-node Slurm up ($(slurmctld -V), MpiDefault=pmix)"

# The PMI plugin this build's MPI needs: PMIx for Open MPI, PMI-2 for MPICH.
if [ "${SCAFFOLD_MPI:-openmpi}" = mpich ]; then pmi=pmi2; else pmi=pmix; fi
W=$T/work
mkdir -p "$W"
cd "$W" || exit 1
cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml --fract-base-dir $W/fr --dataset-dir $W/ds"
T0=timeout
lastrun() { ls -d "$W"/$1/*/ 2>/dev/null | tail -n 1; }
stats() { cut -d, -f1-7,9,10 "$1/train_stats.csv"; }
EP=24

# 1. srun -n 2: one world of 2 (an MPI that did not join would give two 1-rank runs).
out=$($T0 300 srun --mpi=$pmi -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir srun2 --epochs 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ "$(ls -d srun2/*/ | wc -l)" -eq 1 ] && [ "$(grep -c '^benchmark: .* on 2 rank(s)' <<<"$out")" -eq 1 ]; then
    t_ok "srun --mpi=$pmi -n 2 benchmark: one world of 2 ranks, one run folder"
else
    t_fail "srun -n 2 benchmark" "exit $rc: $(tail -n 5 <<<"$out")"
fi
grep -q "^MPIRUN=\${MPIRUN:-srun --mpi=$pmi}$" "$(lastrun srun2)/restart.sh" && t_ok "restart.sh of an srun run resumes with srun --mpi=$pmi" ||
    t_fail "restart.sh of an srun run" "$(cat "$(lastrun srun2)/restart.sh")"

# sbatch -n 2 with srun inside: the uninterrupted reference of check 5 too.
cat > ref.sh <<EOF
#!/bin/bash
#SBATCH -n 2
srun --mpi=$pmi "$SCAFFOLD" benchmark $cfg --base-run-dir sbatch2 --checkpoint-interval 1 --epochs $EP
EOF
$T0 300 sbatch --wait -o ref.out ref.sh >/dev/null 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(ls -d sbatch2/*/ | wc -l)" -eq 1 ] && grep -q "^benchmark: stopped at epoch $EP (cap $EP) .* on 2 rank(s)" ref.out; then
    t_ok "sbatch -n 2 (srun inside): one world of 2 ranks, $EP epochs"
else
    t_fail "sbatch -n 2" "exit $rc: $(tail -n 5 ref.out)"
fi

# 2. An MPICH build under srun's PMIx starts every task as a singleton: refused on every task,
# one line naming srun's 2 tasks, MPICH's world of 1 and --mpi=pmi2; nothing written. Under
# --mpi=pmi2 it is one world.
mpich=$root/build-mpich/scaffold
[ "${SCAFFOLD_MPI:-openmpi}" = mpich ] && mpich=$SCAFFOLD
if [ -x "$mpich" ]; then
    out=$($T0 120 srun --mpi=pmix -n 2 sh -c '"$0" "$@"; echo "st $?"' "$mpich" benchmark $cfg --base-run-dir mpich_pmix --epochs 1 2>&1)
    if [ "$(grep -c '^st 2$' <<<"$out")" -eq 2 ] && [ "$(grep -c 'scaffold benchmark:' <<<"$out")" -eq 1 ] &&
        grep -q "scaffold benchmark: srun started 2 tasks but MPICH sees a world of 1: .*SLURM_STEP_NUM_TASKS=2.*; use srun --mpi=pmi2 with this MPICH build" <<<"$out" &&
        [ ! -e mpich_pmix ]; then
        t_ok "MPICH build under srun --mpi=pmix: both tasks exit 2, one line naming srun, both sizes and --mpi=pmi2, nothing written"
    else
        t_fail "MPICH build under srun --mpi=pmix" "$out"
    fi
    out=$($T0 300 srun --mpi=pmi2 -n 2 "$mpich" benchmark $cfg --base-run-dir mpich_pmi2 --epochs 1 2>&1)
    [ $? -eq 0 ] && grep -q '^benchmark: .* on 2 rank(s)' <<<"$out" && t_ok "MPICH build under srun --mpi=pmi2: one world of 2" ||
        t_fail "MPICH build under srun --mpi=pmi2" "$(tail -n 3 <<<"$out")"
else
    echo "SKIP the MPICH build under srun: $mpich is not built (make MPI=mpich)"
fi

# 3. Four jobs of an array on one fresh library and dataset (the normal case of job arrays):
# all succeed, and the files are those one job alone writes.
cat > arr.sh <<EOF
#!/bin/bash
#SBATCH -n 1
srun --mpi=$pmi "$SCAFFOLD" benchmark $cfg --fract-base-dir $W/shared/fr --dataset-dir $W/shared/ds --base-run-dir arr/\$SLURM_ARRAY_TASK_ID --epochs 1
EOF
$T0 600 sbatch --wait --array=0-3 -o 'arr_%a.out' arr.sh >/dev/null 2>&1
rc=$?
nok=$(grep -l '^benchmark: ' arr_*.out 2>/dev/null | wc -l)
[ $rc -eq 0 ] && [ "$nok" -eq 4 ] && t_ok "4-job array on one fresh library and dataset: all 4 succeed" ||
    t_fail "4-job array on one fresh library and dataset" "exit $rc, $nok of 4 finished: $(grep -h 'scaffold\|error' arr_*.out | head -n 5)"
# sums PREFIX: sha256 of every .npy and .csv of a library and dataset, by path within them (the
# dataset's timestamped folder name dropped)
sums() {
    (cd "$1" && find fr ds -type f \( -name '*.npy' -o -name '*.csv' \) ! -name 'rejected.csv' -print0 | sort -z | xargs -0 sha256sum) |
        sed -E 's#ds/([^/]+)/[^/]+/#ds/\1/#'
}
$T0 300 "$SCAFFOLD" benchmark $cfg --fract-base-dir $W/alone/fr --dataset-dir $W/alone/ds --base-run-dir alone_runs --epochs 1 >/dev/null 2>&1
if [ -n "$(sums alone)" ] && [ "$(sums shared)" = "$(sums alone)" ] && [ "$(ls -d shared/ds/*/*/ | wc -l)" -eq 1 ]; then
    t_ok "4-job array: one dataset, library and dataset bytes equal a lone job's ($(sums alone | wc -l) files)"
else
    t_fail "4-job array: shared bytes" "$(diff <(sums shared) <(sums alone) | head -n 5); datasets: $(ls -d shared/ds/*/*/ 2>/dev/null | wc -l)"
fi
s0=$(stats "$(lastrun arr/0)" 2>/dev/null)
same=0
for a in 1 2 3; do [ -n "$s0" ] && [ "$(stats "$(lastrun arr/$a)" 2>/dev/null)" = "$s0" ] && same=$((same + 1)); done
[ $same -eq 3 ] && t_ok "4-job array: the 4 runs have the same statistics" || t_fail "4-job array: statistics" "$same of 3 equal to job 0's"

# 4. A scaling study inside an allocation, each point launched by srun.
out=$($T0 600 salloc -n 2 "$SCAFFOLD" scaling $cfg --epochs 1 --threads 1 --ranks 1,2 --launcher "srun --mpi=$pmi -n {n}" --out study 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q '^1,1,1x1x1,1,ok,' study/scaling.csv && grep -q '^2,2,1x1x1,1,ok,' study/scaling.csv; then
    t_ok "scaffold scaling --launcher \"srun -n {n}\" in an allocation: 1 and 2 ranks ok"
else
    t_fail "scaling with srun" "exit $rc: $(tail -n 3 <<<"$out"; cat study/scaling.csv 2>/dev/null)"
fi

# 5. A job ended by its time limit: SIGTERM before the end (--signal=TERM@20 with --time=1: Slurm
# sends it at a tick of its 30 s checks, 10 to 40 s in) reaches both tasks; they finish the step,
# checkpoint and exit 143. Slow reads (a slow file system) make the run longer than the limit;
# the resume (restart.sh as a batch script: srun inside) runs at full speed, and the statistics
# equal the uninterrupted sbatch run's.
cat > tl.sh <<EOF
#!/bin/bash
#SBATCH -n 2
#SBATCH --time=1
#SBATCH --signal=TERM@20
SCAFFOLD_FAULT_SLOW_READ=1000 srun --mpi=$pmi "$SCAFFOLD" benchmark $cfg --base-run-dir tl --checkpoint-interval 1 --epochs $EP
EOF
$T0 300 sbatch --wait -o tl.out tl.sh >/dev/null 2>&1
rc=$?
rt=$(lastrun tl)
if [ $rc -ne 0 ] && [ "$(grep -c '^benchmark: stopped by SIGTERM .*checkpoint saved there' tl.out)" -eq 1 ] && [ -n "$rt" ]; then
    t_ok "time limit (--signal=TERM@20): both tasks stop, one line, checkpoint saved ($(grep -o 'stopped by SIGTERM [a-z]* [^;]*' tl.out))"
else
    t_fail "time limit" "exit $rc: $(tail -n 5 tl.out)"
fi
if [ -n "$rt" ]; then
    $T0 300 sbatch --wait -n 2 -o resume.out "$rt/restart.sh" >/dev/null 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^benchmark: stopped at epoch $EP " resume.out && [ "$(stats "$rt")" = "$(stats "$(lastrun sbatch2)")" ]; then
        t_ok "resumed by its restart.sh under sbatch: the statistics of the uninterrupted run"
    else
        t_fail "resume after the time limit" "exit $rc: $(tail -n 3 resume.out) $(diff <(stats "$rt") <(stats "$(lastrun sbatch2)") | head -n 4)"
    fi
fi
cd "$root" || exit 1
stop_all
trap - EXIT
t_report
