#!/usr/bin/env bash
# Fuzz corpora replayed: every committed input of tests/fuzz/corpus/<harness>/ (seeds and past
# findings) through its harness linked with the normal build (tests/fuzz/replay.c), so a fixed
# crash stays fixed without clang. The fuzzing itself is `make fuzz` (see tests/fuzz/fuzz.mk).
cd "$(dirname "$0")/../.." && source tests/lib.sh
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    name=${name#fuzz_}
    if [ ! -x "$BUILD/tests/fuzz/replay_$name" ]; then
        t_fail "replay $name" "missing $BUILD/tests/fuzz/replay_$name (run make)"
        continue
    fi
    t_cbin "$BUILD/tests/fuzz/replay_$name" "tests/fuzz/corpus/$name"
done
t_report
