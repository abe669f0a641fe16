#!/usr/bin/env bash
# generate_fractals: numpy checks, rank-count determinism, kill/restart, corrupt files, bad input.
cd "$(dirname "$0")/../.." && source tests/lib.sh
d=$(t_tmpdir)
cfg=$d/small.yml
printf 'problem_scale: 5\nn_categories: 3\nfract_base_dir: %s/f1\n' "$d" > "$cfg"
tree_hash() { (cd "$1" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16); }

# 1 rank, then numpy checks (independent re-implementation of the RNG, search and chaos game).
t_check "generate_fractals -n 1" $MPIRUN -n 1 "$SCAFFOLD" generate_fractals -c "$cfg" -v
t_check "numpy: classes, variance rule, instances" "$PYTHON" tests/fractal/check_library.py "$d/f1" 42 0.15 5 3
h1=$(tree_hash "$d/f1")
# 4 ranks into another directory: identical tree.
t_check "generate_fractals -n 4" $MPIRUN -n 4 "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/f4"
h4=$(tree_hash "$d/f4")
[ "$h1" = "$h4" ] && t_ok "same tree for 1 and 4 ranks ($h1)" || t_fail "same tree for 1 and 4 ranks" "$h1 vs $h4"
# 2 ranks, singleton (no mpirun) too.
"$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fs" >/dev/null 2>&1
[ "$(tree_hash "$d/fs")" = "$h1" ] && t_ok "singleton run gives the same tree" || t_fail "singleton run gives the same tree"

# A threshold that needs several class-search rounds: the rounds' sizes are rank 0's choice,
# so 3 ranks must still find exactly the first accepted proposals (checked independently).
printf 'problem_scale: 5\nn_categories: 3\nvariance_threshold: 0.25\nfract_base_dir: %s/fr\n' "$d" > "$d/rounds.yml"
out=$($MPIRUN -n 3 "$SCAFFOLD" generate_fractals -c "$d/rounds.yml" -v 2>&1)
[ "$(grep -c 'class round' <<<"$out")" -ge 6 ] && t_ok "several class-search rounds at -n 3" || t_fail "several class-search rounds" "$out"
t_check "numpy: multi-round search at -n 3 finds the first accepted proposals" "$PYTHON" tests/fractal/check_library.py "$d/fr" 42 0.25 5 3

# Killed midway (SIGKILL inside the 200th atomic write, after the data, before the rename).
out=$(SCAFFOLD_FAULT_KILL_AT_COMMIT=200 "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fk" 2>&1)
rc=$?
[ "$rc" -ne 0 ] && t_ok "fault injection killed the run (exit $rc)" || t_fail "fault injection killed the run"
partial=$(find "$d/fk" -name '*.npy' | wc -l)
debris=$(find "$d/fk" -name '.*.tmp.*' | wc -l)
[ "$partial" -gt 0 ] && [ "$partial" -lt 435 ] && t_ok "killed run left $partial finished instances" || t_fail "killed run state" "$partial"
[ "$debris" -ge 1 ] && t_ok "kill left a temporary file, never a partial final file" || t_fail "kill debris" "$debris"
find "$d/fk" -name '*.npy' > "$d/list"
"$PYTHON" -c "
import numpy, sys
for f in open(sys.argv[1]).read().split():
    a = numpy.load(f)
    assert a.shape == (128, 3) and a.dtype == numpy.float32, f
" "$d/list"
[ $? -eq 0 ] && t_ok "every file under a final name is complete" || t_fail "every file under a final name is complete"
find "$d/fk" -name '*.npy' -exec stat -c '%i %Y %n' {} + | sort > "$d/before"
out=$($MPIRUN -n 2 "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fk" 2>&1)
echo "$out" | grep -q "reused" && t_ok "rerun completes" || t_fail "rerun completes" "$out"
find "$d/fk" -name '*.npy' -exec stat -c '%i %Y %n' {} + | sort > "$d/after"
missing=$(comm -23 "$d/before" "$d/after" | wc -l)
[ "$missing" -eq 0 ] && t_ok "rerun did not rewrite finished files" || t_fail "rerun rewrote $missing finished files"
[ "$(find "$d/fk" -name '.*.tmp.*' | wc -l)" -eq 0 ] && t_ok "rerun removed temporary debris" || t_fail "rerun removed temporary debris"
[ "$(tree_hash "$d/fk")" = "$h1" ] && t_ok "restarted tree equals the clean tree" || t_fail "restarted tree equals the clean tree"

