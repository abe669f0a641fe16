#!/usr/bin/env bash
# Store tests: the C suite (tests/store/test_store.c, mirroring DDStore's test_single,
# test_multirank and test_get_batch) at 1, 2, 3 and 4 ranks for both methods, sanitizer builds
# when present, and the store-bench command's argument and failure handling.
cd "$(dirname "$0")/../.." && source tests/lib.sh
T=$BUILD/tests/store/test_store
for m in rma coll; do
    t_cbin "$T" "$m"
    for n in 2 3 4; do
        t_cbin timeout 120 $MPIRUN -n $n "$T" "$m"
    done
done
t_report
