#!/usr/bin/env bash
# bench_cache_write end to end on 16 MiB rounds: the option errors and their
# messages, a folder it cannot make, the JSON's rows (read back with
# python3's json module; exit 77 without python3), the folder left as it
# was, and the record appended with --append-to. Rates are not asserted
# (they vary); that each row was measured is.
#   bench_cache_write_check.sh BENCH_CACHE_WRITE
set -euo pipefail
bench=$1
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
d=$(mktemp -d /tmp/feeder-bench-cache-write-XXXXXX)
trap 'rm -rf "$d"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_exact() { # expect_exact FILE TEXT
    [[ $(cat "$1") == "$2" ]] || { echo "--- got:"; cat "$1"; echo "--- want:"; echo "$2"; fail "$1"; } >&2
}
refused() { # refused RC MESSAGE ARGS...
    local want=$1 msg=$2 rc=0
    shift 2
    "$bench" "$@" 2> "$d/err" > "$d/out" || rc=$?
    [[ $rc == "$want" ]] || fail "$* exited $rc, want $want"
    expect_exact "$d/err" "$msg"
    [[ ! -s $d/out ]] || fail "$* printed on stdout"
}

refused 2 "bench_cache_write: --mib 20: not a multiple of the 8 MiB chunk
(bench_cache_write --help lists the options)" --dir "$d/w" --mib 20
refused 2 "bench_cache_write: --threads 4: more threads than the 2 chunks of --mib 16
(bench_cache_write --help lists the options)" --dir "$d/w" --mib 16 --threads 4
refused 2 "bench_cache_write: --threads '0': expected an integer in [1, 64]
(bench_cache_write --help lists the options)" --dir "$d/w" --threads 0
touch "$d/file"
refused 1 "bench_cache_write: cannot make the folder $d/file/sub: Not a directory" \
    --dir "$d/file/sub" --mib 16 --threads 1

# Two thread counts, one round each: every row and column measured, the
# folder made and left empty.
"$bench" --dir "$d/w" --mib 16 --threads 1,2 --rounds 1 --json > "$d/run.json" 2> "$d/progress"
python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
j = json.load(open(f"{d}/run.json"))
assert j["bench"] == "bench_cache_write" and j["dir"] == f"{d}/w", j
assert j["mib"] == 16 and j["chunk_bytes"] == 8 << 20 and j["write_bytes"] == 512 << 10, j
assert j["rounds"] == 1 and j["cores"] >= 1, j
assert [r["threads"] for r in j["rows"]] == [1, 2], j
for r in j["rows"]:
    for k in ("one_file_gbs", "file_per_thread_gbs", "mapping_gbs"):
        assert r[k] > 0, r
PY
[[ -d $d/w && -z $(ls -A "$d/w") ]] || fail "files left in $d/w: $(ls -A "$d/w")"
[[ $(grep -c 'threads: ' "$d/progress") == 6 ]] || fail "progress lines: $(cat "$d/progress")"

# The table on stdout, and the same record appended to a file.
"$bench" --dir "$d/w" --mib 16 --threads 1 --rounds 1 --label box \
    --append-to "$d/record.md" > "$d/table" 2> /dev/null
grep -q '^| threads | one file | a file a thread | one mapping |$' "$d/table" || fail "no table"
grep -q '^|       1 |' "$d/table" || fail "no row for 1 thread"
grep -q 'box: bench_cache_write, writes into one file and many' "$d/record.md" ||
    fail "record: $(cat "$d/record.md")"
grep -q -- '--append-to' "$d/record.md" || fail "the record lacks the command"
echo "bench_cache_write_check: ok"
