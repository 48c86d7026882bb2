#!/usr/bin/env bash
# bench/trace_summary.py on a small invented trace: the whole run's shares,
# the steady part's with --after-ms (spans that start before the cut left
# out, the wall measured from the first span kept), the workers' tracks
# merged into one line per span name, --until-ms and --epoch windows, and a
# bad --after-ms or an epoch with no span refused (exit 2, naming it). Exit 77 (skipped) when no python3 is found.
#   trace_summary_check.sh SOURCE_DIR
set -euo pipefail
src=$1
source "$(dirname "$0")/python_for.sh"
python_for 'pass'
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
# Two workers and the consumer; times in microseconds. Worker 0 reads 1 ms at
# 0 and 5 ms (epoch 0) and decodes 1 ms at 9 ms (epoch 1); worker 1 decodes
# 2 ms at 6 ms (epoch 1); the consumer waits 4 ms from 0 (no epoch).
cat > "$d/t.json" <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "thread_name", "tid": 1, "args": {"name": "worker 0 (pid 5)"}},
 {"ph": "M", "name": "thread_name", "tid": 2, "args": {"name": "worker 1 (pid 6)"}},
 {"ph": "M", "name": "thread_name", "tid": 3, "args": {"name": "consumer"}},
 {"ph": "X", "name": "read", "tid": 1, "ts": 0, "dur": 1000, "args": {"epoch": 0}},
 {"ph": "X", "name": "read", "tid": 1, "ts": 5000, "dur": 1000, "args": {"epoch": 0}},
 {"ph": "X", "name": "decode", "tid": 1, "ts": 9000, "dur": 1000, "args": {"epoch": 1}},
 {"ph": "X", "name": "decode", "tid": 2, "ts": 6000, "dur": 2000, "args": {"epoch": 1}},
 {"ph": "X", "name": "next", "tid": 3, "ts": 0, "dur": 4000}
]}
JSON
"$py" "$src/bench/trace_summary.py" "$d/t.json" > "$d/all.md"
"$py" "$src/bench/trace_summary.py" "$d/t.json" --after-ms 4.5 > "$d/after.md"
"$py" "$src/bench/trace_summary.py" "$d/t.json" --until-ms 4.5 > "$d/until.md"
"$py" "$src/bench/trace_summary.py" "$d/t.json" --epoch 1 > "$d/e1.md"
expect() { grep -qF -- "$2" "$1" || { echo "FAIL: $1 lacks: $2"; cat "$1"; exit 1; }; }
expect "$d/all.md" "10.0 ms from the first span to the last"
expect "$d/all.md" "| consumer | next | 1 | 4.0 | 4000.0 | 40.0 |"
expect "$d/all.md" "| workers (x2, mean busy per worker) | decode | 2 | 3.0 | 1500.0 | 15.0 |"
expect "$d/all.md" "| workers (x1, mean busy per worker) | read | 2 | 2.0 | 1000.0 | 20.0 |"
# After 4.5 ms: the first read and the consumer's wait are left out; the
# wall runs from 5 to 10 ms.
expect "$d/after.md" "5.0 ms from the first span to the last (after the first 4.5 ms)"
expect "$d/after.md" "| workers (x1, mean busy per worker) | read | 1 | 1.0 | 1000.0 | 20.0 |"
expect "$d/after.md" "| workers (x2, mean busy per worker) | decode | 2 | 3.0 | 1500.0 | 30.0 |"
if grep -q "consumer" "$d/after.md"; then echo "FAIL: the consumer's span before the cut was kept"; exit 1; fi
# Until 4.5 ms: the first read and the consumer's wait, 4 ms of wall.
expect "$d/until.md" "4.0 ms from the first span to the last (until 4.5 ms)"
expect "$d/until.md" "| consumer | next | 1 | 4.0 | 4000.0 | 100.0 |"
if grep -q "decode" "$d/until.md"; then echo "FAIL: a span after --until-ms was kept"; exit 1; fi
# Epoch 1 runs from 6 to 10 ms: both decodes, no read.
expect "$d/e1.md" "4.0 ms from the first span to the last (epoch 1)"
expect "$d/e1.md" "| workers (x2, mean busy per worker) | decode | 2 | 3.0 | 1500.0 | 37.5 |"
if grep -q "read" "$d/e1.md"; then echo "FAIL: epoch 0's reads were kept in epoch 1"; exit 1; fi
refused() { # args... ; the message it must print
    local want=$1; shift
    set +e
    "$py" "$src/bench/trace_summary.py" "$d/t.json" "$@" > "$d/bad.out" 2> "$d/bad.err"
    local rc=$?
    set -e
    [[ $rc == 2 ]] || { echo "FAIL: $* exited $rc, not 2"; exit 1; }
    expect "$d/bad.err" "$want"
}
refused "argument --after-ms: invalid float value: 'soon'" --after-ms soon
refused "no span of epoch 7 in $d/t.json" --epoch 7
echo "trace_summary.py: whole run, --after-ms, --until-ms, --epoch and bad values as expected"