# Corrupt files are regenerated.
cp -r "$d/f1" "$d/fc"
inst=$(find "$d/fc" -name '000001_0007.npy')
truncate -s 100 "$inst"
echo "garbage" > "$d/fc/var0.15/seed42/3DIFS_param/000002.csv"
"$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fc" > "$d/log" 2>&1
[ "$(tree_hash "$d/fc")" = "$h1" ] && t_ok "corrupt class and instance regenerated" || t_fail "corrupt files regenerated" "$(cat "$d/log")"

# Independent jobs sharing one fresh library (job arrays, parallel sbatch jobs): started together,
# repeatedly, 1-rank and 2-rank jobs mixed, all succeed with the same bytes and leave no claim or
# temporary behind. (Before per-item claims, one job's debris removal deleted another's
# temporaries: "cannot write .../000000_0030.npy: No such file or directory".)
conc_ok=1
for rep in 1 2 3; do
    rm -rf "$d/fj"
    pids=""
    for j in 1 2 3 4; do
        "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fj" >"$d/j$j.log" 2>&1 & pids="$pids $!"
    done
    for j in 5 6; do
        $MPIRUN -n 2 "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fj" >"$d/j$j.log" 2>&1 & pids="$pids $!"
    done
    for p in $pids; do wait "$p" || { conc_ok=0; echo "job failed (round $rep): $(grep -h scaffold "$d"/j*.log | head -3)"; }; done
    [ "$(tree_hash "$d/fj")" = "$h1" ] || { conc_ok=0; echo "round $rep: tree differs"; }
    [ -z "$(find "$d/fj" -name '.*claim*' -o -name '.*.tmp.*')" ] || { conc_ok=0; echo "round $rep: left $(find "$d/fj" -name '.*claim*' -o -name '.*.tmp.*' | head -3)"; }
done
[ $conc_ok = 1 ] && t_ok "6 concurrent jobs on one fresh library, 3 times: all succeed, same tree, no debris" || t_fail "concurrent jobs on one library"

# A claim of a writer that is gone is taken over; one of a live writer is waited for.
host=$(hostname); boot=$(cat /proc/sys/kernel/random/boot_id)
start_of() { awk '{sub(/.*\) /, ""); print $20}' "/proc/$1/stat"; }
claim_rec() { printf 'scaffold-claim host=%s boot=%s pid=%s start=%s since=%s token=%016x\n' "$host" "$boot" "$1" "$2" "$(date +%s)" "$RANDOM"; }
cat0=var0.15/seed42/instances/np128/000000
rm -rf "$d/fl"; mkdir -p "$d/fl/$cat0"
sleep 60 & live=$!
claim_rec $live "$(start_of $live)" > "$d/fl/$cat0/.claim"
"$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fl" >"$d/fl.log" 2>&1 & job=$!
for _ in $(seq 1 40); do grep -q "waiting for fractal category 0" "$d/fl.log" && break; sleep 0.1; done
sleep 0.5
kill -0 $job 2>/dev/null && grep -q "waiting for fractal category 0 .*process $live on $host" "$d/fl.log" \
    && t_ok "a live writer's claim is waited for (with a message naming it)" || t_fail "live claim waited for" "$(cat "$d/fl.log")"
kill $live; wait $live 2>/dev/null
wait $job; rc=$?
[ $rc -eq 0 ] && grep -q "taking over the claim of a writer that is gone (process $live on $host is gone)" "$d/fl.log" \
    && [ "$(tree_hash "$d/fl")" = "$h1" ] && t_ok "... and taken over once its writer is gone: complete, same tree" || t_fail "claim taken over" "rc=$rc $(cat "$d/fl.log")"
