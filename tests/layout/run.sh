#!/usr/bin/env bash
# The module graph and size limits (tools/archcheck.py): docs/architecture.md draws the include
# graph of src/ as it is, no circle between modules, each module includes only its own layer or
# lower ones, no .c file over 1,000 lines and no function over 120 lines beyond the shrinking
# list in tools/archcheck-allow.txt. Also: the checker's failure path, on a copy of the tree with
# a planted upward include, a planted circle and a grown function.
cd "$(dirname "$0")/../.." && source tests/lib.sh
t_cbin python3 tools/archcheck.py
d=$(t_tmpdir)
mkdir -p "$d/tree"
cp -r src tools docs "$d/tree/"
# a base module including the training layer, and a training file included back by core
printf '#include "train/train.h"\n' >>"$d/tree/src/core/err.c"
out=$(python3 "$d/tree/tools/archcheck.py" 2>&1)
if [ $? = 1 ] && grep -q "^FAIL core includes only its own layer or lower ones: train" <<<"$out" &&
    grep -q "^FAIL no circle between modules" <<<"$out" &&
    grep -q "^FAIL docs/architecture.md draws the module graph" <<<"$out"; then
    t_ok "archcheck: an upward include, a circle and a stale drawing each fail"
else
    t_fail "archcheck: planted faults" "$out"
fi
cp src/core/err.c "$d/tree/src/core/err.c"
{ printf 'int archcheck_planted(int x);\nint archcheck_planted(int x) {\n'
  for i in $(seq 1 130); do printf '    x += %d;\n' "$i"; done
  printf '    return x;\n}\n'; } >>"$d/tree/src/core/err.c"
out=$(python3 "$d/tree/tools/archcheck.py" 2>&1)
if [ $? = 1 ] && grep -q "^FAIL function src/core/err.c:archcheck_planted: 133 lines (limit 120)" <<<"$out"; then
    t_ok "archcheck: a function over 120 lines fails, named with its size"
else
    t_fail "archcheck: planted long function" "$(grep -v '^ok' <<<"$out" | head -5)"
fi
t_expect_fail "archcheck: bad usage" 2 "usage: tools/archcheck.py" python3 tools/archcheck.py --bogus
rm -rf "$d"
t_report
