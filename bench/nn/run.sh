#!/usr/bin/env bash
# The training engine against PyTorch 2.x from PyPI (oneDNN; a bench-only venv, bench/venv.sh),
# in the same run, same thread count:
#   1. the machine: CPU, the kernel path scaffold dispatched to, the FP32 FMA peak of that path
#      (register-only loop, measured before and after), PyTorch's SGEMM rate;
#   2. per layer at the upstream widths: Conv3d k3 forward, backward-data, backward-weights;
#      ConvTranspose3d; GroupNorm+ReLU (median of REPS each, ours and PyTorch's interleaved
#      layer by layer), GFLOP/s and % of the FMA peak measured between the layer's repeats
#      (the highest; shared hosts drift, so the peak is taken next to what it is compared with);
#   3. whole training steps (forward, loss, backward, clip, Adam; batch 1), fp32, bf16
#      (torch_amp: 1 / PyTorch CPU autocast) and with activation checkpointing, with peak RSS;
#      scaffold's and PyTorch's steps alternate, REPS rounds, the median of each engine's;
#      checkpointed steps alternate with plain ones the same way for their time ratio. A row
#      that ran beside other work is marked busy (bench/nn/lib.sh: the engines' CPU shares and
#      the share of the machine other work took meanwhile).
# Usage: bench/nn/run.sh [REPS] [THREADS] [quick|full]
#   quick (default): layers at 32^3 and below, steps at scale 5/64 and 6/32
#   full: every layer, steps also at 6/64 and one step at 7/64 (~10 GiB each: run it alone)
#   NN_STEPS="5:64 6:64" (scale:base pairs) replaces the mode's list of steps (NN_STEPS="": none)
#   NN_PRECS="fp32 ckpt" replaces the precisions of each step (default fp32 bf16 ckpt); PyTorch's
#     CPU autocast-bf16 step takes minutes at scale 5/64 on a CPU without AVX512_BF16
#   NN_CONVS="32:64:64" (D:cin:cout), NN_CONVTS, NN_GNS="32:64" (D:channels) replace the mode's
#     layers; NN_LAYERS=0 skips the per-layer tables; NN_LAYERS_BF16=0|1 skips or forces the bf16 one (by
#     default it runs where the CPU has AVX512_BF16)
#   NN_PAIRS=N: rounds of fp32 and bf16 processes in turn per layer for the bf16 table's last
#     column (default 5)
#   NN_FIRSTUSE=0 skips the table of the algorithm selection's cost on first use
# PyTorch runs each layer and step in both memory formats, contiguous (upstream's) and
# channels_last_3d (PyTorch's CPU tuning advice: 1.3x faster bf16 steps at 5 / 64 on a Xeon with
# AMX), and the faster one is the baseline (per pass for the layers).
# scaffold's Conv3d algorithms are chosen by measurement (nn/algo.h) with one cache for the run;
# SCAFFOLD_NN_ALGO=rule (the built-in rule) or an algorithm's name overrides it.
# Output: tables on stdout; RESULT lines carry the ratios.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
REPS=${1:-3}
THREADS=${2:-$(nproc)}
MODE=${3:-quick}
export OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=${OMP_PROC_BIND:-false}
# scaffold's Conv3d algorithms by measurement (nn/algo.h), as scaffold benchmark chooses them,
# with one cache for this run: the first process that meets a shape measures it (in its untimed
# warm-up), the others reuse its choice, so every row of the run runs the same algorithms
ALGO_CACHE=$(mktemp)
rm -f "$ALGO_CACHE"
trap 'rm -f "$ALGO_CACHE" "$ALGO_CACHE.res"' EXIT
export SCAFFOLD_NN_ALGO=${SCAFFOLD_NN_ALGO:-measure} SCAFFOLD_NN_ALGO_CACHE=${SCAFFOLD_NN_ALGO_CACHE:-$ALGO_CACHE}
BIN=$BUILD/bench/nn/bench_step
[ -x "$BIN" ] || { echo "build first: make"; exit 1; }
source bench/venv.sh
source bench/nn/lib.sh
PY=$(bench_venv torch) || { echo "bench/nn: no PyTorch venv (PyPI unreachable?)"; exit 1; }
TORCH="$PY tools/torch_ref.py"

