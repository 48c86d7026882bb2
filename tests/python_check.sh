#!/usr/bin/env bash
# Build feeder's Python module against this build's libfeeder (into
# BUILD/python, so the checkout stays clean) and run python/tests with
# Debian's python3 (the one python3-numpy, python3-torch and python3-pytest
# belong to). 77 (skipped) where any of them is missing. FEEDER_BUILD_DIR
# tells the tests where the build's tools are (feeder-pack).
#   tests/python_check.sh BUILD_DIR SOURCE_DIR [pytest args]
# The args may name test files (then only those run); without any file or
# folder among them, python/tests runs whole.
set -euo pipefail
build=$(realpath "$1"); src=$(realpath "$2"); shift 2
py=${FEEDER_PYTHON:-/usr/bin/python3}
if ! "$py" -c "import numpy, torch, pytest, PIL, setuptools" 2>/dev/null; then
  echo "skipped: $py lacks numpy, torch, pytest, PIL or setuptools (scripts/setup.sh installs them)"
  exit 77
fi
out=$build/python
FEEDER_BUILD_DIR=$build "$py" "$src/python/setup.py" -q build_py -d "$out" \
  build_ext -f -b "$out" -t "$build/python-temp" >/dev/null  # -f: CUDA on/off is not a file change
cd "$build"  # not python/: its feeder/ has no built module
paths=("$src/python/tests")
for a in "$@"; do
  [[ $a == -* ]] || paths=()
done
# A test still running after 240 s has every thread's stack dumped (pytest's
# faulthandler), and the output is unbuffered: a hang that ctest's timeout
# ends still says where it was.
FEEDER_BUILD_DIR=$build PYTHONPATH=$out PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
  exec "$py" -m pytest -p no:cacheprovider -o faulthandler_timeout=240 -q "${paths[@]}" "$@"
