#!/usr/bin/env bash
# dataset: unit tests, numpy checks of generated volumes, shard layouts, cache reuse and
# invalidation, kill/restart, corrupt files, loader (workers, ranks, TSan), bad input.
cd "$(dirname "$0")/../.." && source tests/lib.sh
d=$(t_tmpdir)
trap 'rm -rf "$d"' EXIT
cfg=$d/small.yml
printf 'problem_scale: 5\nn_categories: 3\nn_instances_used_per_fractal: 12\nfract_base_dir: %s/f\ndataset_dir: %s/ds\n' "$d" "$d" > "$cfg"
inst=$d/f/var0.15/seed42/instances/np128
T="$BUILD/tests/dataset"
tree_hash() { (cd "$1" && find . -type f ! -name meta.yaml | sort | xargs sha256sum | sha256sum | cut -c1-16); }
snap() { find "$1" -type f -exec stat -c '%i %Y.%y %s %n' {} + | sort; }
visible() { find "$1" -mindepth 2 -maxdepth 2 ! -name '.*' | wc -l; }
gen() { $MPIRUN -n "$1" "$SCAFFOLD" generate_dataset -c "$cfg" "${@:2}" 2>&1; }
# the dataset folder from generate_dataset's closing line (stdout): not from the log's
# "generating ... in STAGING" line (stderr), which mpirun may forward after it
dir_of() { sed -n 's/^generate_dataset: .* in \(\/[^:]*\)\(: .*\)\{0,1\}$/\1/p' <<<"$1" | tail -n 1; }