peak1=$("$BIN" --peak 1)
echo "$peak1" | sed 's/^/# /'
cpu=$(awk '/^cpu /{sub(/^cpu /,""); print}' <<<"$peak1")
path=$(awk '/^path /{print $2}' <<<"$peak1")
tv=$($PY -c 'import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())')
sg=$($TORCH sgemm "$THREADS")
echo "# CPU: $cpu; scaffold kernel path: $path; $THREADS threads; PyTorch $tv (PyPI); $sg"

# ---- per layer ---------------------------------------------------------------------------
if [ "$MODE" = full ]; then
    CONVS="64:64:64 32:64:64 32:128:128 16:128:128 16:256:256 8:256:256 8:512:512"
    CONVTS="32:128:64 16:256:128 8:512:256"
    GNS="64:64 32:128 16:256"
else
    CONVS="32:64:64 16:128:128 8:256:256 8:512:512"
    CONVTS="16:128:64 8:256:128"
    GNS="32:64 16:128"
fi
CONVS=${NN_CONVS-$CONVS} CONVTS=${NN_CONVTS-$CONVTS} GNS=${NN_GNS-$GNS}
[ "${NN_LAYERS:-1}" = 0 ] && CONVS="" CONVTS="" GNS=""
layers=$(mktemp)
# PyTorch's layer in both memory formats, contiguous (upstream's) and channels_last_3d (PyTorch's
# CPU tuning advice), each pass's faster one: "layer NAME D CIN COUT time_s T gflops G"
torch_layer() { # op D cin cout [--bf16]
    { $TORCH layer "$@" "$THREADS" "$REPS"; $TORCH layer "$@" "$THREADS" "$REPS" --channels-last; } |
        awk '$1 == "layer" { if (!($2 in t)) o[++n] = $2; if (!($2 in t) || $6 < t[$2]) { t[$2] = $6; l[$2] = $0 } }
             END { for (i = 1; i <= n; i++) print l[o[i]] }'
}
run_layer() { # op D cin cout
    "$BIN" --layer "$1" "$2" "$3" "$4" --reps "$REPS" | sed 's/^/ours /' >>"$layers"
    torch_layer "$1" "$2" "$3" "$4" | sed 's/^/torch /' >>"$layers"
}
for s in $CONVS; do IFS=: read -r d ci co <<<"$s"; run_layer conv "$d" "$ci" "$co"; done
for s in $CONVTS; do IFS=: read -r d ci co <<<"$s"; run_layer convt "$d" "$ci" "$co"; done
for s in $GNS; do IFS=: read -r d c <<<"$s"; run_layer gn "$d" "$c" "$c"; done
# bf16 (torch_amp: 1 / PyTorch CPU autocast) convolutions, where the CPU has AVX512_BF16 (without
# it PyTorch's bf16 layers take minutes); NN_LAYERS_BF16=0 skips them, =1 forces them
bf16dp=$(awk '/^path /{print $4}' <<<"$peak1")
layers16=$(mktemp)
if [ "${NN_LAYERS_BF16:-$bf16dp}" = 1 ]; then
    run_layer16() { # op D cin cout
        "$BIN" --layer "$1" "$2" "$3" "$4" --reps "$REPS" --bf16 | sed 's/^/ours /; s/_bf16 / /' >>"$layers16"
        torch_layer "$1" "$2" "$3" "$4" --bf16 | sed 's/^/torch /' >>"$layers16"
    }
    for s in $CONVS; do IFS=: read -r d ci co <<<"$s"; run_layer16 conv "$d" "$ci" "$co"; done
    for s in $CONVTS; do IFS=: read -r d ci co <<<"$s"; run_layer16 convt "$d" "$ci" "$co"; done
    # bf16 against fp32, side by side: per layer, NN_PAIRS (default 5) rounds of an fp32 and a
    # bf16 process in turn, each pass's median per precision. The tables above are minutes
    # apart, and a shared host's speed drifts by more than the difference between them.
    pairs16=$(mktemp)
    run_pairs() { # op D cin cout
        for _ in $(seq "${NN_PAIRS:-5}"); do
            "$BIN" --layer "$1" "$2" "$3" "$4" --reps 3 | sed 's/^/fp32 /' >>"$pairs16"
            "$BIN" --layer "$1" "$2" "$3" "$4" --reps 3 --bf16 | sed 's/^/bf16 /; s/_bf16 / /' >>"$pairs16"
        done
    }
    for s in $CONVS; do IFS=: read -r d ci co <<<"$s"; run_pairs conv "$d" "$ci" "$co"; done
    for s in $CONVTS; do IFS=: read -r d ci co <<<"$s"; run_pairs convt "$d" "$ci" "$co"; done
