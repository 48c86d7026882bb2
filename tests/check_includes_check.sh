#!/usr/bin/env bash
# scripts/check_includes.sh passes on the tree, and fails, naming the file and
# line, on a made-up tree where a lower room includes a higher one, two rooms
# of one rank include each other, and a header is missing.
set -euo pipefail
src=$1
bash "$src/scripts/check_includes.sh" "$src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{include,common,io,decode,loader,cuda}
echo '#include "feeder.h"' >"$tmp/common/ok.c"
touch "$tmp/include/feeder.h" "$tmp/loader/loader.h" "$tmp/cuda/gpu.h" "$tmp/io/io.h"
printf '#include "common/common.h"\n#include "loader/loader.h"\n' >"$tmp/io/reader.c"
touch "$tmp/common/common.h"
echo '#include "cuda/gpu.h"' >"$tmp/loader/loader.c"
echo '#include "decode/nothere.h"' >"$tmp/decode/jpeg.c"
if out=$(bash "$src/scripts/check_includes.sh" "$tmp" 2>&1); then
  echo "FAIL: a tree with upward includes passed"; exit 1
fi
grep -q 'io/reader.c:2: io/ (rank 1) includes "loader/loader.h" from loader/ (rank 4)' <<<"$out" ||
  { echo "FAIL: upward include not named: $out"; exit 1; }
grep -q 'loader/loader.c:1: loader/ (rank 4) includes "cuda/gpu.h" from cuda/ (rank 4)' <<<"$out" ||
  { echo "FAIL: same-rank include not named: $out"; exit 1; }
grep -q 'decode/jpeg.c:1: includes "decode/nothere.h", which does not exist' <<<"$out" ||
  { echo "FAIL: missing header not named: $out"; exit 1; }
[ "$(grep -c . <<<"$out")" -eq 3 ] || { echo "FAIL: expected 3 findings: $out"; exit 1; }
echo "check_includes_check: ok"