# A dead writer's claim and temporaries in a partial category (a killed job of another host,
# not refreshed for longer than the stale age).
rm -rf "$d/fl"; cp -r "$d/f1" "$d/fl"
rm "$d/fl/$cat0"/000000_001*.npy
printf 'scaffold-claim host=elsewhere boot=x pid=4242 start=1 since=1 token=00000000000000aa\n' > "$d/fl/$cat0/.claim"
touch -d '1 hour ago' "$d/fl/$cat0/.claim"
echo partial > "$d/fl/$cat0/.000000_0011.npy.tmp.4242.0"
out=$(SCAFFOLD_CLAIM_STALE_SECONDS=600 "$SCAFFOLD" generate_fractals -c "$cfg" --fract-base-dir "$d/fl" 2>&1)
grep -q "not refreshed for" <<<"$out" && grep -q "10 new" <<<"$out" && [ "$(tree_hash "$d/fl")" = "$h1" ] \
    && t_ok "another host's stale claim and its temporaries: taken over, removed, completed" || t_fail "stale claim of another host" "$out"

# One library shared between scales (tests/train/tiny.yml, then problem_scale 5): a class
# accepted at 16 points diverges at 128 points as category 0; it must be replaced there (and
# recorded), never reported as an error, and the scale-4 instances stay untouched.
printf 'problem_scale: 4\nn_categories: 2\nfract_base_dir: %s/fs2\n' "$d" > "$d/s4.yml"
"$SCAFFOLD" generate_fractals -c "$d/s4.yml" >/dev/null 2>&1
h4=$(tree_hash "$d/fs2/var0.15/seed42/instances/np16")
out=$("$SCAFFOLD" generate_fractals -c "$d/s4.yml" --problem-scale 5 2>&1)
[ $? -eq 0 ] && t_ok "library shared by scales 4 and 5: scale 5 completes" || t_fail "library shared by scales" "$out"
grep -q "1 replaced at this scale" <<<"$out" && [ "$(wc -l < "$d/fs2/var0.15/seed42/instances/np128/rejected.csv")" -eq 1 ] \
    && t_ok "diverging class replaced at scale 5 and recorded" || t_fail "class replaced and recorded" "$out"
out=$("$SCAFFOLD" generate_fractals -c "$d/s4.yml" --problem-scale 5 2>&1)
grep -q "0 new, 290 reused, 0 stale" <<<"$out" && t_ok "scale 5 rerun reuses everything (the choice is recorded)" || t_fail "scale 5 rerun" "$out"
# The same replacement made by three jobs at once on a copy of the scale-4 library: one records
# it (rejected.csv is rewritten under its own claim), all succeed, the same tree.
rm -rf "$d/fs3"; "$SCAFFOLD" generate_fractals -c "$d/s4.yml" --fract-base-dir "$d/fs3" >/dev/null 2>&1
pids=""
for j in 1 2 3; do "$SCAFFOLD" generate_fractals -c "$d/s4.yml" --problem-scale 5 --fract-base-dir "$d/fs3" >/dev/null 2>&1 & pids="$pids $!"; done
ok=1; for p in $pids; do wait "$p" || ok=0; done
[ $ok = 1 ] && [ "$(tree_hash "$d/fs3")" = "$(tree_hash "$d/fs2")" ] && [ "$(wc -l < "$d/fs3/var0.15/seed42/instances/np128/rejected.csv")" -eq 1 ] \
    && t_ok "3 concurrent scale-5 jobs on a scale-4 library: one replacement recorded, the same tree" || t_fail "concurrent replacement"
out=$("$SCAFFOLD" generate_fractals -c "$d/s4.yml" 2>&1)
grep -q "0 new, 290 reused" <<<"$out" && [ "$(tree_hash "$d/fs2/var0.15/seed42/instances/np16")" = "$h4" ] \
    && t_ok "scale 4 still complete and unchanged" || t_fail "scale 4 after scale 5" "$out"