fi

peak2=$("$BIN" --peak 1 | awk '/fma_peak_gflops/ {print $2}')
peak=$(awk -v a="$(awk '/fma_peak_gflops/ {print $2}' <<<"$peak1")" -v b="$peak2" \
    'BEGIN { print (a > b ? a : b) }')
# layer_table FILE [PAIRSFILE]: each pass of FILE with its algorithm, GFLOP/s and % of the fp32
# FMA peak measured next to it (Winograd's counted in direct-convolution FLOPs, so above 100% is
# possible; bf16 passes too, whose vdpbf16ps peak is twice the fp32 one), PyTorch's, and with
# PAIRSFILE (the bf16 table) scaffold's fp32 pass time over its bf16 one, the medians of the
# alternated pairs
layer_table() {
awk -v peak="$peak" -v ref="${2:-}" '
    function median(p, key,   m, i, j, v, a) {
        m = nv[p, key]
        for (i = 1; i <= m; i++) a[i] = pv[p, key, i]
        for (i = 2; i <= m; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    FNR == 1 { file++ }
    ref != "" && file == 1 { key = $3 " " $4 " " $5 " " $6; pv[$1, key, ++nv[$1, key]] = $8; next }
    { who = $1; key = $3 " " $4 " " $5 " " $6; t[who, key] = $8; g[who, key] = $10;
      if (who == "ours" && $11 == "peak_gflops") pk[key] = $12
      if (who == "ours") al[key] = ($13 == "algo" ? $14 : "-")
      if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
    END {
        for (i = 1; i <= n; i++) {
            split(order[i], k, " ")
            go = g["ours", order[i]]; gt = g["torch", order[i]]
            p = pk[order[i]] > 0 ? pk[order[i]] : peak
            pg = go > 0 && p > 0 ? sprintf("%.0f", 100 * go / p) : "-"
            pt = gt > 0 && p > 0 ? sprintf("%.0f", 100 * gt / p) : "-"
            vs = ""
            f32 = nv["fp32", order[i]] ? median("fp32", order[i]) : 0
            b16 = nv["bf16", order[i]] ? median("bf16", order[i]) : 0
            if (ref != "") vs = (f32 > 0 && b16 > 0 ? sprintf(" %.2fx |", f32 / b16) : " - |")
            printf "| %s | %s^3 | %s->%s | %s | %s | %.4f | %s | %s | %.4f | %s | %s | %.2fx |%s\n",
                k[1], k[2], k[3], k[4], al[order[i]], (go > 0 && p > 0 ? sprintf("%.1f", p) : "-"),
                t["ours", order[i]], (go > 0 ? go : "-"), pg,
                t["torch", order[i]], (gt > 0 ? gt : "-"), pt,
                t["torch", order[i]] / t["ours", order[i]], vs
            if (go > 0 && p > 0) { sum += 100 * go / p; cnt++; if (100 * go / p < mn || cnt == 1) mn = 100 * go / p }
            if (ref != "" && f32 > 0 && b16 > f32) slower++
        }
        if (cnt) printf "\nRESULT layers%s: scaffold convolution passes %.0f%%..., lowest %.0f%% of the fp32 FMA peak\n", (ref != "" ? " bf16" : ""), sum / cnt, mn
        if (ref != "") printf "RESULT layers bf16: %d of %d passes slower in bf16 than in fp32\n", slower, n
    }' ${2:+"$2"} "$1" | sed 's/%\.\.\./% on average/'
}
if [ -s "$layers" ]; then
    echo
    echo "## Per layer ($cpu, $THREADS threads, median of $REPS; FMA peak $peak GFLOP/s, the higher of the run's start and end; each row's % peak is against the FMA peak measured between that layer's repeats, the highest, for both engines)"
    echo
    echo "| layer | volume | channels | scaffold algorithm | FMA peak | scaffold s | GFLOP/s | % peak | PyTorch s | GFLOP/s | % peak | PyTorch/scaffold |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    layer_table "$layers"
fi
if [ -s "$layers16" ]; then
    echo
    echo "## Per layer, bf16 ($cpu, $THREADS threads, median of $REPS; scaffold torch_amp: 1, PyTorch CPU autocast to bfloat16; GFLOP/s counted as fp32's and against the fp32 FMA peak measured next to the layer: vdpbf16ps peaks at twice it; the last column: scaffold's fp32 pass time over its bf16 one, above 1 when bf16 is faster, the medians of ${NN_PAIRS:-5} fp32 and bf16 processes run in turn, 3 repeats each)"
    echo
    echo "| layer | volume | channels | scaffold algorithm | FMA peak | scaffold s | GFLOP/s | % fp32 peak | PyTorch s | GFLOP/s | % fp32 peak | PyTorch/scaffold | scaffold fp32/bf16 |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    layer_table "$layers16" "$pairs16"
fi
# ConvTranspose3d k2 s2 is three plain GEMMs (forward M = D^3, N = 8 cout, K = cin; input
# gradient N = cin, K = 8 cout; weight gradient M = cin, N = 8 cout, K = D^3): the most a
# practitioner gets for it from a BLAS call is oneDNN's SGEMM at those shapes
if [ -n "$CONVTS" ]; then
    echo
    echo "## ConvTranspose3d against oneDNN's SGEMM at the same GEMM shapes ($cpu, $THREADS threads; scaffold's pass median of $REPS, \`dnnl_sgemm\` best of 5)"
    echo
    echo "| layer | pass | GEMM M x N x K | scaffold GFLOP/s | dnnl_sgemm GFLOP/s | scaffold/dnnl_sgemm |"
    echo "|---|---|---|---|---|---|"
    for s in $CONVTS; do
        IFS=: read -r d ci co <<<"$s"
        v=$((d * d * d))
        for ps in "fwd:$v:$((8 * co)):$ci" "bwd_data:$v:$ci:$((8 * co))" "bwd_weight:$ci:$((8 * co)):$v"; do
            IFS=: read -r pn m n k <<<"$ps"
            ours=$(awk -v nm="convt3d_$pn" -v d="$d" -v ci="$ci" -v co="$co" \
                '$1 == "ours" && $3 == nm && $4 == d && $5 == ci && $6 == co {print $10}' "$layers")
            dn=$($TORCH sgemm "$THREADS" "$m" "$n" "$k" | awk '{print $2}')
            awk -v d="$d" -v ci="$ci" -v co="$co" -v pn="$pn" -v m="$m" -v n="$n" -v k="$k" \
                -v o="$ours" -v g="$dn" 'BEGIN { printf "| %s^3 %s->%s | %s | %s x %s x %s | %s | %s | %s |\n",
                d, ci, co, pn, m, n, k, o, g, (o > 0 && g > 0 ? sprintf("%.2fx", o / g) : "-") }'
        done
    done
fi
rm -f "$layers" "$layers16" ${pairs16:+"$pairs16"}

# ---- whole steps -------------------------------------------------------------------------
if [ "$MODE" = full ]; then
    STEPS="5:64 6:32 6:64 7:64"
else
    STEPS="5:64 6:32"
fi
STEPS=${NN_STEPS-$STEPS} # set but empty: no steps
[ -z "$STEPS" ] && exit 0
echo
echo "## Training step ($cpu, $THREADS threads, batch 1; each engine a warm-up and one step per round, scaffold and PyTorch alternated, median of $REPS rounds; checkpointing: $REPS rounds alternated with plain steps, medians; scale 7: one step or round)"
echo
# median_of KEY LINE...: the line whose KEY value is the median (lower median for even counts)
median_of() {
    local key=$1; shift
    printf '%s\n' "$@" | awk -v k="$key" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1), NR}' |
        sort -g | awk -v n="$#" 'NR == int((n + 1) / 2) {print $2}' | {
        read -r idx
        printf '%s\n' "$@" | sed -n "${idx}p"
    }
}
# alternate R F G: R rounds of (F, G), their outputs in the arrays out1 and out2
alternate() {
    out1=() out2=()
    for ((i = 0; i < $1; i++)); do
        out1+=("$("$2")")
        out2+=("$("$3")")
    done
}
# KEY's line of a command's output with " others F" appended: the share of the machine's CPU
# time other work used while it ran (with_others, bench/nn/lib.sh)
with_others_line() { # KEY CMD...
    local k=$1
    shift
    with_others "$@" | awk -v k="$k" '$1 == k { l = $0 } $1 == "others" { o = $2 } END { if (l != "") print l, "others", o }'
}
# one warm-up and one timed step each, of the current scale ($sc), base ($b) and flags
our_step() { with_others_line scaffold_step_s "$BIN" --scale "$sc" --base "$b" --reps 1 $fl; }
plain_step() { with_others_line scaffold_step_s "$BIN" --scale "$sc" --base "$b" --reps 1; }
# PyTorch's step in both memory formats (as its layers), the faster one's line
torch_both() {
    { $TORCH bench "$sc" "$b" "$THREADS" 1 $tf; $TORCH bench "$sc" "$b" "$THREADS" 1 $tf --channels-last; } |
        awk '$1 == "torch_step_s" && (l == "" || $2 < t) { t = $2; l = $0 } END { print l }'
}
torch_step() { with_others_line torch_step_s torch_both; }
# the most any of the lines says others took
others_max() { printf '%s\n' "$@" | awk '{ for (i = 1; i < NF; i++) if ($i == "others" && $(i + 1) > m) m = $(i + 1) } END { printf "%.2f\n", m }'; }
raw=$(mktemp) # the rows print as each step finishes (scale 7 takes minutes per step)
# CPU share: of its threads' CPUs, what each engine's timed step got (1.00 quiet); others: the
# most of the machine's CPU time that other work took while either engine's steps of the row
# ran (with_others). A row where a share fell under BUSY_SHARE (0.80) or others reached
# BUSY_OTHERS (0.05) (bench/nn/lib.sh) ran beside other work and is marked busy: not this CPU's
# speed
echo "| model | precision | scaffold s | scaffold GFLOP/s | scaffold peak RSS | PyTorch s | PyTorch peak RSS | PyTorch/scaffold | CPU share scaffold / PyTorch, others |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in $STEPS; do
    IFS=: read -r sc b <<<"$s"
    r=$REPS
    [ "$sc" -ge 7 ] && r=1
    for prec in ${NN_PRECS:-fp32 bf16 ckpt}; do
        fl=""; tf=""
        [ "$prec" = bf16 ] && fl="--bf16" && tf="--bf16"
        [ "$prec" = ckpt ] && fl="--ckpt"
        if [ "$prec" = ckpt ]; then
            # r rounds of (plain, checkpointed) steps, each a warm-up and one timed step: the
            # time ratio compares steps minutes apart at most, not this row with the fp32 row
            # taken earlier (a drift between them had put 1.29-1.42x at 1.70x)
            alternate "$r" plain_step our_step
            o=$(median_of scaffold_step_s "${out2[@]}")
            echo "$(median_of scaffold_step_s "${out1[@]}") pair 1" >>"$raw"
            t="torch_step_s 0 maxrss_mib 0"
            om=$(others_max "${out1[@]}" "${out2[@]}")
        elif [ "$sc" -ge 7 ]; then
            o=$(our_step)
            t=$(torch_step)
            om=$(others_max "$o" "$t")
        else
            # Side by side: r rounds of (scaffold, PyTorch), each a warm-up and one timed step,
            # the median of each engine's rounds: a drift of the machine's speed (a virtual
            # machine's neighbours) hits both engines alike instead of one engine's block.
            alternate "$r" our_step torch_step
            o=$(median_of scaffold_step_s "${out1[@]}")
            t=$(median_of torch_step_s "${out2[@]}")
            om=$(others_max "${out1[@]}" "${out2[@]}")
        fi
        awk -v o="$o" -v t="$t" -v sc="$sc" -v b="$b" -v prec="$prec" -v thr="$BUSY_SHARE" \
            -v om="$om" -v tho="$BUSY_OTHERS" 'BEGIN {
            n = split(o, a, " "); for (i = 1; i < n; i++) A[a[i]] = a[i + 1]
            n = split(t, c, " "); for (i = 1; i < n; i++) T[c[i]] = c[i + 1]
            ts = T["torch_step_s"] + 0
            sa = ("cpu_share" in A) ? A["cpu_share"] : "-"; st = ("cpu_share" in T) ? T["cpu_share"] : "-"
            busy = (sa != "-" && sa < thr) || (ts > 0 && st != "-" && st < thr) || om + 0 >= tho
            printf "| scale %s, base %s | %s | %.3f | %.0f | %.2f GiB | %s | %s | %s | %s / %s, %s%s |\n", sc, b,
                (prec == "ckpt" ? "fp32, checkpointing" : prec), A["scaffold_step_s"], A["gflops"],
                A["maxrss_mib"] / 1024, (ts > 0 ? sprintf("%.3f", ts) : "-"),
                (ts > 0 ? sprintf("%.2f GiB", T["maxrss_mib"] / 1024) : "-"),
                (ts > 0 ? sprintf("%.2fx", ts / A["scaffold_step_s"]) : "-"), sa,
                (ts > 0 ? st : "-"), om, busy ? " **busy**" : ""
        }'
        echo "$o" >>"$raw"
    done
