#!/usr/bin/env bash
# Build the libFuzzer targets (clang, build-fuzz/) and run each one for
# SECONDS on a copy of its seed corpus; fail on the first crash.
#   scripts/fuzz.sh SECONDS [TARGET...]     e.g. scripts/fuzz.sh 20 fuzz_list
# FUZZ_OUT=dir keeps each target's log, final corpus and crash artifacts there
# (default: a temporary folder, removed unless a target failed).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: $0 SECONDS [TARGET...]}
shift
CC=clang cmake -S . -B build-fuzz -DFEEDER_FUZZ=ON -DFEEDER_BUILD_TESTS=OFF \
  -DFEEDER_BUILD_BENCH=OFF -DFEEDER_BUILD_EXAMPLES=OFF -DFEEDER_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"${FUZZ_JOBS:-2}" >/dev/null
targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi
out=${FUZZ_OUT:-$(mktemp -d /tmp/feeder-fuzz-XXXXXX)}
mkdir -p "$out"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus_${t#fuzz_}
  mkdir -p "$out/$t/corpus" "$out/$t/artifacts"
  cp -r "$corpus"/. "$out/$t/corpus/"
  # -timeout: an input that takes 10 s to decode is a finding (a hang) too.
  if build-fuzz/tests/fuzz/"$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$out/$t/artifacts/" "$out/$t/corpus" \
       >"$out/$t/log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t/log" | grep -o '[0-9]*$' || true)
    echo "$t: ok, ${runs:-?} executions in ${secs} s"
  else
    echo "$t: FAILED (log: $out/$t/log, artifacts: $out/$t/artifacts)"
    tail -40 "$out/$t/log"
    status=1
  fi
done
[ -n "${FUZZ_OUT:-}" ] || [ "$status" -ne 0 ] || rm -rf "$out"
exit $status
