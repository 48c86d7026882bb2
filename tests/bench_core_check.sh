#!/usr/bin/env bash
# bench_core (the one-core benchmark) end to end on a 20-image make_set set:
# the option errors and their messages, every row measured and consistent in
# the JSON (read back with python3's json module; exit 77 without python3),
# --only and --procs, and the record appended with --append-to. Timings are
# not asserted (they vary); what is asserted follows from the set.
#   bench_core_check.sh BENCH_CORE MAKE_SET
set -euo pipefail
core=$1 make_set=$2
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
d=$(mktemp -d /tmp/feeder-bench-core-XXXXXX)
trap 'rm -rf "$d"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_exact() { # expect_exact FILE TEXT
    [[ $(cat "$1") == "$2" ]] || { echo "--- got:"; cat "$1"; echo "--- want:"; echo "$2"; fail "$1"; } >&2
}

"$make_set" --set web "$d/web" 20 2> "$d/made"

# --data names one set: with --set both (the default) it is refused, exit 2.
rc=0; "$core" --data "$d/web" --images 20 2> "$d/err" || rc=$?
[[ $rc == 2 ]] || fail "--data without --set exited $rc, want 2"
expect_exact "$d/err" "bench_core: --data needs --set web or --set imagenet (the set it holds)
(bench_core --help lists the options)"
rc=0; "$core" --only fast 2> "$d/err" || rc=$?
[[ $rc == 2 ]] || fail "--only fast exited $rc, want 2"
expect_exact "$d/err" "bench_core: --only 'fast': expected one of plain|huffman|planes|eval|eval-huffman|eval-rgb|train|eval-turbo
(bench_core --help lists the options)"
# A folder that is not a make_set set: exit 1, naming it.
mkdir "$d/empty"
rc=0; "$core" --data "$d/empty" --set web --images 20 2> "$d/err" || rc=$?
[[ $rc == 1 ]] || fail "an empty folder exited $rc, want 1"
expect_exact "$d/err" "bench_core: no JPEG files in $d/empty (is it a make_set set of 20 images?)"

# Every row, then --only eval, then --only train in two processes.
"$core" --data "$d/web" --set web --images 20 --rounds 1 --json > "$d/all.json"
"$core" --data "$d/web" --set web --images 20 --rounds 1 --only eval --json > "$d/eval.json"
"$core" --data "$d/web" --set web --images 20 --rounds 1 --only train --procs 2 --json \
    > "$d/procs.json"
python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
rows = ["plain", "huffman", "planes", "eval", "eval-huffman", "eval-rgb", "train", "eval-turbo"]
def load(name):
    j = json.load(open(f"{d}/{name}"))
    assert len(j["sets"]) == 1, j
    s = j["sets"][0]
    assert s["set"] == "web" and s["dir"] == f"{d}/web", s
    assert s["images"] == 20 and s["skipped"] == 0, s
    return j, s
j, s = load("all.json")
assert j["procs"] == 1 and j["rounds"] == 1, j
us = s["us_per_image"]
assert all(us[r] > 0 for r in rows), us
# The breakdown's parts are parts: Huffman alone is cheaper than Huffman + IDCT.
assert us["huffman"] < us["planes"], us
assert us["eval-huffman"] < us["eval-rgb"], us
for k, r in (("eval", "eval"), ("train", "train"), ("eval_turbo", "eval-turbo")):
    want = us["plain"] / us[r]
    assert abs(s["ratio_to_plain"][k] - want) < 0.01 * want + 0.002, (k, s["ratio_to_plain"], us)
for r in ("eval", "train"):
    dec, xf = s["split_us"][r]
    assert dec > 0 and xf > 0 and abs(dec + xf - us[r]) < 0.5, (r, s["split_us"], us)
assert set(s["faults_per_image"]) == set(rows), s["faults_per_image"]
j, s = load("eval.json")
us = s["us_per_image"]
assert us["plain"] > 0 and us["eval"] > 0, us
assert all(us[r] == 0 for r in rows if r not in ("plain", "eval")), us
assert s["ratio_to_plain"]["train"] == 0, s
j, s = load("procs.json")
assert j["procs"] == 2, j
us = s["us_per_image"]
assert us["train"] > 0 and us["eval"] == 0, us
PY

# --append-to: the record with its heading, command and table.
"$core" --data "$d/web" --set web --images 20 --rounds 1 --only eval --append-to "$d/rec.md" \
    > "$d/table.txt"
grep -q "^## .*: the pipeline against a plain decode, one core$" "$d/rec.md" || fail "no heading"
grep -q "build/bench/bench_core --data $d/web --set web --images 20 --rounds 1 --only eval --append-to $d/rec.md" "$d/rec.md" \
    || fail "no command line in the record"
grep -q "^| web | eval: ROI decode + Resize 256 + CenterCrop 224 " "$d/rec.md" || fail "no eval row"
grep -q "^| web | eval: ROI decode + Resize 256 + CenterCrop 224 " "$d/table.txt" \
    || fail "no eval row on stdout"

echo "bench_core_check: ok"
