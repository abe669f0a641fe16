#!/usr/bin/env bash
# Core unit tests (err, rng, npy, fsutil, config, yamlx, opt, fault, claim, cpus, job), the rank agreement of the merged
# configuration, plus .npy interoperability with numpy.
cd "$(dirname "$0")/../.." && source tests/lib.sh
t_cbin "$BUILD/tests/core/test_core"
t_cbin "$BUILD/tests/core/test_config"
t_cbin "$BUILD/tests/core/test_yamlx"
t_cbin "$BUILD/tests/core/test_opt"
t_cbin "$BUILD/tests/core/test_fault"
t_cbin "$BUILD/tests/core/test_claim"
t_cbin "$BUILD/tests/core/test_cpus"
t_cbin "$BUILD/tests/core/test_job"
d=$(t_tmpdir)

# Ranks that disagree on the merged configuration: one message naming the keys, exit 2, no hang,
# nothing written (an MPMD launch gives one rank other flags).
printf 'problem_scale: 4\nn_categories: 1\nfract_base_dir: %s/fr\ndataset_dir: %s/ds\nbase_run_dir: %s/runs\nepochs: 1\n' \
    "$d" "$d" "$d" > "$d/c.yml"
mp() { timeout 120 $MPIRUN -n "$1" "$SCAFFOLD" "${@:3}" : -n 1 "$SCAFFOLD" "${@:3}" $2; }
t_expect_fail "ranks: different seed named" 2 "rank 1's configuration differs from rank 0's in 1 key: seed \(7 here, 42 on rank 0\)" \
    mp 1 "--seed 7" generate_fractals -c "$d/c.yml"
t_expect_fail "ranks: 3 + 1 with --epochs 4 on one (MPMD): no hang" 2 "rank 3's configuration differs .*epochs \(4 here, 1 on rank 0\)" \
    mp 3 "--epochs 4" benchmark -c "$d/c.yml"
t_expect_fail "ranks: different local_batch_size" 2 "local_batch_size \(2 here, 1 on rank 0\)" \
    mp 1 "--local-batch-size 2" benchmark -c "$d/c.yml"
t_expect_fail "ranks: different dataset_dir" 2 "dataset_dir \(\"$d/other\" here, \"$d/ds\" on rank 0\)" \
    mp 1 "--dataset-dir $d/other" generate_dataset -c "$d/c.yml"
t_expect_fail "ranks: several keys in one message" 2 "in 2 keys: seed .*, n_categories" \
    mp 1 "--seed 1 --n-categories 2" generate_fractals -c "$d/c.yml"
[ -z "$(ls "$d" | grep -v c.yml)" ] && t_ok "ranks: nothing written on disagreement" || t_fail "ranks: nothing written on disagreement" "$(ls "$d")"
out=$(timeout 60 $MPIRUN -n 1 "$SCAFFOLD" generate_fractals -c "$d/c.yml" : -n 1 "$SCAFFOLD" generate_fractals --help 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "usage: scaffold generate_fractals" <<<"$out" && t_ok "ranks: --help on one rank is help on all" || t_fail "ranks: --help on one rank" "exit $rc"

"$PYTHON" tests/core/npy_interop.py "$d" "$BUILD/tests/core/test_core" && t_ok "npy interop with numpy" || t_fail "npy interop with numpy"
rm -rf "$d"
t_report
