#!/usr/bin/env bash
# scaffold tune: the pieces with known answers (C), bad inputs that write nothing, a tune with
# known verdicts on the tiny configuration (a slow read injected through the fault table makes
# loader workers help; workers 0 then hurts; a do-less knob is guard-rejected; an identical
# setting -- data_store: files, the configuration's own value -- is inconclusive), reached by a
# tune that is killed in its second trial and resumed (the known verdicts are the "same
# verdicts" a resume must give), the outputs (tune.json, lever_catalog.yaml, best.yml, tune.svg)
# and report.html in headless Chromium.
cd "$(dirname "$0")/../.." && source tests/lib.sh
d=$(t_tmpdir)
trap '[ -n "$TUNE_KEEP" ] || rm -rf "$d"' EXIT
root=$PWD
t_cbin "$BUILD/tests/tune/test_tune" "$d"
# The same unit tests under ASan/UBSan with leak detection, built here from the sources they
# need (one compiler call, -O0: half the compile time of -O1, the same checks), so the default
# test run catches memory errors in the levers parser, the verdicts and the journal too.
mkdir -p "$d/asan"
cc=mpicc
[ "${SCAFFOLD_MPI:-openmpi}" = mpich ] && cc=mpicc.mpich
if $cc -std=c11 -D_GNU_SOURCE -O0 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer -Isrc -Iinclude -Itests tests/tune/test_tune.c src/tune/*.c src/analyze/*.c \
    src/core/*.c src/train/runfolder.c src/mpi/dist.c -o "$d/test_tune_asan" -lyaml -lz -lm -lpthread 2>"$d/asan.err"; then
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 t_cbin "$d/test_tune_asan" "$d/asan"
else
    t_fail "ASan/UBSan build of test_tune" "$(head -c 400 "$d/asan.err")"
fi

cfg="-c $root/configs/benchmark_default.yml -c $root/tests/train/tiny.yml --dataset-dir $d/ds --fract-base-dir $d/fr"
# Sleeps dominate these runs (8 reads of 80 ms per epoch): loader workers overlap them. Four
# epochs, so that the figure of merit averages three steady epochs.
export SCAFFOLD_FAULT_SLOW_READ=80 OMP_NUM_THREADS=1
cat >"$d/levers.yml" <<'YML'
levers:
  - name: data_store
    values: [files]
  - name: dataloader_num_workers
    values: [4, 0]
  - name: env:SCAFFOLD_FAULT_SKIP_BATCHES
    values: ["3"]
YML
# A 25% band floor: on a shared 2-core machine under load, identical runs differ by up to ~20%;
# the effects tested here are +150% (workers over slow reads) and -60% (back to none).
# Trials are sequential A-B pairs: 3 at least (a verdict needs 3), here at most 3.
targs="$cfg --epochs 4 --dataloader-num-workers 0 --levers $d/levers.yml --repeats 2 --max-repeats 3 --noise 25"

# --- bad input: one message, exit 2, nothing written
printf 'levers:\n  - name: problem_scale\n    values: [5]\n' >"$d/workload.yml"
t_expect_fail "workload key as a lever" 2 "workload.yml: levers entry 1: lever 'problem_scale' defines the workload" \
    "$SCAFFOLD" tune $cfg --levers "$d/workload.yml" --out "$d/o-bad1"
t_check "  ... and nothing written" test ! -e "$d/o-bad1"
printf 'levers:\n  - name: dataloader_num_workers\n    values: [two]\n' >"$d/badval.yml"
t_expect_fail "bad lever value" 2 "badval.yml: levers entry 1: lever 'dataloader_num_workers' value 'two'" \
    "$SCAFFOLD" tune $cfg --levers "$d/badval.yml" --out "$d/o-bad2"
printf 'levers:\n  - name: async_save\n    values: [1\n' >"$d/syntax.yml"
t_expect_fail "levers file syntax error" 2 "syntax.yml:[0-9]+:[0-9]+: YAML syntax error" \
    "$SCAFFOLD" tune $cfg --levers "$d/syntax.yml" --out "$d/o-bad3"
t_expect_fail "missing levers file" 2 "nope.yml" "$SCAFFOLD" tune $cfg --levers "$d/nope.yml" --out "$d/o-bad4"
t_expect_fail "no --out" 2 "--out DIR is required" "$SCAFFOLD" tune $cfg --levers "$d/levers.yml"
t_expect_fail "bad objective" 2 "objective" "$SCAFFOLD" tune $cfg --objective speed --out "$d/o-bad5"
t_expect_fail "--resume without a tune" 2 "nothing to resume" "$SCAFFOLD" tune $targs --out "$d/o-bad6" --resume
t_check "  ... nothing written for any of them" test -z "$(ls -d "$d"/o-bad* 2>/dev/null)"

# --- a tune with known answers, killed in its second trial and resumed: a killed tune loses at
# most the trial in flight, and the resumed tune ends with the known verdicts
"$SCAFFOLD" tune $targs --out "$d/t1" >"$d/t1a.out" 2>"$d/t1a.err" &
pid=$!
for _ in $(seq 1 600); do
    grep -q "^done	t01" "$d/t1/journal.tsv" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
done
# Kill it early in t02's first run, with its benchmark running.
for _ in $(seq 1 100); do pgrep -f "benchmark .*$d/t1/trials/t02/" >/dev/null && break; sleep 0.1; done
sleep 0.3
pgrep -f "benchmark .*$d/t1/trials/t02/" >/dev/null && running=1 || running=0
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
n_done=$(grep -c "^done" "$d/t1/journal.tsv" 2>/dev/null)
[ "${n_done:-0}" -ge 3 ] && ! grep -q "^done	t02" "$d/t1/journal.tsv" && ! grep -q "trials: " "$d/t1a.out" &&
    t_ok "tune killed in its second trial ($n_done trials finished)" || t_fail "kill in a trial" "done=$n_done"
# The run in flight dies with the tuner (its benchmark used to live on, reparented to init,
# beside the resumed tune): nothing of trial t02 runs 3 s later.
for _ in $(seq 1 30); do pgrep -f "$d/t1/trials/t02/" >/dev/null || break; sleep 0.1; done
left=$(pgrep -f "$d/t1/trials/t02/" | wc -l)
[ "$running" = 1 ] && [ "$left" -eq 0 ] && grep -q "^child	t02	" "$d/t1/journal.tsv" &&
    t_ok "the run in flight died with the tuner (and was journaled as started)" ||
    t_fail "children die with the tuner" "running=$running left=$left: $(pgrep -af "$d/t1/trials/" | head -3)"
pkill -9 -f "$d/t1/trials/" 2>/dev/null
grep -q "^tune: \[[0-9]*/[0-9]*\] t01: run B2/3" "$d/t1a.err" && grep -q "ETA" "$d/t1a.err" &&
    t_ok "progress lines (trial i/N, ETA)" || t_fail "progress lines" "$(head -5 "$d/t1a.err")"
