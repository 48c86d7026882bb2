#!/usr/bin/env bash
# Run test binaries many times beside a CPU-heavy job: a test that orders
# events by timing, or counts what other processes change, fails here.
#   scripts/under_load.sh RUNS [CTEST_REGEX] [BUILD_DIR]
#   scripts/under_load.sh 20                     every Check test, 20 times
#   scripts/under_load.sh 20 'faults|harden' build
# The job is one busy process per core (nice 0, as the tests), started before
# the first run and stopped after the last. Prints each run's failures and a
# summary; exit status 1 when any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:?usage: $0 RUNS [CTEST_REGEX] [BUILD_DIR]}
regex=${2:-^test_}
dir=${3:-build}
[[ -f $dir/CTestTestfile.cmake ]] || { echo "under_load.sh: no CTest tree in $dir (build first)" >&2; exit 2; }
hogs=()
for _ in $(seq "$(nproc)"); do
    ( while :; do :; done ) &
    hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
failed=0
for i in $(seq "$runs"); do
    out=$(ctest --test-dir "$dir" -R "$regex" -E cuda --timeout 900 2>&1)
    bad=$(grep -E '\*\*\*(Failed|Timeout|Exception)' <<<"$out" | sed 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: //')
    total=$(grep -oE 'out of [0-9]+' <<<"$out" | grep -oE '[0-9]+' | tail -1)
    if [[ -n $bad ]]; then
        failed=$((failed + 1))
        echo "run $i/$runs: FAILED: $(tr '\n' ';' <<<"$bad")"
    else
        echo "run $i/$runs: ${total:-?} tests passed"
    fi
done
echo "under_load.sh: $failed of $runs runs had a failure ($(nproc) busy processes beside them)"
[[ $failed -eq 0 ]]
