#!/usr/bin/env bash
# bench/trace_summary.py on a small invented trace: the whole run's shares,
# the steady part's with --after-ms (spans that start before the cut left
# out, the wall measured from the first span kept), the workers' tracks
# merged into one line per span name, and a bad --after-ms refused (exit 2,
# naming the value). Exit 77 (skipped) when no python3 is found.
#   trace_summary_check.sh SOURCE_DIR
set -euo pipefail
src=$1
py=""
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
    [[ -n $p ]] && command -v "$p" >/dev/null 2>&1 && { py=$p; break; }
done
[[ -n $py ]] || { echo "no python3: skipped"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
# Two workers and the consumer; times in microseconds. Worker 0 reads 1 ms at
# 0 and 5 ms and decodes 1 ms at 9 ms; worker 1 decodes 2 ms at 6 ms; the
# consumer waits 4 ms from 0.
cat > "$d/t.json" <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "thread_name", "tid": 1, "args": {"name": "worker 0 (pid 5)"}},
 {"ph": "M", "name": "thread_name", "tid": 2, "args": {"name": "worker 1 (pid 6)"}},
 {"ph": "M", "name": "thread_name", "tid": 3, "args": {"name": "consumer"}},
 {"ph": "X", "name": "read", "tid": 1, "ts": 0, "dur": 1000},
 {"ph": "X", "name": "read", "tid": 1, "ts": 5000, "dur": 1000},
 {"ph": "X", "name": "decode", "tid": 1, "ts": 9000, "dur": 1000},
 {"ph": "X", "name": "decode", "tid": 2, "ts": 6000, "dur": 2000},
 {"ph": "X", "name": "next", "tid": 3, "ts": 0, "dur": 4000}
]}
JSON
"$py" "$src/bench/trace_summary.py" "$d/t.json" > "$d/all.md"
"$py" "$src/bench/trace_summary.py" "$d/t.json" --after-ms 4.5 > "$d/after.md"
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
set +e
"$py" "$src/bench/trace_summary.py" "$d/t.json" --after-ms soon > "$d/bad.out" 2> "$d/bad.err"
rc=$?
set -e
[[ $rc == 2 ]] || { echo "FAIL: --after-ms soon exited $rc, not 2"; exit 1; }
expect "$d/bad.err" "--after-ms wants milliseconds, not 'soon'"
echo "trace_summary.py: whole run, --after-ms and a bad value as expected"