# Something a killed tune left running (here a stand-in in a session of its own, journaled as an
# unfinished run): --resume ends it before it starts.
setsid sleep 300 & stray=$!
sleep 0.2
printf 'child\tt02\tB\t7\t%s\t%s\n' "$(ps -o sid= -p $stray | tr -d ' ')" \
    "$(awk '{sub(/.*\) /, ""); print $20}' /proc/$stray/stat)" >> "$d/t1/journal.tsv"
"$SCAFFOLD" tune $targs --out "$d/t1" --resume >"$d/t1.out" 2>"$d/t1.err"
rc=$?
t_check "--resume runs to the end (exit $rc)" test $rc -eq 0
kill -0 $stray 2>/dev/null && { t_fail "--resume ends what a killed tune left" "$(grep 'resume' "$d/t1.err")"; kill -9 $stray; } ||
    { grep -q "of run t02 B8 of the killed tune still ran (session" "$d/t1.err" && t_ok "--resume ends what a killed tune left running (named)" ||
      t_fail "--resume names what it ended" "$(head -3 "$d/t1.err")"; }
wait $stray 2>/dev/null
grep -q "resuming" "$d/t1.err" && ! grep -q "baseline: run A1" "$d/t1.err" && ! grep -q "t01: run" "$d/t1.err" &&
    t_ok "--resume reuses the finished trials (no baseline or t01 rerun)" || t_fail "resume reuse" "$(head -3 "$d/t1.err")"