done
awk '{ delete A; n = split($0, a, " "); for (i = 1; i < n; i++) A[a[i]] = a[i + 1]
       key = A["params"]
       if (A["pair"] == 1) { tp[key] = A["scaffold_step_s"]; next }
       if (A["precision"] == "fp32" && A["ckpt"] == 0) { t0[key] = A["scaffold_step_s"]; r0[key] = A["maxrss_mib"] }
       if (A["precision"] == "bf16") tb[key] = A["scaffold_step_s"]
       if (A["ckpt"] == 1) { tc[key] = A["scaffold_step_s"]; rc[key] = A["maxrss_mib"] }
       if (!(key in seen)) { seen[key] = 1; order[++m] = key } }
     END { for (i = 1; i <= m; i++) { k = order[i]; if (!(t0[k] > 0)) continue
           s = ""
           if (tb[k] > 0) s = s sprintf("; bf16 step %.2fx faster than fp32", t0[k] / tb[k])
           if (tc[k] > 0) s = s sprintf("; checkpointing %.2fx the time (against the plain steps alternated with it) at %.0f%% of the peak RSS", tc[k] / (tp[k] > 0 ? tp[k] : t0[k]), 100 * rc[k] / r0[k])
           if (s != "") printf "RESULT %s params%s\n", k, s } }' "$raw"
