#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang in build-fuzz/
# (the whole library then builds with -fsanitize=fuzzer-no-link,address,undefined;
# without CUDA, which the parsers do not need and nvcc's host compiler would not take)
# and run each for SECONDS on a copy of its seed corpus tests/fuzz/corpus_NAME/.
# Fails when a target crashes; the crashing input is left in build-fuzz/.
#   scripts/fuzz.sh [SECONDS]     (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
CC=clang cmake -S . -B build-fuzz -DFEEDER_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFEEDER_BUILD_TESTS=OFF -DFEEDER_BUILD_BENCH=OFF -DFEEDER_BUILD_EXAMPLES=OFF \
    -DFEEDER_BUILD_TOOLS=OFF -DFEEDER_WITH_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)"
shopt -s nullglob
targets=(build-fuzz/tests/fuzz/fuzz_*)
((${#targets[@]})) || { echo "fuzz.sh: no fuzz targets were built" >&2; exit 1; }
for exe in "${targets[@]}"; do
    name=$(basename "$exe")
    corpus=tests/fuzz/corpus_${name#fuzz_}
    work=$(mktemp -d)
    [[ -d $corpus ]] && cp -r "$corpus"/. "$work"/
    echo "== $name: ${secs}s on $(ls "$work" | wc -l) seeds"
    if ! "$exe" -max_total_time="$secs" -print_final_stats=1 \
            -artifact_prefix=build-fuzz/"$name"- "$work" 2>&1 | tail -n 25; then
        echo "fuzz.sh: $name crashed (input saved as build-fuzz/$name-*)" >&2
        rm -rf "$work"
        exit 1
    fi
    rm -rf "$work"
done
