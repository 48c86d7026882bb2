#!/usr/bin/env bash
# bench/plot_compare.py on its test fixture (bench/testdata/, invented numbers
# in the shape of compare_torch.py --sweep output): a PNG of the expected
# size is written, and input that is not sweep output is refused. Exit 77
# (skipped) when no python3 with matplotlib is found ($PYTHON, python3,
# /usr/bin/python3).
#   plot_compare_check.sh SOURCE_DIR
set -euo pipefail
src=$1
source "$(dirname "$0")/python_for.sh"
python_for 'import matplotlib' "with matplotlib"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$py" "$src/bench/plot_compare.py" "$src/bench/testdata/compare_torch_sweep.FIXTURE.json" \
    "$d/chart.png" --dpi 100
# Two panels of 6 x 4.5 inches at 100 dpi: 1200 x 450 pixels.
"$py" - "$d/chart.png" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
assert data[12:16] == b"IHDR", data[12:16]
size = struct.unpack(">II", data[16:24])
assert size == (1200, 450), size
assert len(data) > 20000, len(data)  # lines, labels and text, not a blank canvas
print("chart.png: PNG", size, len(data), "bytes")
PY
echo '{"mode": "single", "rows": []}' > "$d/bad.json"
if "$py" "$src/bench/plot_compare.py" "$d/bad.json" "$d/bad.png" 2> "$d/err"; then
    echo "plot_compare.py accepted non-sweep input" >&2
    exit 1
fi
[[ $(cat "$d/err") == "plot_compare.py: $d/bad.json: not compare_torch.py --sweep output" ]] ||
    { cat "$d/err" >&2; exit 1; }
[[ ! -e $d/bad.png ]] || { echo "a PNG was written for bad input" >&2; exit 1; }
echo "plot_compare.py checks passed"
