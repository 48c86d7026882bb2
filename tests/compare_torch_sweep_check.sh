#!/usr/bin/env bash
# compare_torch.py --sweep --no-torch: the feeder side of the comparison runs
# bench_loader per worker count, pipeline and backend, and its JSON and its
# table (appended with --append-to) hold what was measured: medians of the
# runs, n/a with bench_loader's reason for a GPU decoder that cannot run
# (--feeder-device -1 forces that on any machine). Needs python3 3.7+ only
# (no torch); exit 77 without one.
#   compare_torch_sweep_check.sh BENCH_LOADER SOURCE_DIR
set -euo pipefail
bench=$1
src=$2
source "$(dirname "$0")/python_for.sh"
python_for 'import sys; sys.exit(sys.version_info < (3, 7))' ">= 3.7"
d=$(mktemp -d /tmp/feeder-sweep-check-XXXXXX)
trap 'rm -rf "$d"' EXIT
FEEDER_DATA=$d/data "$bench" --images 30 --size 32 --epochs 1 --workers 1 --no-append \
    > /dev/null 2>&1
"$py" "$src/bench/compare_torch.py" --no-torch --sweep 1,2 --runs 3 --epochs 1 --batch 8 \
    --size 32 --data "$d/data" --bench-loader "$bench" --feeder-decoders roi,nvjpeg \
    --feeder-device -1 --json-out "$d/sweep.json" --append-to "$d/B.md" --label testbox \
    > "$d/out" 2> "$d/err" || { cat "$d/err" >&2; exit 1; }
"$py" - "$d/sweep.json" "$d/B.md" "$d/data" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
md = open(sys.argv[2]).read()
assert doc["mode"] == "sweep" and doc["torch"] is None, doc["torch"]
assert doc["machine"]["label"] == "testbox", doc["machine"]
assert doc["dataset"] == {"path": sys.argv[3], "images": 30}, doc["dataset"]
c = doc["config"]
assert c["workers"] == [1, 2] and c["pipelines"] == ["eval", "train"], c
assert c["runs"] == 3 and c["feeder_decoders"] == ["roi", "nvjpeg"] and c["feeder_device"] == -1, c
assert c["python_decoder"] == "roi", c
assert [(r["pipeline"], r["workers"]) for r in doc["rows"]] == \
    [("eval", 1), ("eval", 2), ("train", 1), ("train", 2)], doc["rows"]
for r in doc["rows"]:
    assert r["torch"] is None and r["torch_gpu_decode"] is None, r
    roi = r["feeder"]["roi"]
    assert roi["status"] == "ok" and len(roi["runs_images_per_s"]) == 3, roi
    runs = sorted(roi["runs_images_per_s"])
    assert all(isinstance(x, (int, float)) and x > 0 for x in runs), runs
    assert roi["median_images_per_s"] == runs[1], roi
    nv = r["feeder"]["nvjpeg"]
    assert nv["status"] == "n/a" and nv["reason"].startswith("no GPU path: device = -1"), nv
    assert r["ratio"] == {"roi": None, "nvjpeg": None}, r["ratio"]
    line = [l for l in md.splitlines()
            if l.replace(" ", "").startswith(f"|{r['workers']}|{r['pipeline']}|")]
    assert len(line) == 1, (r, md)
    cells = [x.strip() for x in line[0].strip("|").split("|")]
    assert cells[2:5] == ["-", "-", f"{roi['median_images_per_s']:.0f}"], cells
    assert cells[5].startswith("n/a: no GPU path: device = -1"), cells
    py = r["feeder_python"]  # a figure, or unavailable with the reason
    assert (py["status"] == "ok" and cells[6] == f"{py['median_images_per_s']:.0f}") or \
        (py["status"] == "unavailable" and cells[6].startswith("unavailable: ")), (py, cells)
    assert cells[7:] == ["-", "-"], cells
assert ": feeder vs PyTorch, worker sweep" in md and "testbox" in md, md[:300]
head = [l for l in md.splitlines() if l.startswith("| workers |")]
assert [x.strip() for x in head[0].strip("|").split("|")][:7] == [
    "workers", "pipeline", "torch img/s", "torch GPU-decode img/s", "feeder roi img/s",
    "feeder nvjpeg img/s", "feeder (Python, roi) img/s"], head
