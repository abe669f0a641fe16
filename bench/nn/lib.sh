# Shell helpers of the bench/nn scripts (sourced). Each reads what its name says:
#   med                 the median of the numbers on stdin, one per line
#   step_field KEY      KEY's value on bench_step's scaffold_step_s line (stdin)
#   cache_differ A B    how many Conv3d passes of algorithm cache B chose otherwise than in A
#                       (fields 5-14 the key, 15 the algorithm: nn/algo.c's file format)
#   with_others CMD...  CMD's output, then a line "others F": the share of the machine's CPU time
#                       that anything but CMD used while it ran (other processes, and the
#                       hypervisor's steal time), from /proc/stat and this shell's children's
#                       CPU time; over at least a second (a 30 ms blip of a daemon beside a
#                       0.2 s run read as 0.15)
# and the rule for a timed step that ran beside other work ("busy": not this CPU's speed):
# others at or above BUSY_OTHERS (0.05), or its threads' share of their CPUs (cpu_share) under
# BUSY_SHARE (0.80). The share alone cannot tell interference from an engine's own serial phases:
# PyTorch's steps at 7 / 64 on a quiet Xeon with AMX got 0.93-0.94 (fp32) and 0.88-0.90 (bf16)
# of their threads' CPUs in every round while the host's peak held steady, and a threshold of
# 0.95 marked all of them busy.
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
step_field() { awk -v k="$1" '/^scaffold_step_s/ { for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
cache_differ() {
    awk -F'\t' 'FNR == NR { if (!/^#/) k[$5 FS $6 FS $7 FS $8 FS $9 FS $10 FS $11 FS $12 FS $13 FS $14] = $15; next }
        !/^#/ { key = $5 FS $6 FS $7 FS $8 FS $9 FS $10 FS $11 FS $12 FS $13 FS $14; if ((key in k) && k[key] != $15) c++ }
        END { print c + 0 }' "$1" "$2"
}
BUSY_SHARE=${BUSY_SHARE:-0.80}
BUSY_OTHERS=${BUSY_OTHERS:-0.05}
# the machine's busy CPU time so far, in clock ticks (user, nice, system, irq, softirq, steal)
host_cpu() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# CPU seconds of a shell's finished children, from bash's times (its second line) in file $1:
# times runs in the measuring shell itself (in a $( ) subshell it would see none of them)
kids_cpu() { awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } print s }' "$1"; }
with_others() {
    local h0 t0 k0 tf
    tf=$(mktemp)
    h0=$(host_cpu) t0=$(date +%s.%N)
    times >"$tf"
    k0=$(kids_cpu "$tf")
    "$@"
    times >"$tf"
    awk -v h0="$h0" -v h1="$(host_cpu)" -v k0="$k0" -v k1="$(kids_cpu "$tf")" -v t0="$t0" \
        -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" -v n="$(nproc --all)" \
        'BEGIN { w = t1 - t0 < 1 ? 1 : t1 - t0; o = ((h1 - h0) / hz - (k1 - k0)) / (w * n)
                 printf "others %.3f\n", o < 0 ? 0 : o }'
    rm -f "$tf"
}
