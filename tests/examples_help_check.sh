#!/usr/bin/env bash
# Every program in examples/ answers --help (usage on stdout, nothing on
# stderr, exit 0) and an unknown option (nothing on stdout, a message naming
# it on stderr, exit 2); iterate_folder used to open "--help" as a folder.
# The programs not built here (train_loop without CUDA, mpi_train without
# MPI) are left out; the scripts of examples/python run with Debian's python3
# and the module python_check builds in BUILD/python, when both are there.
#   examples_help_check.sh BUILD_DIR
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/.." && pwd)
d=$(mktemp -d /tmp/feeder-examples-help-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

check() { # check NAME COMMAND...
    local name=$1 rc
    shift
    rc=0; "$@" --help > "$d/out" 2> "$d/err" || rc=$?
    [[ $rc == 0 ]] || { cat "$d/out" "$d/err" >&2; fail "$name --help exited $rc, want 0"; }
    grep -qi "usage" "$d/out" || { cat "$d/out" >&2; fail "$name --help: no usage on stdout"; }
    [[ ! -s $d/err ]] || { cat "$d/err" >&2; fail "$name --help wrote to stderr"; }
    rc=0; "$@" --no-such-option > "$d/out" 2> "$d/err" || rc=$?
    [[ $rc == 2 ]] || { cat "$d/out" "$d/err" >&2; fail "$name --no-such-option exited $rc, want 2"; }
    [[ ! -s $d/out ]] || { cat "$d/out" >&2; fail "$name --no-such-option wrote to stdout"; }
    grep -q -- "--no-such-option" "$d/err" || { cat "$d/err" >&2; fail "$name: the message does not name the option"; }
    echo "$name: --help and a bad option answered"
}

n=0
for p in iterate_folder fields_tokens fields_detection fields_segmentation train_loop mpi_train; do
    [[ -x $build/examples/$p ]] || { echo "$p: not built here, left out"; continue; }
    if [[ $p == mpi_train ]]; then
        # Open MPI's own allocations outlive MPI_Finalize; under ASan, LeakSanitizer
        # would report them on stderr and change the exit status.
        ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 check "$p" "$build/examples/$p"
    else
        check "$p" "$build/examples/$p"
    fi
    n=$((n + 1))
done
[[ $n -ge 4 ]] || fail "only $n example programs found under $build/examples"
# iterate_folder's usage, exactly.
"$build/examples/iterate_folder" --help > "$d/out"
[[ $(head -1 "$d/out") == "usage: $build/examples/iterate_folder IMAGE_FOLDER|SHARD.tar|'S-{000..127}.tar'" ]] ||
    { cat "$d/out" >&2; fail "iterate_folder --help's first line"; }
if PYTHONPATH=$build/python /usr/bin/python3 -c "import torch, torchvision, feeder" 2>/dev/null; then
    for f in "$src"/examples/python/*.py; do
        PYTHONPATH=$build/python check "$(basename "$f")" /usr/bin/python3 "$f"
    done
else
    echo "examples/python: no torch or no module in $build/python (python_check builds it), left out"
fi