san_build() { # san_build SAN: objects once, then both test binaries, in $d/san-<SAN>/
    local o=$d/san-${1//,/-} root=$PWD
    mkdir -p "$o" && (cd "$o" && for f in "$root"/src/dataset/*.c "$root"/src/core/*.c "$root"/src/mpi/dist.c "$root"/src/fractal/*.c "$root"/src/tracehooks/*.c; do
        mpicc -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -ffp-contract=off -fsanitize="$1" -I"$root/src" -I"$root/include" -c "$f" -o "$(basename "${f%.c}").$(basename "$(dirname "$f")").o" || exit 1
    done
    for t in test_dataset test_loader; do
        mpicc -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize="$1" -I"$root/src" -I"$root/include" -I"$root/tests" "$root/tests/dataset/$t.c" ./*.o -o "$t" -lyaml -lz -lm -lpthread -ldl || exit 1
    done) >"$o/log" 2>&1
}
if [ "${SCAFFOLD_TEST_SAN:-0}" = 1 ]; then
    # make test-asan / test-tsan: $BUILD already holds sanitizer builds; run the unit tests only
    # (Open MPI itself is not instrumented).
    t_cbin "$T/test_dataset"
    t_cbin "$T/test_loader"
    t_report
    exit
fi
# Own sanitizer builds (a stale build-thread/ binary could test old code), in the background.
( san_build thread; san_build address,undefined ) &
san_pid=$!

# ---- unit tests (SHA-256, config_id, layout, samplers, plan, voxelisation, CE) and loader
t_cbin "$T/test_dataset"
t_cbin "$T/test_loader"
# CE-weight sample vs torch.linspace(...).long() itself.
"$PYTHON" - "$T/test_dataset" <<'PY' && t_ok "CE indices equal torch.linspace().long() (1000+ cases)" || t_fail "CE indices vs torch"
import math, subprocess, sys, torch
cases = [(n, f) for n in list(range(1, 200)) + [240, 1000, 4321] for f in (0.1, 0.05, 0.3, 0.77, 1.0, 0.013)]
got = subprocess.run([sys.argv[1], "ce"], input="".join(f"{n} {f}\n" for n, f in cases),
                     capture_output=True, text=True).stdout.split()
want = [",".join(map(str, torch.linspace(0, n - 1, min(max(math.ceil(n * f), 1), n)).long().tolist())) for n, f in cases]
bad = [c for c, g, w in zip(cases, got, want) if g != w]
print("mismatches:", bad[:5]) if bad else None
sys.exit(len(got) != len(want) or bool(bad))
PY
for n in 2 4; do
    t_cbin $MPIRUN -n $n "$T/test_loader" mpi
done

# ---- generation at 2 ranks, numpy checks (exact float32 voxelisation re-implemented in numpy)
"$SCAFFOLD" generate_fractals -c "$cfg" >/dev/null 2>&1 || t_fail "generate_fractals"
libhash=$(tree_hash "$d/f")
out=$(gen 2)
full=$(dir_of "$out")
if [ -d "$full" ] && grep -q "12 volumes generated" <<<"$out" && grep -qE '[0-9.]+ MB/s' <<<"$out"; then
    t_ok "generate_dataset -n 2 (summary line)"
else
    t_fail "generate_dataset -n 2" "$out"
fi
t_check "numpy: shapes, dtypes, masks, colours, split, exact voxelisation" "$PYTHON" tests/dataset/check_dataset.py full "$full" "$inst" 3 30 3
[ "$(basename "$full")" != "${full##*__scaffold-}" ] && [[ "$full" == */ds/*/*__scaffold-* ]] && t_ok "cache path <dataset_dir>/<config_id>/<ts>__<version>" || t_fail "cache path" "$full"
[ "$(tree_hash "$d/f")" = "$libhash" ] && t_ok "the instance library is not modified" || t_fail "instance library modified"

# Same bytes for 1 and 3 ranks.
o1=$(gen 1 --dataset-dir "$d/ds1"); o3=$(gen 3 --dataset-dir "$d/ds3")
h2=$(tree_hash "$full"); h1=$(tree_hash "$(dir_of "$o1")"); h3=$(tree_hash "$(dir_of "$o3")")
[ "$h1" = "$h2" ] && [ "$h3" = "$h2" ] && t_ok "identical dataset for 1, 2 and 3 ranks ($h2)" || t_fail "rank-count independence" "$h1 $h2 $h3"

# ---- cache: reuse (nothing rewritten), include keys, non-include keys
snap "$d/ds" > "$d/before"
out=$(gen 2 --epochs 3 --local-batch-size 2)
snap "$d/ds" > "$d/after"
grep -q "reused" <<<"$out" && [ "$(dir_of "$out")" = "$full" ] && t_ok "second run reuses the cache (non-include keys ignored)" || t_fail "reuse" "$out"
cmp -s "$d/before" "$d/after" && t_ok "reuse rewrote no file" || t_fail "reuse rewrote files" "$(diff "$d/before" "$d/after" | head -5)"
id0=$(basename "$(dirname "$full")")
out=$(gen 1 --val-split 50)
id1=$(basename "$(dirname "$(dir_of "$out")")")
[ -n "$id1" ] && [ "$id1" != "$id0" ] && grep -q generated <<<"$out" && t_ok "changing an include key gives a new config_id ($id0 -> $id1)" || t_fail "include key" "$out"
out=$(gen 1 --datagen-from-scratch 1)
[ "$(dir_of "$out")" != "$full" ] && grep -q generated <<<"$out" && t_ok "datagen_from_scratch regenerates" || t_fail "datagen_from_scratch" "$out"
newest=$(dir_of "$out")
out=$(gen 1)
[ "$(dir_of "$out")" = "$newest" ] && t_ok "reuse picks the newest matching dataset" || t_fail "newest" "$out"
"$PYTHON" -c "
import hashlib, json, sys
s = {'dataset_format_version': 5, 'n_categories': 3, 'n_instances_used_per_fractal': 12, 'problem_scale': 5, 'seed': 42,
     'variance_threshold': 0.15, 'n_fracts_per_vol': 3, 'val_split': 30, 'dc_num_shards': [1, 1, 1], 'dc_shard_dims': [2, 3, 4]}
sys.exit(hashlib.sha256(json.dumps(s, separators=(',', ':'), sort_keys=True).encode()).hexdigest()[:12] != sys.argv[1])" "$id0" \
    && t_ok "config_id = sha256(json.dumps(include keys))[:12]" || t_fail "config_id vs Python"

# ---- physical shards: [2,1,1] and [2,2,1] reassemble to the unsharded volumes byte for byte
o211=$(gen 2 --dc-num-shards 2 1 1); s211=$(dir_of "$o211")
o221=$(gen 2 --dc-num-shards 2 2 1); s221=$(dir_of "$o221")
t_check "[2,1,1] shards concatenate to the unsharded dataset" "$PYTHON" tests/dataset/check_dataset.py concat "$s211" "$full"
t_check "[2,2,1] shards concatenate to the unsharded dataset" "$PYTHON" tests/dataset/check_dataset.py concat "$s221" "$full"
[ -f "$s221/volumes/training/0_shard000003.npy" ] && [ ! -e "$s221/volumes/training/0_shard000004.npy" ] && t_ok "[2,2,1]: files <vol>_shard000000..3" || t_fail "shard file names"
out=$(gen 1 --dc-num-shards 1 2 1 --dc-shard-dims 3 2 4)
[ "$(dir_of "$out")" = "$s211" ] && t_ok "layout canonicalised: [1,2,1] over [3,2,4] reuses [2,1,1] over [2,3,4]" || t_fail "canonical layout" "$out"

# ---- loader over files, collective open, per-rank shard selection
t_cbin $MPIRUN -n 2 "$T/test_loader" files "$full" -c "$cfg" --local-batch-size 2 --dataloader-num-workers 2
t_cbin $MPIRUN -n 2 "$T/test_loader" files "$s211" -c "$cfg" --dc-num-shards 1 2 1 --dc-shard-dims 3 2 4 --dataloader-num-workers 1
t_cbin $MPIRUN -n 4 "$T/test_loader" files "$s221" -c "$cfg" --dc-num-shards 2 2 1 --local-batch-size 3 --dataloader-num-workers 0
if [ -f "$BUILD/libscaffold_trace.so" ]; then  # per-sample "item" events from the file source
    "$SCAFFOLD" trace --out "$d/tr" -- "$T/test_loader" files "$full" -c "$cfg" --dataloader-num-workers 2 >"$d/tr.log" 2>&1
    n=$(zcat "$d"/tr/*.pfw.gz 2>/dev/null | grep -c '"name":"item","cat":"data"')
    [ "$n" -eq 12 ] && t_ok "traced loader: one dftracer item event per sample read (12)" || t_fail "trace item events" "$n: $(tail -n 5 "$d/tr.log")"
fi
t_expect_fail "layout mismatch is refused" 1 "does not match the config's dc_num_shards" $MPIRUN -n 2 "$T/test_loader" files "$s211" -c "$cfg"

# ---- integrity: corrupt or missing shard, agreed on all ranks, names the file
cp -r "$full" "$d/bad"
victim=$(ls "$d/bad/volumes/training" | sort | sed -n 2p)
truncate -s 1000 "$d/bad/volumes/training/$victim"
t_expect_fail "truncated shard named (-n 2)" 1 "bad/volumes/training/$victim" $MPIRUN -n 2 "$T/test_loader" files "$d/bad" -c "$cfg"
cp "$full/volumes/training/$victim" "$d/bad/volumes/training/$victim"
m=$(ls "$d/bad/masks/validation" | head -n 1); rm "$d/bad/masks/validation/$m"
t_expect_fail "missing mask named (-n 2)" 1 "bad/masks/validation/$m" $MPIRUN -n 2 "$T/test_loader" files "$d/bad" -c "$cfg"
cp "$full/masks/validation/$m" "$d/bad/masks/validation/$m"
printf 'config_id: [\n' > "$d/bad/meta.yaml"
t_expect_fail "corrupt meta.yaml named" 1 "bad/meta.yaml" $MPIRUN -n 2 "$T/test_loader" files "$d/bad" -c "$cfg"

# ---- killed midway: nothing visible, rerun regenerates, stale staging pruned
printf 'problem_scale: 5\nn_categories: 3\nn_instances_used_per_fractal: 12\nfract_base_dir: %s/f\ndataset_dir: %s/dk\n' "$d" "$d" > "$d/k.yml"
for at in 7 26; do   # 7: among the shard files; 26: the meta.yaml commit, just before publishing
    rm -rf "$d/dk"
    # (an inner shell, so that the "Killed" job notice goes to /dev/null)
    bash -c 'SCAFFOLD_FAULT_KILL_AT_COMMIT=$0 "$1" generate_dataset -c "$2" >/dev/null 2>&1; exit $?' \
        "$at" "$SCAFFOLD" "$d/k.yml" 2>/dev/null
    rc=$?
    n=$(visible "$d/dk"); stg=$(find "$d/dk" -mindepth 2 -maxdepth 2 -name '.tmp_*' | wc -l)
    [ "$rc" -ne 0 ] && [ "$n" -eq 0 ] && [ "$stg" -eq 1 ] && t_ok "killed at commit $at: no visible dataset, one hidden staging dir" || t_fail "kill at $at" "rc=$rc visible=$n staging=$stg"
done
out=$("$SCAFFOLD" generate_dataset -c "$d/k.yml" 2>&1)
[ "$(tree_hash "$(dir_of "$out")")" = "$h2" ] && grep -q generated <<<"$out" && t_ok "rerun after a kill generates the full dataset" || t_fail "rerun after kill" "$out"
# The killed writer is gone (same host, dead PID): its staging directory and claim are removed at
# once (they used to stay for 24 h).
[ "$(find "$d/dk" -mindepth 2 -maxdepth 2 -name '.tmp_*' -o -name '.claim*' | wc -l)" -eq 0 ] \
    && grep -q "left by a dataset generation that is gone" <<<"$out" \
    && t_ok "a killed writer's staging dir and claim removed by the next run" || t_fail "dead writer's staging removed" "$out"
# A staging dir beside a live writer's claim is kept (the dataset is reused meanwhile); once that
# writer is gone, the next run removes it.
cfgd=$(dirname "$(dir_of "$out")")
host=$(hostname); boot=$(cat /proc/sys/kernel/random/boot_id)
sleep 60 & live=$!
printf 'scaffold-claim host=%s boot=%s pid=%s start=%s since=%s token=00000000000000bb\n' "$host" "$boot" $live \
    "$(awk '{sub(/.*\) /, ""); print $20}' /proc/$live/stat)" "$(date +%s)" > "$cfgd/.claim"
mkdir "$cfgd/.tmp_20260101-000000_${live}_0000abcd"
out=$("$SCAFFOLD" generate_dataset -c "$d/k.yml" 2>&1)
[ -d "$cfgd/.tmp_20260101-000000_${live}_0000abcd" ] && grep -q reused <<<"$out" && t_ok "a live writer's staging dir is kept, the dataset reused" || t_fail "live staging kept" "$out"
kill $live; wait $live 2>/dev/null
out=$("$SCAFFOLD" generate_dataset -c "$d/k.yml" 2>&1)
[ ! -e "$cfgd/.tmp_20260101-000000_${live}_0000abcd" ] && [ ! -e "$cfgd/.claim" ] && grep -q reused <<<"$out" \
    && t_ok "... removed once that writer is gone" || t_fail "staging of a gone writer" "$out"
# A meta.yaml that names a key twice is not a dataset to trust: skipped, naming both lines.
cp -r "$(dir_of "$out")" "$d/dk/$(basename "$(dirname "$(dir_of "$out")")")/29990101-000001__scaffold-0.1.0"
echo "n_val: 99" >> "$d/dk"/*/29990101-000001__scaffold-0.1.0/meta.yaml
out=$("$SCAFFOLD" generate_dataset -c "$d/k.yml" 2>&1)
grep -q "skipping cached dataset .*29990101-000001.*meta.yaml: key 'n_val' appears twice in one mapping (lines [0-9]* and [0-9]*)" <<<"$out" && grep -q reused <<<"$out" \
    && t_ok "a meta.yaml with a key given twice is skipped, naming both lines" || t_fail "duplicate key in meta.yaml" "$out"
rm -rf "$d/dk"/*/29990101-000001__scaffold-0.1.0
cp -r "$(dir_of "$out")" "$d/dk/$(basename "$(dirname "$(dir_of "$out")")")/29990101-000000__scaffold-0.1.0"
printf 'garbage: [\n' > "$d/dk"/*/29990101-000000__scaffold-0.1.0/meta.yaml
out=$("$SCAFFOLD" generate_dataset -c "$d/k.yml" 2>&1)
grep -q "skipping cached dataset .*meta.yaml" <<<"$out" && grep -q reused <<<"$out" && t_ok "a dataset with a corrupt meta.yaml is skipped with a warning" || t_fail "corrupt meta skipped" "$out"

# ---- independent jobs sharing one fresh library and dataset folder (job arrays): started
# together, 1-rank and 2-rank jobs mixed, twice; every job succeeds and names the same dataset,
# exactly one is generated (the others wait for it and reuse it), with the bytes of the others
# above, and no claim or staging directory is left.
conc_ok=1
for rep in 1 2; do
    rm -rf "$d/cj"
    printf 'problem_scale: 5\nn_categories: 3\nn_instances_used_per_fractal: 12\nfract_base_dir: %s/cj/f\ndataset_dir: %s/cj/ds\n' "$d" "$d" > "$d/cj.yml"
    pids=""
    for j in 1 2 3; do
        "$SCAFFOLD" generate_dataset -c "$d/cj.yml" >"$d/cj$j.log" 2>&1 & pids="$pids $!"
    done
    $MPIRUN -n 2 "$SCAFFOLD" generate_dataset -c "$d/cj.yml" >"$d/cj4.log" 2>&1 & pids="$pids $!"
    for p in $pids; do wait "$p" || { conc_ok=0; echo "job failed (round $rep): $(grep -h 'scaffold generate' "$d"/cj*.log | head -3)"; }; done
    dirs=$(for j in 1 2 3 4; do dir_of "$(cat "$d/cj$j.log")"; done | sort -u)
    ngen=$(grep -l "volumes generated" "$d"/cj?.log | wc -l)
    [ "$(wc -l <<<"$dirs")" -eq 1 ] && [ -d "$dirs" ] && [ "$ngen" -eq 1 ] || { conc_ok=0; echo "round $rep: $ngen generated, dirs: $dirs"; }
    [ "$(tree_hash "$dirs")" = "$h2" ] || { conc_ok=0; echo "round $rep: dataset bytes differ"; }
    [ -z "$(find "$d/cj" -name '.claim*' -o -name '.tmp_*' -o -name '*.tmp.*')" ] || { conc_ok=0; echo "round $rep: debris $(find "$d/cj" -name '.claim*' -o -name '.tmp_*' | head -3)"; }
done
[ $conc_ok = 1 ] && t_ok "4 concurrent jobs on one fresh library and dataset folder, twice: one dataset, same bytes, no debris" || t_fail "concurrent dataset jobs"

# ---- bad input
t_expect_fail "missing fractal library (prepare alone)" 1 "fractal instance .*missing; generate the fractal library first" \
    "$T/test_dataset" prepare -c "$cfg" --fract-base-dir "$d/nowhere" --dataset-dir "$d/dn"
[ "$(visible "$d/dn")" -eq 0 ] && [ -z "$(find "$d/dn" -name '.tmp_*')" ] && t_ok "failed generation leaves nothing behind" || t_fail "failed generation debris"
t_expect_fail "val_split leaving an empty split" 2 "val_split" $MPIRUN -n 2 "$SCAFFOLD" generate_dataset -c "$cfg" --val-split 5
t_expect_fail "empty shard chunk" 2 "dc_num_shards" "$SCAFFOLD" generate_dataset -c "$cfg" --dc-num-shards 9 1 1
touch "$d/afile"
t_expect_fail "unwritable dataset_dir (-n 2)" 1 "afile" $MPIRUN -n 2 "$SCAFFOLD" generate_dataset -c "$cfg" --dataset-dir "$d/afile/sub"
"$SCAFFOLD" generate_dataset --help | grep -q -- "--dataset-dir" && t_ok "--help lists the flags" || t_fail "--help"

# ---- sanitizers: ThreadSanitizer on the loader, ASan/UBSan on the unit tests (built in the
# background at the start from only the sources these tests need, so it takes seconds)
wait "$san_pid"
tsan=$d/san-thread/test_loader
if [ -x "$tsan" ]; then
    TSAN_OPTIONS="halt_on_error=1 exitcode=66" t_cbin setarch -R "$tsan"
else
    t_fail "TSan build" "$(head -5 "$d/san-thread/log")"
fi
for t in test_dataset test_loader; do
    a=$d/san-address-undefined/$t
    [ -x "$a" ] && ASAN_OPTIONS=detect_leaks=1 t_cbin "$a" || t_fail "ASan build" "$(head -5 "$d/san-address-undefined/log")"
done
t_report
