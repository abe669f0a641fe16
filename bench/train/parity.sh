#!/usr/bin/env bash
# Convergence parity with upstream: epochs (and time) to validation Dice >= target of scaffold and
# of the PyTorch harness (bench/train/torch_train.py: upstream's model, loss, CE weights, Adam,
# clipping, warm-restart schedule, metric) on the very same dataset, over many seeds, each side
# with its own initial weights and sample order, on two configurations:
#   small  bench/train/parity_small.yml  (scale 4, bottleneck 2, 3 classes, 48 instances, base 16)
#   large  bench/train/parity_large.yml  (scale 5, bottleneck 2, 3 classes, 48 instances, base 32)
# Per seed s, three runs ("sides"):
#   scaffold  scaffold --seed s (the seed also keys the fractal library and the dataset); it also
#             writes its initial weights (--save-initial-weights)
#   torch     the harness on that dataset, torch.manual_seed(s) weights and a DistributedSampler
#             order seeded s: upstream's training with its own draw of weights and order
#   same      the harness from scaffold's initial weights in scaffold's order (--sampler
#             scaffold: its sampler, ported): the same draw as scaffold, trained by PyTorch. Where
#             it needs the epochs scaffold needed, the two implementations train alike and any
#             difference between `scaffold` and `torch` is the luck of the draw (SIDES="scaffold
#             torch" skips it).
# Two more sides on request (SIDES="... wsot wtos"), to tell which half of a draw decides it:
#   wsot      scaffold's initial weights, DistributedSampler order seeded s
#   wtos      torch.manual_seed(s) weights, scaffold's order
# Results go to $OUT/results.csv (config,seed,side,epochs,converged,time_s), one row per run,
# appended as each run ends, so an interrupted study resumes where it stopped (runs already in
# the file are skipped). bench/train/parity_stats.py then prints the table: epochs side by side,
# means, a Mann-Whitney rank test, a bootstrap 90% interval of the ratio of mean epochs, the
# slowest seeds, the agreement of `same` with scaffold, and the time-to-target ratio.
#
#   bash bench/train/parity.sh                 # both configurations, seeds 1..10
#   CONFIGS=small SEEDS="$(seq 1 20)" OUT=/tmp/parity bash bench/train/parity.sh
#
# Environment: CONFIGS (small large), SEEDS (1..10), SIDES (scaffold torch same), THREADS (OpenMP / torch threads per run, 2),
# MAX_EPOCHS (60; a run that has not converged by then counts as MAX_EPOCHS, converged 0),
# OUT (results folder, kept; default a new temporary folder), BUILD (build), NICE (0; e.g. 19),
# PY (the harness's python; default the bench venv's PyTorch 2.x).
# Epoch counts do not depend on the machine's load; the times (and their ratio) need an idle one.
set -u
cd "$(dirname "$0")/../.."
root=$PWD
BUILD=${BUILD:-build}
S="$root/$BUILD/scaffold"
[ -x "$S" ] || { echo "parity.sh: $S not found; run make first" >&2; exit 2; }
if [ -z "${PY:-}" ]; then
    source bench/venv.sh
    PY=$(bench_venv torch) || { echo "parity.sh: no PyTorch 2.x venv (bench/venv.sh)" >&2; exit 1; }
fi
CONFIGS=${CONFIGS:-small large}
SEEDS=${SEEDS:-$(seq 1 10)}
THREADS=${THREADS:-2}
MAX_EPOCHS=${MAX_EPOCHS:-60}
SIDES=${SIDES:-scaffold torch same}
want() { case " $SIDES " in *" $1 "*) return 0;; esac; return 1; }
NICE=${NICE:-0}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT" || exit 1
res="$OUT/results.csv"
[ -f "$res" ] || echo "config,seed,side,epochs,converged,time_s" > "$res"
done_run() { grep -q "^$1,$2,$3," "$res"; }
run() { OMP_NUM_THREADS=$THREADS nice -n "$NICE" "$@"; }