print("compare_torch.py --sweep --no-torch: 4 points, 3 runs each, n/a rows, table appended")
PY

# A column that fails (here on purpose, as torchvision's GPU decode does on a
# file it refuses) is reported as failed with its reason; the others still run.
FEEDER_COMPARE_FAIL=roi "$py" "$src/bench/compare_torch.py" --no-torch --sweep 1 --runs 1 \
    --epochs 1 --batch 8 --size 32 --pipeline eval --data "$d/data" --bench-loader "$bench" \
    --feeder-decoders roi,turbo --feeder-device -1 --json-out "$d/fail.json" \
    > "$d/out" 2> "$d/err" || { cat "$d/err" >&2; echo "FAIL: a failed column killed the run"; exit 1; }
"$py" - "$d/fail.json" "$d/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
(r,) = doc["rows"]
roi, turbo = r["feeder"]["roi"], r["feeder"]["turbo"]
assert roi == {"status": "failed",
               "reason": "RuntimeError: failure injected by FEEDER_COMPARE_FAIL=roi"}, roi
assert turbo["status"] == "ok" and turbo["median_images_per_s"] > 0, turbo
assert "failed: RuntimeError: failure injected by FEEDER_COMPARE_FAIL=roi" in out, out
print("compare_torch.py: a failing column is reported as failed, the rest runs")
PY

# --python-decoder picks the Python column's decoder; one that falls back to
# the CPU (no GPU path at device -1) is a failed column with the binding's
# reason, never a figure under its name; a bad name is refused.
"$py" "$src/bench/compare_torch.py" --no-torch --sweep 1 --runs 1 --epochs 1 --batch 8 \
    --size 32 --pipeline eval --data "$d/data" --bench-loader "$bench" --python-decoder nvjpeg \
    --feeder-device -1 --json-out "$d/pyd.json" > "$d/out" 2> "$d/err" || { cat "$d/err" >&2; exit 1; }
"$py" - "$d/pyd.json" "$d/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
assert doc["config"]["python_decoder"] == "nvjpeg", doc["config"]
(r,) = doc["rows"]
py = r["feeder_python"]
assert py["status"] == "unavailable" or (
    py["status"] == "failed" and py["reason"].startswith("RuntimeError: decoder nvjpeg cannot run here: ")), py
assert "| feeder (Python, nvjpeg) img/s " in out, out
print("compare_torch.py --python-decoder nvjpeg: the fallback is reported, not measured:", py["status"])
PY
if "$py" "$src/bench/compare_torch.py" --no-torch --sweep 1 --python-decoder jpeg \
    --bench-loader "$bench" > /dev/null 2> "$d/err"; then
    echo "FAIL: compare_torch.py took --python-decoder jpeg"; exit 1
fi
grep -q "'jpeg': expected one of turbo, roi, nvjpeg, hybrid" "$d/err" || { cat "$d/err"; exit 1; }

# The Python column's Loader gets bench_loader's options, --persistent included.
PYTHONPATH="$src/bench" "$py" - <<'PY'
import argparse, torchbench
a = argparse.Namespace(batch=8, shuffle=1, seed=3, size=32, resize=36, prefetch=2,
                       python_decoder="hybrid", persistent=True)
kw = torchbench.feeder_python_kwargs(a, "eval", 4, 0)
assert kw == dict(batch_size=8, shuffle=True, num_workers=4, seed=3, pipeline="eval", size=32,
                  decoder="hybrid", layout="NHWC", as_torch=False, persistent_workers=True,
                  prefetch_factor=2, resize=36, device="cuda:0"), kw
a.persistent, a.shuffle = False, None
kw = torchbench.feeder_python_kwargs(a, "train", 0, -1)
assert kw["persistent_workers"] is False and kw["shuffle"] is True and "device" not in kw, kw
assert "prefetch_factor" not in kw and "resize" not in kw, kw
print("torchbench.feeder_python_kwargs: bench_loader's options, --persistent included")
PY

# --augment and --persistent reach bench_loader: its JSON config names the
# list, the sweep's config and description say it, and a bad name is refused.
"$py" "$src/bench/compare_torch.py" --no-torch --sweep 1 --runs 1 --epochs 2 --batch 8 \
    --size 32 --pipeline train --data "$d/data" --bench-loader "$bench" --persistent \
    --augment jitter,trivial --feeder-device -1 --json-out "$d/aug.json" \
    > "$d/out" 2> "$d/err" || { cat "$d/err" >&2; exit 1; }
