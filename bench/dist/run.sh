#!/usr/bin/env bash
# Spatial and data parallelism (src/parallel) measured with bench_dist, one OpenMP thread per rank,
# each configuration REPS times (default 3) interleaved, medians of the per-step maxima over
# ranks. Baselines measured in the same run:
#  1. strong scaling, fixed volume (64^3, base 16, 3 levels): 2 ranks [2,1,1] and 4 ranks
#     [4,1,1] / [2,2,1] against 1 rank x 1 thread; the step split into compute, halo wait,
#     GroupNorm/loss sums and exposed gradient all-reduce; activation memory per rank against
#     the unsharded slab / shards, against its bound (that + the halo faces the rank holds + the
#     share of the slab that does not shrink with the block) and against tools/dist_model.py
#  2. weak scaling, fixed block per rank (32x64x64): 1, 2 [2,1,1], 4 [4,1,1] ranks
#  3. the gradient all-reduce of 2 replicas (scale 5, base 64: 5.4 M parameters) overlapped with
#     the backward pass: exposed time against the blocking all-reduce of the same gradient and
#     against a run with the overlap off (SCAFFOLD_GRAD_OVERLAP=0)
#  4. (PARTS=4, ~6 GiB per rank) scaffold benchmark at scale 7 / base 64 with [2,1,1] on 2 ranks
#     (bench/dist/scale7.yml: one epoch of 3 optimizer steps): the summary line with samples/s
#     and the peak memory per rank, against tools/dist_model.py's activation + parameter model
#  5. (PARTS=5) scaffold scaling on configs/quickstart.yml: 1 and 2 ranks, [1,1,1] and [2,1,1],
#     2 epochs per point, 1 thread per rank: the summary line and scaling.csv
# On a 2-core machine 4 ranks are oversubscribed: their times show the split, not a speed-up.
# Run it alone: flock -x /tmp/scaffold-cpu.lock bash bench/dist/run.sh. PARTS="1 3" selects.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BUILD=$(cd "$BUILD" && pwd)
B=$BUILD/bench/dist/bench_dist
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
MPIRUN="mpirun --oversubscribe"
REPS=${REPS:-3}
STEPS=${STEPS:-3}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
has() { case " ${PARTS:-1 2 3} " in *" $1 "*) return 0;; esac; return 1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { sed -nE "s/.* $1 ([-0-9.e+]+).*/\1/p"; }
# run NAME RANKS ARGS...: one bench_dist line appended to $d/NAME
run() {
    local name=$1 n=$2; shift 2
    if [ "$n" -eq 1 ]; then "$B" --steps "$STEPS" "$@"; else $MPIRUN -n "$n" "$B" --steps "$STEPS" "$@"; fi \
        2>&1 | grep '^dist ' >> "$d/$name"
}
med() { field "$2" < "$d/$1" | median; }
split_line() { # NAME LABEL
    printf '%-34s step %6.3f s = compute %6.3f + halo wait %6.3f + GN/loss sums %6.3f + skew %6.3f + grad exposed %6.3f s; act %7.1f MiB/rank; halo %6.2f MiB/step\n' \
        "$2" "$(med "$1" step_s)" "$(med "$1" compute_s)" "$(med "$1" halo_wait_s)" "$(med "$1" gn_sum_s)" \
        "$(med "$1" skew_s)" "$(med "$1" grad_exposed_s)" "$(med "$1" act_mib_per_rank)" "$(med "$1" halo_mib_per_step)"
}
echo "bench/dist on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores; $REPS repeats x $STEPS steps"

