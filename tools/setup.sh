#!/usr/bin/env bash
# tools/setup.sh [--test]: installs the Debian 12 packages scaffold needs. Safe to re-run. Needs
# root (or sudo).
#
#   bash tools/setup.sh          building and running (`make`, `make run`): the compiler, Open
#                                MPI, libyaml, zlib, libdeflate, libpng, cairo, a font, and every
#                                tools/packages.d/*.txt that is not *.test.txt.
#   bash tools/setup.sh [--test] --list   prints the packages it would install, installs nothing.
#   bash tools/setup.sh --test   also what the tests and tools/ need (`make test`, `make fuzz`):
#                                Python with numpy/yaml/torch (Debian's; reference values and .npy
#                                checks, never at run time), clang (libFuzzer), MPICH beside Open
#                                MPI (`make MPI=mpich`), the tools/packages.d/*.test.txt lists, and
#                                the pinned test venv of tools/requirements-test.txt (PyPI).
# A module adds packages in tools/packages.d/<module>.txt (build and run) or
# tools/packages.d/<module>.test.txt (tests only), one per line.
set -eu
cd "$(dirname "$0")/.."
TEST=0
LIST=0
for a in "$@"; do
    case "$a" in
    --test) TEST=1 ;;
    --list) LIST=1 ;;
    -h | --help)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "setup: unknown option '$a' (use --test for the test tools, --list to print them)" >&2
        exit 2
        ;;
    esac
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
lists() { # lists SUFFIX_FILTER: the package names of tools/packages.d/*.txt, comments removed
    local f
    for f in tools/packages.d/*.txt; do
        [ -e "$f" ] || continue
        case "$f" in *.test.txt) [ "$1" = test ] || continue ;; *) [ "$1" = run ] || continue ;; esac
        sed 's/#.*//' "$f"
    done | tr '\n' ' '
}
PKGS="build-essential make openmpi-bin libopenmpi-dev libyaml-dev zlib1g-dev libpng-dev
      libcairo2-dev fonts-dejavu-core $(lists run)"
if [ "$TEST" -eq 1 ]; then
    PKGS="$PKGS python3 python3-venv python3-numpy python3-yaml python3-torch clang mpich libmpich-dev
          $(lists test)"
fi
if [ "$LIST" -eq 1 ]; then
    echo $PKGS | tr ' ' '\n' | awk '!seen[$0]++'
    exit 0
fi
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# MPICH installed here beside Open MPI must not take over mpicc/mpirun: the default build is
# Open MPI (`make MPI=mpich` calls mpicc.mpich explicitly).
case " $missing " in
*" mpich "* | *" libmpich-dev "*)
    for alt in mpi:mpicc mpirun:mpirun; do
        [ -x "/usr/bin/${alt#*:}.openmpi" ] && $SUDO update-alternatives --set "${alt%%:*}" "/usr/bin/${alt#*:}.openmpi" >/dev/null 2>&1 || true
    done
    ;;
esac
if [ "$TEST" -eq 1 ]; then
    # The pinned test venv: the real client libraries from PyPI (tools/requirements-test.txt) that
    # tests use to read our files (dftracer-utils, caliper-reader, Hatchet, Thicket) and dftracer
    # itself. Rebuilt when the pins change; tests find it through tests/lib.sh (t_venv_python).
    bash tools/test_venv.sh || exit 1
fi
echo "setup: dependencies present$([ "$TEST" -eq 1 ] && echo " (build, run and test)" || echo " (build and run; add --test for the test tools)")"