"$py" - "$d/aug.json" "$d/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
assert doc["config"]["augment"] == "jitter,trivial" and doc["config"]["persistent"], doc["config"]
(r,) = doc["rows"]
assert r["feeder"]["roi"]["status"] == "ok", r
assert "persistent workers on both sides" in out and "augment jitter,trivial" in out, out
print("compare_torch.py --augment --persistent: passed to bench_loader and described")
PY
"$bench" --data "$d/data" --size 32 --epochs 1 --workers 0 --batch 8 --augment gray,erase --json \
    --no-append 2> /dev/null | "$py" -c 'import json,sys; c=json.load(sys.stdin)["config"]; assert c["augment"] == "gray,erase", c'
if "$bench" --augment jitter,sepia > /dev/null 2> "$d/err"; then
    echo "FAIL: --augment took an unknown name"; exit 1
fi
grep -q "'sepia' is none of jitter" "$d/err" || { cat "$d/err"; exit 1; }
if "$py" "$src/bench/compare_torch.py" --no-torch --sweep 1 --augment sepia > /dev/null 2> "$d/err"; then
    echo "FAIL: compare_torch.py took an unknown --augment"; exit 1
fi
grep -q "'sepia': expected a comma-separated list" "$d/err" || { cat "$d/err"; exit 1; }
echo "bench_loader --augment: in the JSON config; unknown names refused on both sides"

# With torch: the column, the PIL column and bench/torch_reference.py run on
# the same files, alternating, and the table gives column / reference and the
# ratios against both torch columns. Skipped (said so) where torch is absent.
tpy=""
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
    [[ -n $p ]] && "$p" -c 'import torch, torchvision' > /dev/null 2>&1 && { tpy=$p; break; }
done
if [[ -n $tpy ]]; then
    py=$tpy
    "$py" "$src/bench/compare_torch.py" --sweep 1 --runs 2 --epochs 2 --batch 8 \
        --data "$d/data" --bench-loader "$bench" --pipeline eval --pil-column --reference \
        --no-gpu-decode --no-cuda --json-out "$d/ref.json" > "$d/out" 2> "$d/err" ||
        { cat "$d/err" >&2; exit 1; }
    "$py" - "$d/ref.json" "$d/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
(r,) = doc["rows"]
c = doc["config"]
assert c["persistent"] and c["shuffle"] == 1 and c["skip_first"], c
assert c["reference"] and c["pil_column"], c
for k in ("torch", "torch_pil", "torch_reference"):
    assert r[k]["status"] == "ok" and len(r[k]["runs_images_per_s"]) == 2, (k, r[k])
assert r["torch_vs_reference"] == round(r["torch"]["median_images_per_s"]
                                        / r["torch_reference"]["median_images_per_s"], 3), r
assert r["ratio_pil"]["roi"] == round(r["feeder"]["roi"]["median_images_per_s"]
                                      / r["torch_pil"]["median_images_per_s"], 3), r
assert doc["torch"]["transforms"].startswith("transforms"), doc["torch"]
for word in ("column / reference", "torch PIL img/s", "roi / torch PIL",
             "torch reference: bench/torch_reference.py", "persistent workers on both sides",
             "shuffled"):
    assert word in out, (word, out)
print("compare_torch.py --reference --pil-column: both torch columns and the reference, "
      "alternating, with their ratios")
PY
    if "$py" "$src/bench/compare_torch.py" --sweep 1 --runs 1 --epochs 1 --size 32 --reference \
        --pipeline eval --no-gpu-decode --no-cuda --data "$d/data" --bench-loader "$bench" \
        --json-out "$d/ref32.json" > /dev/null 2>&1; then
        "$py" -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"][0]["torch_reference"]; assert r["status"] == "n/a" and "Resize 256 / crop 224" in r["reason"], r' "$d/ref32.json"
        echo "compare_torch.py --reference at another size: n/a with the reason"
    else
        echo "FAIL: compare_torch.py --reference --size 32 failed"; exit 1
    fi
else
    echo "compare_torch.py --reference: skipped (no python3 with torch and torchvision)"
fi