rm -f "$raw"

# ---- the first use's algorithm selection ---------------------------------------------------
# One process per model and precision with an empty cache: its warm-up measures every Conv3d
# pass of the model (nn/algo.h), which is what the first run on a new machine pays once. Its
# share of an epoch of the default configuration (configs/benchmark_default.yml: 240 volumes,
# 168 of them training samples, so 168 steps per epoch at batch 1 on one rank; the validation
# passes, not counted, make the epoch longer still). NN_FIRSTUSE=0 skips it.
if [ "${NN_FIRSTUSE:-1}" = 1 ] && [ "$SCAFFOLD_NN_ALGO" = measure ]; then
    echo
    echo "## Conv3d algorithm selection on first use ($cpu, $THREADS threads; an empty algorithm cache, the warm-up step measures every pass; its share of an epoch of the default configuration, 168 training steps)"
    echo
    echo "| model | precision | passes measured | selection s | step s | selection in steps | share of a default epoch |"
    echo "|---|---|---|---|---|---|---|"
    for s in $STEPS; do
        IFS=: read -r sc b <<<"$s"
        for prec in fp32 bf16; do
            fresh=$(mktemp)
            rm -f "$fresh"
            o=$(SCAFFOLD_NN_ALGO_CACHE=$fresh "$BIN" --scale "$sc" --base "$b" --reps 1 $([ "$prec" = bf16 ] && echo --bf16))
            rm -f "$fresh"
            awk -v o="$o" -v sc="$sc" -v b="$b" -v prec="$prec" 'BEGIN {
                n = split(o, a, " "); for (i = 1; i < n; i++) A[a[i]] = a[i + 1]
                st = A["scaffold_step_s"]; se = A["select_s"]
                printf "| scale %s, base %s | %s | %s | %.2f | %.3f | %.1f | %.2f%% |\n", sc, b, prec,
                    A["measured"], se, st, (st > 0 ? se / st : 0), (st > 0 ? 100 * se / (168 * st) : 0)
                if (st > 0) printf "RESULT selection %s/%s %s: %.2f s on first use, %.2f%% of a default epoch\n", sc, b, prec, se, 100 * se / (168 * st) >>"'"$ALGO_CACHE"'.res"
            }'
        done
    done
    [ -s "$ALGO_CACHE.res" ] && echo && cat "$ALGO_CACHE.res"
fi