grep -q "^tune: dataloader_num_workers=4: throughput .* accept; final paired check, 3 pairs); 4 trials: 1 accepted, 1 reverted, 1 guard-rejected, 1 inconclusive" "$d/t1.out" &&
    t_ok "summary line" || t_fail "summary line" "$(cat "$d/t1.out"; tail -5 "$d/t1.err")"
# Every noise verdict rests on at least 3 pairs; the do-less one (firm) stopped after one.
t_check "pairs per trial: 3 for noise verdicts, 1 for a firm guard" "$PYTHON" - "$d/t1/tune.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = {t["lever"] + "=" + t["value"]: (t["pairs"], len(t["candidate_runs"])) for t in r["trials"]}
ok = p["dataloader_num_workers=4"] == (3, 3) and p["data_store=files"] == (3, 3) and p["env:SCAFFOLD_FAULT_SKIP_BATCHES=3"][1] == 1
print(p) if not ok else None
sys.exit(0 if ok else 1)
PY
verdicts() { "$PYTHON" -c "
import json,sys
r=json.load(open(sys.argv[1]))
print(' '.join('%s=%s:%s%s' % (t['lever'],t['value'],t['verdict'],(':'+t['guard']) if t['guard'] else '') for t in r['trials']))" "$1"; }
v1=$(verdicts "$d/t1/tune.json")
want="data_store=files:inconclusive dataloader_num_workers=4:accept dataloader_num_workers=0:revert env:SCAFFOLD_FAULT_SKIP_BATCHES=3:guard-reject:does-less"
[ "$v1" = "$want" ] && t_ok "verdicts after --resume: helps -> accept, hurts -> revert, do-less -> guard, same -> inconclusive" ||
    t_fail "verdicts" "got '$v1'"
t_check "tune.json: FOM definition, baseline, runs with host/CPU/layout/start, discriminator, best" \
    "$PYTHON" - "$d/t1/tune.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
runs = [x for t in r["trials"] for x in t["incumbent_runs"] + t["candidate_runs"]] + r["baseline"]["runs"]
checks = {
    "objective and FOM definition": r["objective"] == "throughput" and "steady epochs" in r["fom"]["definition"],
    "baseline FOM, median, band": len(r["baseline"]["fom"]) == 2 and r["baseline"]["fom_median"] > 0 and r["baseline"]["fom_band"] >= 0.25,
    "every run: host, CPU, layout, start, folders": all(x["host"] and x["cpu"] and x["layout"] == "1x1" and x["started"].endswith("Z") and x["run_dir"] and x["trace_dir"] for x in runs),
    # (runs_busy counts this invocation's runs, not those the resume took from the journal)
    "every run: its threads' CPU wait; busy runs counted": all(isinstance(x["cpu_wait"], (int, float)) and 0 <= x["cpu_wait"] < 1 for x in runs)
        and 0 <= r["runs_busy"] <= sum(1 for x in runs if x["cpu_wait"] > 0.10),
    "discriminator class": r["discriminator"]["class"] == "input-bound" and r["discriminator"]["loader_wait_share"] > 0.3,
    "best: workers 4, gain": r["best"]["overrides"] == {"dataloader_num_workers": "4"} and r["best"]["gain"] > 0.3,
    "analysis: 12 checklist verdicts": len(r["analysis"]["baseline"]["checklist"]) == 12,
    "trials: FOM and reason": all(t["fom_median"] > 0 and t["reason"] for t in r["trials"]),
}
bad = [k for k, v in checks.items() if not v]
if bad:
    print("failed:", bad, r["discriminator"], r["best"]["overrides"], r["best"]["gain"])
ok = not bad
sys.exit(0 if ok else 1)
PY
t_check "lever_catalog.yaml: the contract's shape" "$PYTHON" - "$d/t1/lever_catalog.yaml" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
ok = c["version"] == 1 and c["objective"] == "throughput" and len(c["levers"]) == 4
for l in c["levers"]:
    ok = ok and isinstance(l["name"], str) and isinstance(l["value"], str) and 1 <= l["dimension"] <= 12
    ok = ok and l["verdict"] in ("accept", "revert", "guard-reject", "inconclusive", "blocked") and l["reason"]
ok = ok and [l["guard"] for l in c["levers"]][3] == "does-less" and c["levers"][1]["gain"] > 0 and c["levers"][1]["band"] >= 0.1
sys.exit(0 if ok else 1)
PY
out=$("$SCAFFOLD" benchmark $cfg -c "$d/t1/best.yml" --epochs 1 --base-run-dir "$d/bestrun" 2>&1)
[ $? -eq 0 ] && grep -q "dataloader_num_workers: 4" "$d/t1/best.yml" && t_ok "best.yml usable as -c best.yml" ||
    t_fail "best.yml" "$(cat "$d/t1/best.yml"; tail -2 <<<"$out")"

t_check "tune.svg: the FOM-per-trial chart alone, well-formed, one dot per trial, labelled" "$PYTHON" - "$d/t1/tune.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
text = " ".join("".join(t.itertext()) for t in root.iter(ns + "text"))
dots = [c for c in root.iter(ns + "circle") if c.find(ns + "title") is not None]
ok = root.tag == ns + "svg" and len(dots) == 5 and "t02 dataloader_num_workers=4" in text and "best vs baseline" in text
sys.exit(0 if ok else 1)
PY

t_expect_fail "--resume with other arguments" 2 "other settings" \
    "$SCAFFOLD" tune $targs --repeats 3 --out "$d/t1" --resume
t_expect_fail "an existing tune without --resume" 2 "already holds a tune" \
    "$SCAFFOLD" tune $targs --out "$d/t1"

# --- the time-to-target objective (a low target so that the runs converge in a few epochs)
printf 'levers:\n  - name: dataloader_num_workers\n    values: [4]\n' >"$d/ttt.yml"
"$SCAFFOLD" tune $cfg --target-dice 0.02 --epochs 6 --dataloader-num-workers 0 --levers "$d/ttt.yml" \
    --objective time-to-target --repeats 1 --max-repeats 3 --no-discriminator --noise 10 --out "$d/t3" >"$d/t3.out" 2>"$d/t3.err"
rc=$?
t_check "time-to-target objective: converged runs, FOM = time to target (exit $rc)" "$PYTHON" - "$d/t3/tune.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b = r["baseline"]["runs"][0]
t = r["trials"][0]
ok = (r["objective"] == "time-to-target" and not r["fom"]["higher_is_better"] and b["converged"]
      and b["fom"] == b["time_to_target_s"] > 0 and b["throughput_samples_per_s"] > 0
      and t["verdict"] in ("accept", "revert", "inconclusive"))
sys.exit(0 if ok else 1)
PY

# --- report.html in headless Chromium
CHROME=$(t_chrome)
if [ -z "$CHROME" ]; then
    t_fail "report.html in chromium" "chromium is not installed (tools/packages.d/tune.test.txt)"
else
    t_chrome_render "$CHROME" "file://$d/t1/report.html" "$d"
    t_check "report.html: chromium screenshot is a real page" t_png_page "$d/shot.png"
    t_chrome_console "report.html loads without console errors" "$d/chrome.out"
    t_check "report.html: trial table, FOM chart with bands, checklist and proposals" "$PYTHON" -c "
import sys,re
h=open(sys.argv[1]).read()
t=re.sub(r'<[^>]+>',' ',h)
need=['FOM per trial','Trials','dataloader_num_workers','guard-reject','does-less','inconclusive','12-dimension checklist','Baseline','Best setting','noise band','input-bound']
miss=[n for n in need if n not in t]
print('missing:',miss) if miss else None
sys.exit(1 if miss or h.count('<svg')!=1 or h.count('<circle')<8 else 0)" "$d/dom.html"
fi
t_report