for cfg in $CONFIGS; do
    yml="$root/bench/train/parity_$cfg.yml"
    [ -f "$yml" ] || { echo "parity.sh: no $yml (configurations: small large)" >&2; exit 2; }
    for seed in $SEEDS; do
        w="$OUT/$cfg/s$seed"
        mkdir -p "$w"
        sc=(-c "$root/configs/benchmark_default.yml" -c "$yml" --seed "$seed" \
            --dataset-dir "$w/datasets" --fract-base-dir "$OUT/fractals")
        if ! done_run "$cfg" "$seed" scaffold; then
            rm -rf "$w/runs"
            out=$(run "$S" benchmark "${sc[@]}" --epochs "$MAX_EPOCHS" --base-run-dir "$w/runs" \
                --save-initial-weights "$w/init.safetensors" 2>&1)
            line=$(grep '^benchmark:' <<<"$out")
            [ -n "$line" ] || { echo "parity.sh: scaffold failed ($cfg, seed $seed):" >&2; tail -n 5 <<<"$out" >&2; exit 1; }
            ep=$(sed -nE 's/^benchmark: reached .* at epoch ([0-9]+) .*/\1/p' <<<"$line")
            conv=1
            [ -n "$ep" ] || { conv=0; ep=$(sed -nE 's/.*stopped at epoch ([0-9]+) .*/\1/p' <<<"$line"); }
            t=$(sed -nE 's/.*time to target ([0-9.]+) s.*/\1/p; s/.*training wall time ([0-9.]+) s.*/\1/p' <<<"$line" | head -n 1)
            echo "$cfg,$seed,scaffold,$ep,$conv,$t" >> "$res"
        fi
        ds=$(ls -d "$w"/datasets/*/*/ | head -n 1)
        rd=$(ls -d "$w"/runs/*/ | tail -n 1)
        # a study started before scaffold saved its weights: the same weights from a short run
        if { want same || want wsot; } && [ ! -f "$w/init.safetensors" ] &&
            ! { done_run "$cfg" "$seed" same && done_run "$cfg" "$seed" wsot; }; then
            run "$S" benchmark "${sc[@]}" --epochs 1 --warmup-batches 0 --base-run-dir "$w/initrun" \
                --save-initial-weights "$w/init.safetensors" >/dev/null 2>&1 ||
                { echo "parity.sh: scaffold failed to write the initial weights ($cfg, seed $seed)" >&2; exit 1; }
            rm -rf "$w/initrun"
        fi
        for side in torch same wsot wtos; do
            want "$side" && ! done_run "$cfg" "$seed" "$side" || continue
            case $side in
            torch) draw=(--seed "$seed" --sampler torch --sampler-seed "$seed") ;;
            same) draw=(--init "$w/init.safetensors" --sampler scaffold --sampler-seed "$seed") ;;
            wsot) draw=(--init "$w/init.safetensors" --sampler torch --sampler-seed "$seed") ;;
            wtos) draw=(--seed "$seed" --sampler scaffold --sampler-seed "$seed") ;;
            esac
            out=$(run "$PY" "$root/bench/train/torch_train.py" "$ds" --scaffold-config "$rd/config.yaml" \
                "${draw[@]}" --max-epochs "$MAX_EPOCHS" --threads "$THREADS" \
                --stats-out "$w/${side}_stats.csv" --quiet 2>&1)
            line=$(grep '^torch_time_to_target_s' <<<"$out")
            [ -n "$line" ] || { echo "parity.sh: torch failed ($cfg, seed $seed, $side):" >&2; tail -n 5 <<<"$out" >&2; exit 1; }
            read -r _ t _ ep _ _ _ conv <<<"$line"
            echo "$cfg,$seed,$side,$ep,$conv,$t" >> "$res"
        done
        echo "parity: $cfg seed $seed: $(grep "^$cfg,$seed," "$res" | cut -d, -f3,4 | tr '\n' ' ')" >&2
    done
done
"$PY" "$root/bench/train/parity_stats.py" "$res"
echo "results: $res"