if has 1; then
    V="--d 64 --h 64 --w 64 --base 16 --layers 3"
    for r in $(seq "$REPS"); do
        run s1 1 $V
        run s2 2 $V --sd 2
        run s4 4 $V --sd 4
        run s4b 4 $V --sd 2 --sh 2
    done
    echo "1. strong scaling, 64^3 volume, base 16, 3 levels, 1 thread per rank:"
    split_line s1 "1 rank (baseline)"
    split_line s2 "2 ranks [2,1,1]"
    split_line s4 "4 ranks [4,1,1] (oversubscribed)"
    split_line s4b "4 ranks [2,2,1] (oversubscribed)"
    t1=$(med s1 step_s) t2=$(med s2 step_s)
    echo "   2-rank [2,1,1] step vs 1-rank 1-thread step: $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.2f", a/b}')x faster (target >= 1.7x)"
    a1=$(med s1 act_mib_per_rank)
    m1=$(python3 tools/dist_model.py point 64 64 64 16 3 1 1 1 | field act_mib_per_rank)
    echo "   activation memory, 1 rank: $a1 MiB (model $m1 MiB)"
    for x in "s2 2 2 1 1" "s4 4 4 1 1" "s4b 4 2 2 1"; do
        set -- $x
        aT=$(med "$1" act_mib_per_rank)
        pt=$(python3 tools/dist_model.py point 64 64 64 16 3 "$3" "$4" "$5")
        m=$(field act_mib_per_rank <<< "$pt") mh=$(field halo_mib_per_step <<< "$pt")
        ms=$(field sums_bytes_per_step <<< "$pt") ah=$(field act_halo_mib <<< "$pt")
        af=$(field act_fixed_mib <<< "$pt")
        echo "   activation memory per rank, $2 shards [$3,$4,$5]: $aT MiB vs unsharded/$2 = $(awk -v a="$a1" -v t="$2" 'BEGIN{printf "%.2f", a/t}') MiB (+$(awk -v a="$a1" -v b="$aT" -v t="$2" 'BEGIN{printf "%.2f", b-a/t}')); bound $(awk -v a="$a1" -v t="$2" -v h="$ah" -v f="$af" 'BEGIN{printf "%.2f", a/t+h+f}') MiB = unsharded/$2 + halo faces held $ah (in the widest convolution's padded input) + non-shrinking part $af (weight-gradient copies, thread panels, GroupNorm statistics: beyond the 1/$2 share): $(awk -v a="$a1" -v b="$aT" -v t="$2" -v h="$ah" -v f="$af" 'BEGIN{print (b <= a/t+h+f+0.02) ? "within" : "ABOVE"}'); model $m MiB"
        echo "   bytes per step, $2 shards [$3,$4,$5]: halo $(med "$1" halo_mib_per_step) MiB (model $mh); GroupNorm + loss sums $(med "$1" sums_bytes_per_step) B in $(med "$1" sums_per_step) all-reduces (model $ms B)"
    done
fi

if has 2; then
    for r in $(seq "$REPS"); do
        run w1 1 --d 32 --h 64 --w 64 --base 16 --layers 3
        run w2 2 --d 64 --h 64 --w 64 --base 16 --layers 3 --sd 2
        run w4 4 --d 128 --h 64 --w 64 --base 16 --layers 3 --sd 4
    done
    echo "2. weak scaling, a 32x64x64 block per rank, base 16, 3 levels:"
    split_line w1 "1 rank, 32x64x64 (baseline)"
    split_line w2 "2 ranks [2,1,1], 64x64x64"
    split_line w4 "4 ranks [4,1,1], 128x64x64 (oversub.)"
    for x in w2 w4; do
        echo "   $x: weak-scaling efficiency (baseline step / step) $(awk -v a="$(med w1 step_s)" -v b="$(med $x step_s)" 'BEGIN{printf "%.0f%%", 100*a/b}')"
    done
fi

if has 3; then
    V="--d 32 --h 32 --w 32 --base 64 --layers 2"
    for r in $(seq "$REPS"); do
        run o1 2 $V
        SCAFFOLD_GRAD_OVERLAP=0 run o0 2 $V
    done
    echo "3. 2 replicas, scale 5 (32^3), base 64, 2 levels: gradient all-reduce of $(med o1 params) parameters"
    split_line o1 "overlapped (default)"
    split_line o0 "overlap off (baseline)"
    echo "   blocking all-reduce of the same gradient: $(med o1 grad_blocking_s) s; exposed with overlap $(med o1 grad_exposed_s) s, without $(med o0 grad_exposed_s) s"
    echo "   hidden behind backward: $(awk -v e="$(med o1 grad_exposed_s)" -v b="$(med o1 grad_blocking_s)" 'BEGIN{printf "%.0f%%", 100*(1-e/b)}') of the blocking all-reduce (target >= 50%); step $(awk -v a="$(med o0 step_s)" -v b="$(med o1 step_s)" 'BEGIN{printf "%.3f", a/b}')x vs overlap off"
fi

if has 4; then
    root=$PWD
    ( cd "$d" && OMP_NUM_THREADS=1 $MPIRUN -n 2 "$BUILD/scaffold" benchmark \
        -c "$root/configs/benchmark_default.yml" -c "$root/bench/dist/scale7.yml" \
        --dc-num-shards 2 1 1 --base-run-dir s7 > s7.log 2>&1 )
    echo "4. scale 7, base 64, [2,1,1] on 2 ranks x 1 thread (bench/dist/scale7.yml):"
    grep -E 'model: |epoch 1: |^benchmark: |scaffold benchmark: ' "$d/s7.log" | sed 's/^/   /'
    python3 tools/dist_model.py point 128 128 128 64 4 2 1 1 | sed 's/^/   /'
fi

if has 5; then
    root=$PWD
    ( cd "$d" && "$BUILD/scaffold" scaling -c "$root/configs/benchmark_default.yml" \
        -c "$root/configs/quickstart.yml" --epochs 2 --threads 1 --ranks 1,2 \
        --shards "1 1 1;2 1 1" --out "$d/study" > "$d/study.log" 2>&1 )
    echo "5. scaffold scaling, quickstart, 2 epochs per point, 1 thread per rank:"
    grep '^scaling: ' "$d/study.log" | sed 's/^/   /'
    sed 's/^/   /' "$d/study/scaling.csv"
fi
