#!/usr/bin/env bash
# bench/pillow_set.py, the mixed set made apart from make_set: N files in ten
# classes, the mix it prints is the mix on disk (kinds, subsampling,
# progressive, large; read back with Pillow), the same seed makes the same
# bytes, a bad photo folder is named, and feeder's CPU decoder loads the set.
# Skipped (77) where no python3 has Pillow.
#   pillow_set_check.sh BENCH_LOADER SOURCE_DIR
set -euo pipefail
bench=$1
src=$2
source "$(dirname "$0")/python_for.sh"
python_for 'import PIL' "with Pillow"
d=$(mktemp -d /tmp/feeder-pillow-set-XXXXXX)
trap 'rm -rf "$d"' EXIT
"$py" "$src/bench/pillow_set.py" --photos "$src/bench/photos" --seed 5 "$d/a" 200 > "$d/out"
"$py" - "$d/a" "$d/out" <<'PY'
import collections, os, re, sys
from PIL import Image, JpegImagePlugin
root, line = sys.argv[1], open(sys.argv[2]).read().strip()
classes = sorted(os.listdir(root))
assert classes == [f"class_{c:02d}" for c in range(10)], classes
files = [os.path.join(root, c, f) for c in classes for f in sorted(os.listdir(os.path.join(root, c)))]
assert len(files) == 200 and all(len(os.listdir(os.path.join(root, c))) == 20 for c in classes)
kinds, prog, large, size = collections.Counter(), 0, 0, 0
for f in files:
    im = Image.open(f)
    size += os.path.getsize(f)
    large += min(im.size) >= 1600
    if im.format == "PNG":
        kinds["png"] += 1
        continue
    assert im.format == "JPEG", (f, im.format)
    prog += bool(im.info.get("progressive") or im.info.get("progression"))
    if im.mode != "RGB":
        kinds[{"L": "gray", "CMYK": "cmyk"}[im.mode]] += 1
    else:
        kinds[{0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}[JpegImagePlugin.get_sampling(im)]] += 1
want = (f"made 200 files in {root}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        + f"; progressive {prog}, short side >= 1600: {large}, mean {size / 200 / 1000:.1f} KB")
assert line == want, (line, want)
assert kinds["4:2:0"] > kinds["4:4:4"] > kinds["4:2:2"] > 0 and prog > 0, line
print("pillow_set.py: 200 files in 10 classes, the printed mix is the mix on disk:", line)
PY
"$py" "$src/bench/pillow_set.py" --photos "$src/bench/photos" --seed 5 "$d/b" 200 > /dev/null
diff -r "$d/a" "$d/b" > /dev/null || { echo "FAIL: the same seed made other files"; exit 1; }
"$py" "$src/bench/pillow_set.py" --photos "$src/bench/photos" --seed 6 "$d/c" 20 > /dev/null
if diff -r "$d/a/class_00/p000000.jpg" "$d/c/class_00/p000000.jpg" > /dev/null; then
    echo "FAIL: another seed made the same file"; exit 1
fi
if "$py" "$src/bench/pillow_set.py" --photos "$d/a/class_00/../nowhere" "$d/e" 5 2> "$d/err"; then
    echo "FAIL: a missing photo folder was taken"; exit 1
fi
grep -q "^pillow_set: --photos .*nowhere: no such folder$" "$d/err" || { cat "$d/err"; exit 1; }
"$bench" --data "$d/a" --decoder roi --workers 2 --epochs 1 --size 64 --json --no-append \
    > "$d/run.json" 2> "$d/run.err" || { cat "$d/run.err"; exit 1; }
"$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert r["status"] == "ok" and r["epochs"][0]["images"] == 200 and r["epochs"][0]["skipped"] == 0, r
' "$d/run.json"
echo "pillow_set.py: same seed same bytes; bad folder named; bench_loader loads all 200"