# Every category folder names the class file it came from, with that file's current SHA-256.
sources_ok() {
    local base=$1/var0.15/seed42 f name sha
    for f in "$base"/instances/${2:-np*}/*/.source; do
        read -r name sha < "$f"
        [ "$(sha256sum < "$base/3DIFS_param/$name" | cut -c1-64)" = "$sha" ] || return 1
    done
}
t_check "every category's .source matches its class file" sources_ok "$d/fs2"

# Instances are tied to the class file they came from: after a class file changes (edited,
# or deleted and regenerated differently), its category's instances are stale and redone.
cls=$d/fs2/var0.15/seed42/3DIFS_param/000001.csv
python3 - "$cls" <<'PY'
import sys
p = sys.argv[1]
rows = [l.split(",") for l in open(p).read().split("\n") if l]
rows[0][0] = "%.18e" % (float(rows[0][0]) * 0.97)
open(p, "w").write("\n".join(",".join(r) for r in rows) + "\n")
PY
old=$(sha256sum < "$d/fs2/var0.15/seed42/instances/np16/000001/000001_0003.npy")
out=$("$SCAFFOLD" generate_fractals -c "$d/s4.yml" 2>&1)
grep -q "145 new, 145 reused, 145 stale" <<<"$out" && t_ok "edited class: its 145 instances regenerated, the others reused" || t_fail "edited class" "$out"
[ "$(sha256sum < "$d/fs2/var0.15/seed42/instances/np16/000001/000001_0003.npy")" != "$old" ] \
    && t_ok "regenerated instance differs from the stale one" || t_fail "regenerated instance differs"
t_check "sources match after the edit" sources_ok "$d/fs2" np16

# Bad inputs: exit status 2 (config) with one clear message, nothing written.
cd "$d"
printf 'problem_scale: 5\nbogus_key: 1\n' > bad1.yml
t_expect_fail "unknown key" 2 "bad1.yml.*unknown config key.*bogus_key" "$SCAFFOLD" generate_fractals -c bad1.yml
printf 'problem_scale: [5, 6]\nseed: [1, 2]\n' > bad2.yml
t_expect_fail "list for single-valued keys names every key" 2 "bad2.yml.*'problem_scale', 'seed'.*sweeps" "$SCAFFOLD" generate_fractals -c bad2.yml
printf 'problem_scale: five\n' > bad3.yml
t_expect_fail "wrong type" 2 "bad3.yml: key 'problem_scale': expected an integer" "$SCAFFOLD" generate_fractals -c bad3.yml
printf 'n_categories: -1\n' > bad4.yml
t_expect_fail "n_categories: -1" 2 "bad4.yml: key 'n_categories': must be a positive integer" "$SCAFFOLD" generate_fractals -c bad4.yml
t_expect_fail "missing config file" 2 "cannot open config file nonexistent.yml" "$SCAFFOLD" generate_fractals -c nonexistent.yml
t_expect_fail "no config given" 2 "configuration file is required" "$SCAFFOLD" generate_fractals
t_expect_fail "bad flag value" 2 "--n-categories: expected an integer" "$SCAFFOLD" generate_fractals -c "$cfg" --n-categories x
t_expect_fail "unknown flag" 2 "unknown option '--frobnicate'" "$SCAFFOLD" generate_fractals -c "$cfg" --frobnicate 1
t_expect_fail "bad input agreed at -n 2" 2 "unknown config key" $MPIRUN -n 2 "$SCAFFOLD" generate_fractals -c bad1.yml
[ ! -e fractals ] && t_ok "nothing written on bad input" || t_fail "nothing written on bad input"
touch afile
printf 'problem_scale: 5\nn_categories: 2\nfract_base_dir: %s/afile/sub\n' "$d" > bad5.yml
t_expect_fail "unwritable fract_base_dir" 1 "cannot create directory .*afile" $MPIRUN -n 2 "$SCAFFOLD" generate_fractals -c bad5.yml
cd - >/dev/null
"$SCAFFOLD" generate_fractals --help | grep -q -- "--fract-base-dir" && t_ok "--help lists the flags" || t_fail "--help lists the flags"
rm -rf "$d"
t_report
