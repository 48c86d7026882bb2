#!/usr/bin/env bash
# Build (if needed) and run the whole test suite through CTest.
#   scripts/test.sh              Release-ish build in build/
#   scripts/test.sh asan         ASan + UBSan build in build-asan/
#   scripts/test.sh tsan         TSan build in build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-plain}
case "$kind" in
  plain) dir=build; flags=() ;;
  asan)  dir=build-asan; flags=(-DFEEDER_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
         export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
         export CK_TIMEOUT_MULTIPLIER=4 ;;
  tsan)  dir=build-tsan; flags=(-DFEEDER_TSAN=ON -DCMAKE_BUILD_TYPE=Debug)
         export CK_TIMEOUT_MULTIPLIER=4 ;;
  *) echo "usage: $0 [plain|asan|tsan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
# The soak (label "soak") runs on its own: ctest --test-dir build -L soak
ctest --test-dir "$dir" --output-on-failure --timeout 600 -LE soak
