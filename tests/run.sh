#!/usr/bin/env bash
# tests/run.sh: runs every tests/<area>/run.sh (each ends with "N passed, N failed"), then prints
# the total. Select areas with SCAFFOLD_TEST_AREAS="core fractal". Exit 1 if anything failed.
set -u
cd "$(dirname "$0")/.."
total_p=0
total_f=0
failed_areas=""
skipped_areas=""
areas=${SCAFFOLD_TEST_AREAS:-$(ls -d tests/*/ | xargs -n1 basename)}
for area in $areas; do
    script=tests/$area/run.sh
    [ -f "$script" ] || continue
    echo "=== $area"
    start=$(date +%s)
    out=$(bash "$script" 2>&1)
    rc=$?
    echo "$out" | grep -vE '^ok ' | tail -n 60
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then p=0; f=1; echo "FAIL $area: no summary line (exit $rc)"; fi
    if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then f=1; echo "FAIL $area: exit $rc"; fi
    total_p=$((total_p + p))
    total_f=$((total_f + f))
    [ "$f" -ne 0 ] && failed_areas="$failed_areas $area"
    # an area that ran nothing by design (no GPU) says so instead of "0 passed"
    skip=""
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && grep -q '^SKIP' <<<"$out"; then
        skip=", SKIPPED"
        skipped_areas="$skipped_areas $area"
    fi
    echo "--- $area: $p passed, $f failed$skip ($(( $(date +%s) - start )) s)"
done
[ -n "$skipped_areas" ] && echo "skipped areas (nothing run):$skipped_areas"
[ -n "$failed_areas" ] && echo "failed areas:$failed_areas"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
