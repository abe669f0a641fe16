# Shell helpers of the bench/nn scripts (sourced). Each reads what its name says:
#   med                 the median of the numbers on stdin, one per line
#   step_field KEY      KEY's value on bench_step's scaffold_step_s line (stdin)
#   cache_differ A B    how many Conv3d passes of algorithm cache B chose otherwise than in A
#                       (fields 5-14 the key, 15 the algorithm: nn/algo.c's file format)
# and BUSY_SHARE: the share of its threads' CPUs (cpu_share) under which a timed step ran beside
# other work and is marked busy. 0.95: PyTorch's bf16 step at 6 / 64 on a Xeon with AMX took
# 1.77 s where its threads got 0.88-0.89 of their CPUs and 1.39-1.41 s where they got 0.99 (one
# descheduled thread stalls its team at every barrier), so 0.80 counted slowed baselines.
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
step_field() { awk -v k="$1" '/^scaffold_step_s/ { for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
cache_differ() {
    awk -F'\t' 'FNR == NR { if (!/^#/) k[$5 FS $6 FS $7 FS $8 FS $9 FS $10 FS $11 FS $12 FS $13 FS $14] = $15; next }
        !/^#/ { key = $5 FS $6 FS $7 FS $8 FS $9 FS $10 FS $11 FS $12 FS $13 FS $14; if ((key in k) && k[key] != $15) c++ }
        END { print c + 0 }' "$1" "$2"
}
BUSY_SHARE=${BUSY_SHARE:-0.95}
