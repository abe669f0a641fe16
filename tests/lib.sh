# tests/lib.sh: helpers for shell test suites. Source it, call `t_check "name" cmd...` or
# `t_ok name` / `t_fail name why`, and end with `t_report` (prints "N passed, N failed").
T_PASSED=0
T_FAILED=0
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
SCAFFOLD=${SCAFFOLD:-$PWD/$BUILD/scaffold}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Keep Open MPI quiet and local in containers.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# SCAFFOLD_MPI=mpich (make MPI=mpich test): the same tests launched with Debian's MPICH.
if [ "${SCAFFOLD_MPI:-openmpi}" = mpich ]; then
    MPIRUN=${MPIRUN:-mpirun.mpich}
else
    MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}
fi

# The training engine's Conv3d algorithms by its rule, not by measurement (nn/algo.h), and no
# algorithm cache in $HOME: tests compare runs bit for bit; the tests of the measurement set
# these themselves.
export SCAFFOLD_NN_ALGO=${SCAFFOLD_NN_ALGO:-rule} SCAFFOLD_NN_ALGO_CACHE=${SCAFFOLD_NN_ALGO_CACHE:-0}

t_ok() { T_PASSED=$((T_PASSED + 1)); echo "ok   $1"; }
t_fail() { T_FAILED=$((T_FAILED + 1)); echo "FAIL $1${2:+: $2}"; }
# t_check NAME CMD...: passes when CMD exits 0.
t_check() {
    local name=$1; shift
    if "$@"; then t_ok "$name"; else t_fail "$name" "exit $?"; fi
}
# t_expect_fail NAME STATUS PATTERN CMD...: CMD must exit with STATUS and print PATTERN (stderr+stdout).
t_expect_fail() {
    local name=$1 status=$2 pat=$3; shift 3
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" -ne "$status" ]; then t_fail "$name" "exit $rc, wanted $status: $out"; return; fi
    if ! grep -qE -- "$pat" <<<"$out"; then t_fail "$name" "message lacks /$pat/: $out"; return; fi
    t_ok "$name"
}
t_report() { echo "$T_PASSED passed, $T_FAILED failed"; [ "$T_FAILED" -eq 0 ]; }
t_tmpdir() { mktemp -d "${TMPDIR:-/tmp}/scaffold-test.XXXXXX"; }
# t_cbin BIN [ARGS...]: runs a C test binary (or any command printing "N passed, N failed") and
# adds its counts; a crash or missing summary counts as one failure.
t_cbin() {
    local out rc line p f
    out=$("$@" 2>&1); rc=$?
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$out" | tail -n 20
        t_fail "$*" "no summary line (exit $rc)"; return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then echo "$out" | grep -v '^ok' | tail -n 30; fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    T_PASSED=$((T_PASSED + p)); T_FAILED=$((T_FAILED + f))
    if [ "$f" -ne 0 ]; then echo "FAIL $* ($p passed, $f failed)"; else echo "ok   $* ($p passed, $f failed)"; fi
}
# t_venv_python: prints the python of the pinned test venv (tools/setup.sh --test makes it); fails
# with nothing printed when it is absent, so that a test says SKIP and names the command.
t_venv_python() { bash tools/test_venv.sh --print 2>/dev/null; }
# Headless Chromium, for the HTML reports (tests/analyze, tests/tune).
# t_chrome: prints the browser (chromium, chromium-browser or google-chrome); prints nothing and
# fails when none is installed (each suite decides whether that is a SKIP or a failure).
t_chrome() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
# t_chrome_render CHROME URL DIR: renders URL headless into DIR/shot.png (a 1200x2400
# screenshot), DIR/chrome.out (the browser's log) and DIR/dom.html (the DOM after the scripts ran).
t_chrome_render() {
    local chrome=$1 url=$2 dir=$3
    local copts="--headless --no-sandbox --disable-gpu"
    timeout 90 "$chrome" $copts --hide-scrollbars --enable-logging=stderr --v=0 \
        --window-size=1200,2400 --screenshot="$dir/shot.png" "$url" >"$dir/chrome.out" 2>&1
    timeout 90 "$chrome" $copts --dump-dom "$url" >"$dir/dom.html" 2>/dev/null
}
# t_png_page FILE: FILE is a screenshot of a real page (a PNG of more than 20 KB).
t_png_page() {
    "$PYTHON" -c "import sys;b=open(sys.argv[1],'rb').read()
sys.exit(0 if b[:8]==b'\x89PNG\r\n\x1a\n' and len(b)>20000 else 1)" "$1"
}
# t_chrome_console NAME LOG: passes when the browser's log shows no script or loading error.
t_chrome_console() {
    if grep -qiE "Uncaught|ERROR:CONSOLE|Failed to load resource" "$2"; then
        t_fail "$1" "$(grep -iE 'Uncaught|CONSOLE|Failed to load' "$2" | head -3)"
    else
        t_ok "$1"
    fi
}
