#!/usr/bin/env bash
# scaffold benchmark --profile: the region timer and the .cali format (C), the profile files of
# runs at 1 and 2 ranks read with caliper-reader, Hatchet and Thicket (the pinned test venv) and
# the Chrome trace JSON checked, the summary line's median minibatch time, `scaffold compare` on
# profiles with its guards, and bad inputs.
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=1
root=$PWD
t_cbin "$BUILD/tests/profile/test_prof"
# make test-asan / test-tsan: $BUILD is the sanitizer build; the unit test is what it checks
# (threads recording, the reader on damaged files).
if [ "${SCAFFOLD_TEST_SAN:-0}" = 1 ]; then
    t_report
    exit
fi
d=$(t_tmpdir)
cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml"
cd "$d"
lastrun() { ls -d "$d"/$1/*/ | tail -n 1; }

# 1. Runs at 1 and 2 ranks (the second with asynchronous checkpoints: a second thread).
out1=$("$SCAFFOLD" benchmark $cfg --base-run-dir r1 --profile 2>&1)
[ $? -eq 0 ] && t_ok "benchmark --profile, 1 rank" || t_fail "benchmark --profile, 1 rank" "$out1"
out2=$($MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir r2 --profile --checkpoint-interval 1 \
    --async-save 1 2>&1)
[ $? -eq 0 ] && t_ok "benchmark --profile, 2 ranks" || t_fail "benchmark --profile, 2 ranks" "$out2"
r1=$(lastrun r1) r2=$(lastrun r2)
for f in profile.cali profile-ranks.cali profile.json profile.txt; do
    [ -s "$r2/profile/$f" ] && t_ok "profile/$f written" || t_fail "profile/$f written" "$(ls "$r2/profile" 2>&1)"
done
ls -A "$r2/profile" | grep -q '\.tmp' && t_fail "no temporary files left" "$(ls -A "$r2/profile")" || t_ok "no temporary files left"
grep -qE '^benchmark: .*median minibatch time [0-9.]+ s; ' <<<"$out1" && t_ok "summary line: median minibatch time" \
    || t_fail "summary line: median minibatch time" "$(grep '^benchmark:' <<<"$out1")"
# (the summary line's ';' tells it from the report's line, wherever mpirun's output interleaves)
mb=$(grep -oE 'median minibatch time [0-9.]+ s;' <<<"$out2" | head -n 1 | sed -E 's/[^0-9.]*([0-9.]+) s;/\1/')
grep -q "median minibatch time $mb s" "$r2/profile/profile.txt" && t_ok "report and summary line agree ($mb s)" \
    || t_fail "report and summary line agree" "summary [$mb], report: $(head -n 1 "$r2/profile/profile.txt")"
# the report: on stderr at the end, rank 0 only; the whole tree in profile.txt
[ "$(grep -c '^scaffold profile: 2 rank(s)' <<<"$out2")" -eq 1 ] && t_ok "report printed once (rank 0)" || t_fail "report printed once" "$out2"
for pat in '^ *batch_loop ' '^ *minibatch ' 'layer pass' 'conv3d_bwd_weight' 'U-Net block' 'MPI_Allreduce' 'hot spots'; do
    grep -qE "$pat" "$r2/profile/profile.txt" && t_ok "profile.txt: $pat" || t_fail "profile.txt: $pat"
done
cut -d, -f1-9 "$r1/train_stats.csv" | head -n 1 | grep -q '^epoch,epoch_loss,overall_loss,val_loss_epoch,val_loss_avg,train_dice,val_dice,epoch_duration,optimizer_steps$' \
    && [ "$(head -n 1 "$r1/train_stats.csv" | tr ',' '\n' | wc -l)" -eq 10 ] \
    && t_ok "train_stats.csv unchanged (upstream's 10 columns)" || t_fail "train_stats.csv unchanged" "$(head -n 1 "$r1/train_stats.csv")"

# 2. Off by default; SCAFFOLD_PROFILE as upstream's PROFILE_TORCH; --profile-format subsets.
out=$("$SCAFFOLD" benchmark $cfg --base-run-dir r0 --epochs 1 2>&1)
[ ! -e "$(lastrun r0)/profile" ] && ! grep -q '^scaffold profile' <<<"$out" && t_ok "no profile without --profile" \
    || t_fail "no profile without --profile" "$out"
grep -qE '^benchmark: .*median minibatch time [0-9.]+ s' <<<"$out" && t_ok "median minibatch time without --profile" || t_fail "median minibatch time without --profile"
SCAFFOLD_PROFILE=Yes "$SCAFFOLD" benchmark $cfg --base-run-dir re --epochs 1 --profile-format text >/dev/null 2>&1
[ "$(ls "$(lastrun re)/profile")" = "profile.txt" ] && t_ok "SCAFFOLD_PROFILE=Yes, --profile-format text: profile.txt only" \
    || t_fail "SCAFFOLD_PROFILE=Yes, text only" "$(ls "$(lastrun re)/profile" 2>&1)"
SCAFFOLD_PROFILE=off "$SCAFFOLD" benchmark $cfg --base-run-dir roff --epochs 1 >/dev/null 2>&1
[ ! -e "$(lastrun roff)/profile" ] && t_ok "SCAFFOLD_PROFILE=off: no profile" || t_fail "SCAFFOLD_PROFILE=off"
"$SCAFFOLD" benchmark $cfg --base-run-dir rc --epochs 1 --profile --profile-format perfetto,cali \
    --profile-dir "$d/pdir" >/dev/null 2>&1
[ "$(ls "$d/pdir" | tr '\n' ' ')" = "profile-ranks.cali profile.cali profile.json " ] && [ ! -e "$(lastrun rc)/profile" ] \
    && t_ok "--profile-dir, --profile-format perfetto,cali" || t_fail "--profile-dir and formats" "$(ls "$d/pdir" 2>&1)"

# SCAFFOLD_PROFILE on rank 0 only (an MPMD launch): rank 0's switches hold on every rank, no hang.
out=$(SCAFFOLD_PROFILE=1 timeout 120 $MPIRUN -n 1 "$SCAFFOLD" benchmark $cfg --base-run-dir rm --epochs 1 : \
    -n 1 env -u SCAFFOLD_PROFILE "$SCAFFOLD" benchmark $cfg --base-run-dir rm --epochs 1 2>&1)
[ $? -eq 0 ] && grep -q '^scaffold profile: 2 rank(s)' <<<"$out" && t_ok "SCAFFOLD_PROFILE on rank 0 only: both ranks profiled" \
    || t_fail "SCAFFOLD_PROFILE on rank 0 only" "$out"

# 3. caliper-reader, Hatchet, Thicket and the JSON check on the runs at 1 and 2 ranks.
VPY=$(cd "$root" && t_venv_python)
if [ -z "$VPY" ]; then
    echo "SKIP caliper-reader/Hatchet/Thicket checks: no test venv (bash tools/setup.sh --test)"
else
    out=$("$VPY" "$root/tests/profile/check_profile.py" "$r1" "$r2" 2>&1)
    rc=$?
    grep -E '^(ok|FAIL)' <<<"$out"
    p=$(grep -c '^ok' <<<"$out") f=$(grep -c '^FAIL' <<<"$out")
    T_PASSED=$((T_PASSED + p)); T_FAILED=$((T_FAILED + f))
    [ $rc -ne 0 ] && [ "$f" -eq 0 ] && t_fail "check_profile.py" "$(tail -n 20 <<<"$out")"
fi

# 4. scaffold compare on profiles: guards and messages.
out=$("$SCAFFOLD" compare "$r1" -- "$r1/profile/profile.cali" 2>&1)
grep -q '^work: same' <<<"$out" && grep -q '^verdict: inconclusive' <<<"$out" && t_ok "compare: a profile with itself is within the noise" \
    || t_fail "compare: a profile with itself" "$out"
out=$("$SCAFFOLD" compare "$r1" -- "$r2" 2>&1)
grep -q '^work: same (epochs, training and validation samples' <<<"$out" && t_ok "compare: 1 vs 2 ranks, same samples" || t_fail "compare 1 vs 2 ranks" "$out"
grep -q '^regions that changed' <<<"$out" && t_ok "compare: regions that changed listed" || t_fail "compare: regions listed" "$out"
"$SCAFFOLD" benchmark $cfg --base-run-dir rless --epochs 1 --profile --profile-format cali >/dev/null 2>&1
out=$("$SCAFFOLD" compare "$r1" -- "$(lastrun rless)" 2>&1)
grep -q '^verdict: reject (does less, not faster)' <<<"$out" && grep -q 'epochs 2 -> 1' <<<"$out" \
    && t_ok "compare: a candidate with fewer epochs does less" || t_fail "compare: does less" "$out"
"$SCAFFOLD" benchmark $cfg --base-run-dir rwide --epochs 2 --unet-base-channels 16 --profile --profile-format cali >/dev/null 2>&1
out=$("$SCAFFOLD" compare "$r1" -- "$(lastrun rwide)" 2>&1)
grep -q '^workload: different (unet_base_channels 8 -> 16)' <<<"$out" && grep -q '^verdict: inconclusive' <<<"$out" \
    && t_ok "compare: a different workload gets no verdict" || t_fail "compare: different workload" "$out"
out=$("$SCAFFOLD" compare --json "$r1" "$r1" -- "$r2" 2>&1)
"$PYTHON" -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["kind"] == "profiles" and len(d["baseline"]) == 2 and d["verdict"] and isinstance(d["changed_regions"], list) else 1)' "$out" \
    && t_ok "compare --json on profiles, replicates" || t_fail "compare --json" "$out"

# Caliper's own layouts: per-rank exclusive times (summed up the paths) against a spot file.
cp "$root/tests/fuzz/corpus/cali/exclusive_per_rank" "$d/ranks.cali"
cp "$root/tests/fuzz/corpus/cali/caliper_spot_style" "$d/spot.cali"
out=$("$SCAFFOLD" compare --json "$d/ranks.cali" -- "$d/spot.cali" 2>&1)
"$PYTHON" - "$out" <<'PY' && t_ok "compare: Caliper's per-rank and spot layouts" || t_fail "compare: Caliper layouts" "$out"
import json, sys
d = json.loads(sys.argv[1])
ch = {c["region"]: c for c in d["changed_regions"]}
assert not d["work_known"] and d["time_basis"] == "whole run"
assert abs(ch["main"]["baseline"] - 2.75) < 1e-9 and abs(ch["main"]["candidate"] - 10) < 1e-9
assert ch["main/solve,step"]["status"] == "gone" and ch["main/cycle/MPI_Allreduce"]["status"] == "new"
PY

# 5. Bad inputs: one clear message, exit 2, nothing half-written.
printf 'not a cali file\n' >"$d/bad.cali"
t_expect_fail "compare: a corrupt .cali names the file and the line" 2 "bad.cali: line 1 is not a valid \.cali record" \
    "$SCAFFOLD" compare "$d/bad.cali" -- "$r1"
head -c 2000 "$r1/profile/profile.cali" >"$d/trunc.cali"
t_expect_fail "compare: a truncated .cali" 2 "trunc.cali: (line [0-9]+ is not a valid|not a complete)" \
    "$SCAFFOLD" compare "$r1" -- "$d/trunc.cali"
t_expect_fail "compare: profiles and traces mixed" 2 "not a mix" "$SCAFFOLD" compare "$r1" -- "$d"
t_expect_fail "--profile-format with an unknown word" 2 "--profile-format cali,json: 'json' is not a profile format" \
    "$SCAFFOLD" benchmark $cfg --base-run-dir rbad --profile --profile-format cali,json
t_expect_fail "--profile-format empty word" 2 "'' is not a profile format" \
    "$SCAFFOLD" benchmark $cfg --base-run-dir rbad --profile --profile-format cali,
touch "$d/afile"
t_expect_fail "--profile-dir that cannot be created (2 ranks agree)" 2 "--profile-dir: cannot create directory $d/afile/p" \
    $MPIRUN -n 2 "$SCAFFOLD" benchmark $cfg --base-run-dir rbad --profile --profile-dir "$d/afile/p"
[ ! -e "$d/rbad" ] && t_ok "bad profile options: refused before anything is written" || t_fail "nothing written" "$(ls -R "$d/rbad")"

cd "$root" && rm -rf "$d"
t_report
