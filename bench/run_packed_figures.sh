#!/usr/bin/env bash
# Packed-tensor figures: feeder reading a RAW packed file (uint8 224x224x3) with
# each read path, warm and cold page cache, against PyTorch's best on the same
# file (bench/compare_torch_packed.py), over a sweep of worker counts.
#
#   bench/run_packed_figures.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR holds bench/bench_loader and tools/feeder-pack. OUT_DIR (default: $OUT,
# else ./packed-figures-DATE) receives every run's JSON and log and combined.md,
# which is also appended to docs/BENCHMARKS.md.
#
# Environment (all optional):
#   SWEEP     worker counts (default: 1,2,4,8 cut to the number of cores)
#   EPOCHS    epochs per configuration, median reported (5)
#   BATCH     batch size (256)          PREFETCH  prefetch factor (2)
#   IMAGES    size of the JPEG dataset the pack is made from (2000; made by
#             bench_loader in ~/.cache/feeder/web-IMAGES unless FEEDER_DATA is set)
#   PACK      the RAW pack (default: DATASET-224.pack beside the dataset; made if missing)
#   READS     feeder read paths (default "mmap uring direct")
#   COLD      1 (default): also cold runs: the file's pages are evicted before every
#             epoch (untimed), workers not persistent, one process per worker count
#   PYTHON    interpreter with torch and numpy (python3)
#   BENCHMARKS_MD  file to append to (docs/BENCHMARKS.md); NO_APPEND=1 appends nothing
#
# Warm runs keep their workers across epochs (--persistent, both sides). Without
# `import torch` the PyTorch columns stay empty; the feeder half still runs.
set -euo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 1 && $# -le 2 ]] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
build=$1
bench=$build/bench/bench_loader
pack_tool=$build/tools/feeder-pack
[[ -x $bench && -x $pack_tool ]] || {
    echo "run_packed_figures.sh: build bench_loader and feeder-pack in $build first" >&2; exit 2; }
out=${2:-${OUT:-./packed-figures-$(date -u +%Y%m%d-%H%M%S)}}
mkdir -p "$out"
out=$(cd "$out" && pwd)

cores=$(nproc)
if [[ -z ${SWEEP:-} ]]; then
    SWEEP=""
    for w in 1 2 4 8; do (( w <= cores )) && SWEEP+="${SWEEP:+,}$w"; done
fi
EPOCHS=${EPOCHS:-5}
BATCH=${BATCH:-256}
PREFETCH=${PREFETCH:-2}
IMAGES=${IMAGES:-2000}
READS=${READS:-mmap uring direct}
COLD=${COLD:-1}
PYTHON=${PYTHON:-python3}
export FEEDER_DATA=${FEEDER_DATA:-$HOME/.cache/feeder/web-$IMAGES}
PACK=${PACK:-${FEEDER_DATA%/}-224.pack}
md=${BENCHMARKS_MD:-$src/docs/BENCHMARKS.md}
[[ ${NO_APPEND:-0} == 1 ]] && md=""

if [[ ! -f $FEEDER_DATA/.complete && ! -f $PACK ]]; then
    echo "== making the JPEG dataset $FEEDER_DATA ($IMAGES images)" >&2
    "$bench" --images "$IMAGES" --epochs 1 --workers "$cores" --no-append >/dev/null
fi
if [[ ! -f $PACK ]]; then
    echo "== packing $FEEDER_DATA into $PACK (RAW 224x224x3, eval transform)" >&2
    "$pack_tool" --data "$FEEDER_DATA" --out "$PACK" --mode raw --size 224 --resize 256 \
        --workers "$cores"
fi

have_torch=1
if ! torch_err=$("$PYTHON" -c 'import torch, numpy' 2>&1); then
    have_torch=0
    echo "run_packed_figures.sh: $PYTHON cannot import torch/numpy (${torch_err##*$'\n'}):" \
         "skipping the PyTorch comparison" >&2
fi
common=(--data "$PACK" --epochs "$EPOCHS" --batch "$BATCH" --prefetch "$PREFETCH" --json
        --no-append)
for r in $READS; do
    echo "== feeder, warm, packed_read $r" >&2
    "$bench" "${common[@]}" --threads-sweep "$SWEEP" --persistent --packed-read "$r" \
        > "$out/feeder_warm_$r.json" 2> "$out/feeder_warm_$r.log"
