#!/usr/bin/env bash
# tools/test_venv.sh [--print]: makes (once) the pinned test venv of tools/requirements-test.txt,
# the real client libraries from PyPI that tests read our files with (dftracer-utils,
# caliper-reader, Hatchet, Thicket) and dftracer itself. Tests only, never at run time.
#
# Where: $SCAFFOLD_TEST_VENV (default ~/.cache/scaffold-test/venv). The venv counts as made only
# when its .complete marker holds the SHA-256 of the requirements file, so an interrupted install
# or a changed pin is redone, never used half-made. Installs are serialised with a lock.
# --print: print the venv's python when it is complete (exit 1 otherwise), install nothing.
set -u
cd "$(dirname "$0")/.."
REQ=tools/requirements-test.txt
DIR=${SCAFFOLD_TEST_VENV:-$HOME/.cache/scaffold-test/venv}
want=$(sha256sum "$REQ" | cut -d' ' -f1)
complete() { [ -f "$DIR/.complete" ] && [ "$(cat "$DIR/.complete")" = "$want" ]; }
if [ "${1:-}" = --print ]; then
    complete || exit 1
    echo "$DIR/bin/python"
    exit 0
fi
mkdir -p "$(dirname "$DIR")" || exit 1
(
    flock 9
    complete && exit 0
    rm -rf "$DIR"
    py=${TEST_VENV_PYTHON:-python3}
    echo "test_venv: creating $DIR from $REQ (first use only, a few minutes)" >&2
    "$py" -m venv "$DIR" >&2 &&
        "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ" >&2 &&
        echo "$want" >"$DIR/.complete" && exit 0
    rm -rf "$DIR"
    echo "test_venv: installing $REQ failed (is PyPI reachable?); the tests that read our files with the real client libraries need it" >&2
    exit 1
) 9>"$(dirname "$DIR")/.lock"
