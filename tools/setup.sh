#!/usr/bin/env bash
# tools/setup.sh: installs everything scaffold needs to build, test and benchmark on Debian 12.
# Debian packages only (numpy and torch here are Debian's, used by tests and tools/, never at run
# time). Safe to re-run. Needs root (or sudo).
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
PKGS="build-essential make openmpi-bin libopenmpi-dev libyaml-dev zlib1g-dev libpng-dev
      libcairo2-dev fonts-dejavu-core python3 python3-numpy python3-yaml python3-torch"
# Extra packages a module's tests need are listed, one per line, in tools/packages.d/*.txt.
if ls tools/packages.d/*.txt >/dev/null 2>&1; then
    PKGS="$PKGS $(cat tools/packages.d/*.txt | sed 's/#.*//' | tr '\n' ' ')"
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
# Test-only PyPI package: dftracer's own trace reader, used by tests/trace to validate our
# traces (the test says so and skips when it is absent). Best effort: never fails the setup.
if ! command -v dftracer_validate >/dev/null 2>&1; then
    python3 -m pip install --quiet dftracer-utils==0.0.14 >/dev/null 2>&1 || echo "setup: pip install dftracer-utils failed (tests/trace will skip that check)"
    command -v pyenv >/dev/null 2>&1 && pyenv rehash 2>/dev/null || true
fi
echo "setup: dependencies present"