done
if [[ $COLD == 1 ]]; then
    for r in $READS; do
        [[ $r == direct ]] && continue  # O_DIRECT never uses the page cache: warm is cold
        for w in ${SWEEP//,/ }; do
            echo "== feeder, cold, packed_read $r, workers $w" >&2
            "$bench" "${common[@]}" --workers "$w" --drop-cache --packed-read "$r" \
                > "$out/feeder_cold_${r}_$w.json" 2> "$out/feeder_cold_${r}_$w.log"
        done
    done
fi
if (( have_torch )); then
    tsweep=$SWEEP
    echo "== torch, warm" >&2
    "$PYTHON" "$here/compare_torch_packed.py" --data "$PACK" --workers "$tsweep" \
        --epochs "$EPOCHS" --batch "$BATCH" --prefetch "$PREFETCH" --persistent --json \
        > "$out/torch_warm.json" 2> "$out/torch_warm.log" || rm -f "$out/torch_warm.json"
    if [[ $COLD == 1 ]]; then
        echo "== torch, cold" >&2
        "$PYTHON" "$here/compare_torch_packed.py" --data "$PACK" --workers "$tsweep" \
            --epochs "$EPOCHS" --batch "$BATCH" --prefetch "$PREFETCH" --drop-cache --json \
            > "$out/torch_cold.json" 2> "$out/torch_cold.log" || rm -f "$out/torch_cold.json"
    fi
fi

cmdline="SWEEP=$SWEEP EPOCHS=$EPOCHS BATCH=$BATCH PREFETCH=$PREFETCH READS='$READS' COLD=$COLD"
cmdline+=" PACK=$PACK $0 $*"
PYTHONPATH="$here" python3 - "$out" "$md" "$cmdline" "$SWEEP" "$READS" <<'EOF'
import sys
from torchbench import load_json, md_table, publish_combined

out, md, cmd, sweep, reads = sys.argv[1:6]
workers = [int(w) for w in sweep.split(",")]
reads = reads.split()

def load(name):
    return load_json(out, name)

def gb(run):
    return run["median_gb_per_s"] if run else None

def by_workers(doc):
    return {r["workers"]: r for r in (doc or {}).get("runs", [])}

warm = {r: by_workers(load(f"feeder_warm_{r}.json")) for r in reads}
cold = {r: {w: (load(f"feeder_cold_{r}_{w}.json") or {"runs": [None]})["runs"][0]
            for w in workers} for r in reads if r != "direct"}
tw, tc = by_workers(load("torch_warm.json")), by_workers(load("torch_cold.json"))
head = ["workers"] + [f"feeder {r} warm" for r in reads] + \
       [f"feeder {r} cold" for r in cold] + ["torch warm", "torch cold", "best warm / torch"]
fmt = lambda v: "-" if v is None else f"{v:.2f}"
rows = []
for w in workers:
    fw = [gb(warm[r].get(w)) for r in reads]
    fc = [gb(cold[r].get(w)) for r in cold]
    t1, t2 = gb(tw.get(w)), gb(tc.get(w))
    best = max([v for v in fw if v is not None], default=None)
    rows.append([str(w)] + [fmt(v) for v in fw + fc] + [fmt(t1), fmt(t2),
                fmt(best / t1 if best and t1 else None)])
tbl = md_table(head, rows, [True] * len(head)) + "\n"
ref = next((load(f) for f in [f"feeder_warm_{r}.json" for r in reads] if load(f)), None)
t = load("torch_warm.json") or load("torch_cold.json")
desc = ""
if ref:
    ds = ref["dataset"]
    desc += (f"feeder {ref['version']} on {ref['label']} ({ref['cpu']}); {ds['path']}: "
             f"{ds['images']} RAW records, {ds['packed']['data_bytes'] / 1e9:.2f} GB. ")
desc += ("GB/s of delivered samples (median over epochs, each timed from its first "
         "request to its end). feeder: host batches in shared memory (no GPU copy in this "
         "build). ")
if t:
    desc += (f"torch {t['torch']}: DataLoader over whole batches gathered from a numpy "
             f"memmap, " + (f"pin_memory + non_blocking copy to {t['gpu']}. " if t["cuda"]
                            else "no CUDA (host batches). "))
else:
    desc += "PyTorch not run here (no torch): its columns are empty. "
desc += ("warm: page cache filled, workers persistent; cold: the file evicted before every "
         "epoch (posix_fadvise DONTNEED), workers started per epoch; direct = O_DIRECT, which "
         "bypasses the page cache, so its warm figure is a cold one.\n")
publish_combined(out, md, ref["label"] if ref else "?", "packed RAW tensors, feeder vs PyTorch",
                 cmd, desc, tbl)
EOF
echo "run_packed_figures.sh: JSON, logs and combined.md in $out" >&2
