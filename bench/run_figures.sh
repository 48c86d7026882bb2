#!/usr/bin/env bash
# The benchmark figures: feeder against PyTorch's DataLoader on the same files,
# for the eval and the train pipeline, over a sweep of worker counts.
#
#   bench/run_figures.sh BUILD_DIR [OUT_DIR]
#   bench/run_figures.sh --docs BUILD_DIR [OUT_DIR]
#
# --docs: the decoders' table and the PyTorch sweep of docs/BENCHMARKS.md in one run,
# everything under OUT_DIR:
#   compare_torch.json/.md/.log  compare_torch.py --sweep 1,2,4,8,15 (eval and train, 3 runs
#                                of 2 epochs each, the second counted, 2,000 JPEGs): torch, torchvision GPU
#                                decode, feeder roi/nvjpeg/hybrid (--device 0 with CUDA)
#   decoders.json/.log           bench_loader --decoder all --device 0 on web-10000
#                                (10,000 JPEGs), 15 workers, 3 epochs
#   compare_torch.png            bench/plot_compare.py's chart (when matplotlib is there;
#                                else the command to run where it is)
#   BENCHMARKS.md                both tables as records for docs/BENCHMARKS.md
#   Time on an H100 machine with 16 cores: the sweep with roi and nvjpeg takes about 7 min,
#   --decoder all ~1.5 min (packing 10,000 RAW records included), making the two datasets
#   ~50 s the first time. SWEEP_ONLY=1 and ALL_ONLY=1 run one half each, for a machine
#   that limits how long one command may run.
#   Override SWEEP, RUNS, DECODERS, WORKERS, DEVICE, SWEEP_IMAGES, ALL_IMAGES.
#
# BUILD_DIR holds bench/bench_loader (cmake --build BUILD_DIR --target bench_loader).
# OUT_DIR (default: $OUT, else ./figures-DATE) receives the raw JSON of every
# run, their logs, and combined.md / combined.json.
# The combined table is appended to docs/BENCHMARKS.md, and so is bench_loader's
# own detailed table per pipeline.
#
# Environment (all optional):
#   SWEEP      worker counts (default: 0,1,2,4,8,15 cut to nproc-1, plus nproc-1)
#   EPOCHS     epochs per configuration, median reported (3)
#   BATCH      batch size (256)         PREFETCH  prefetch factor (2)
#   PIPELINES  "eval train"             FEEDER_DATA  dataset folder (made if missing)
#   PYTHON     interpreter with torch (python3)
#   BENCHMARKS_MD  file to append to (docs/BENCHMARKS.md); NO_APPEND=1 appends nothing
#   CHECKSUM=1 hash every batch in feeder too (costs time in the consumer thread)
#   FEEDER_ARGS    extra bench_loader arguments, e.g. "--decoder turbo"
#
# Needs no network. Without a working `import torch` the PyTorch half is skipped
# (and said so); the feeder half still runs.
set -euo pipefail

usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; }
docs_run=0
[[ ${1:-} == --docs ]] && { docs_run=1; shift; }
[[ $# -ge 1 && $# -le 2 ]] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
build=$1
bench=""
for c in "$build/bench/bench_loader" "$build/bench_loader"; do
    [[ -x $c ]] && { bench=$c; break; }
done
[[ -n $bench ]] || { echo "run_figures.sh: no bench_loader in $build (build the bench_loader target first)" >&2; exit 2; }

out=${2:-${OUT:-./figures-$(date -u +%Y%m%d-%H%M%S)}}
mkdir -p "$out"
out=$(cd "$out" && pwd)

cores=$(nproc)
PYTHON=${PYTHON:-python3}

if (( docs_run )); then
    SWEEP=${SWEEP:-1,2,4,8,15}
    RUNS=${RUNS:-3}
    DECODERS=${DECODERS:-roi,nvjpeg}
    WORKERS=${WORKERS:-$(( cores > 1 ? cores - 1 : 1 ))}
    DEVICE=${DEVICE:-0}
    SWEEP_IMAGES=${SWEEP_IMAGES:-2000}
    ALL_IMAGES=${ALL_IMAGES:-10000}
    md5=${BENCHMARKS_MD:-$out/BENCHMARKS.md}
    cache=$HOME/.cache/feeder
    t_start=$SECONDS
    echo "run_figures.sh --docs: results in $out" >&2
    # The datasets (made once from bench/photos, then reused).
    for n in "$SWEEP_IMAGES" "$ALL_IMAGES"; do
        FEEDER_DATA=$cache/web-$n "$bench" --images "$n" --workers 1 --epochs 1 \
            --batch 64 --no-append > /dev/null
    done
    if [[ -z ${ALL_ONLY:-} ]]; then
        echo "== compare_torch.py --sweep $SWEEP ($(( SECONDS - t_start )) s so far)" >&2
        torch_args=()
        "$PYTHON" -c 'import torch, torchvision' 2>/dev/null || {
            echo "run_figures.sh: $PYTHON cannot import torch/torchvision: feeder side only" >&2
            torch_args=(--no-torch --feeder-device "$DEVICE"); }
        "$PYTHON" "$here/compare_torch.py" --sweep "$SWEEP" --runs "$RUNS" --epochs 2 --skip-first \
            --data "$cache/web-$SWEEP_IMAGES" --feeder-decoders "$DECODERS" \
            --bench-loader "$bench" --json-out "$out/compare_torch.json" --append-to "$md5" \
            "${torch_args[@]}" > "$out/compare_torch.md" 2> "$out/compare_torch.log" ||
            { tail -5 "$out/compare_torch.log" >&2; exit 1; }
        cat "$out/compare_torch.md"
    fi
    if [[ -z ${SWEEP_ONLY:-} ]]; then
        echo "== bench_loader --decoder all ($(( SECONDS - t_start )) s so far)" >&2
        FEEDER_DATA=$cache/web-$ALL_IMAGES "$bench" --images "$ALL_IMAGES" --decoder all \
            --device "$DEVICE" --workers "$WORKERS" --epochs 3 --json --append-to "$md5" \
            > "$out/decoders.json" 2> "$out/decoders.log" || { tail -5 "$out/decoders.log" >&2; exit 1; }
    fi
    echo "== chart ($(( SECONDS - t_start )) s so far)" >&2
    [[ -f $out/compare_torch.json ]] || { echo "run_figures.sh --docs: done" >&2; exit 0; }
    plot=(bench/plot_compare.py "$out/compare_torch.json" "$out/compare_torch.png")
    plotpy=""
    for p in "$PYTHON" python3 /usr/bin/python3; do
        "$p" -c 'import matplotlib' 2>/dev/null && { plotpy=$p; break; }
    done
    if [[ -n $plotpy ]]; then
        (cd "$src" && "$plotpy" "${plot[@]}")
    else
        echo "run_figures.sh: no matplotlib here; where there is, run: python3" \
             "${plot[*]} (from the source tree; the chart goes to docs/img/compare_torch.png)" >&2
    fi
    echo "run_figures.sh --docs: done in $(( SECONDS - t_start )) s; results in $out" >&2
    exit 0
fi

if [[ -z ${SWEEP:-} ]]; then
    max=$(( cores > 1 ? cores - 1 : 1 ))
    SWEEP=""
    for w in 0 1 2 4 8 15 16 32 64; do
        (( w <= max )) && SWEEP+="${SWEEP:+,}$w"
    done
    [[ ",$SWEEP," == *",$max,"* ]] || SWEEP+=",$max"
fi
EPOCHS=${EPOCHS:-3}
BATCH=${BATCH:-256}
PREFETCH=${PREFETCH:-2}
PIPELINES=${PIPELINES:-eval train}
export FEEDER_DATA=${FEEDER_DATA:-$HOME/.cache/feeder/web-2000}
md=${BENCHMARKS_MD:-$src/docs/BENCHMARKS.md}
[[ ${NO_APPEND:-0} == 1 ]] && md=""
read -r -a extra <<< "${FEEDER_ARGS:-}"

echo "run_figures.sh: sweep $SWEEP, $EPOCHS epochs, batch $BATCH, prefetch $PREFETCH," \
     "pipelines: $PIPELINES; data $FEEDER_DATA; results in $out" >&2

have_torch=1
if ! torch_err=$("$PYTHON" -c 'import torch, torchvision' 2>&1); then
    have_torch=0
    echo "run_figures.sh: $PYTHON cannot import torch/torchvision" \
         "(${torch_err##*$'\n'}): skipping the PyTorch comparison" >&2
fi

for p in $PIPELINES; do
    args=(--threads-sweep "$SWEEP" --epochs "$EPOCHS" --pipeline "$p" --batch "$BATCH"
          --prefetch "$PREFETCH" --json)
    [[ ${CHECKSUM:-0} == 1 ]] && args+=(--checksum)
    if [[ -n $md ]]; then args+=(--append-to "$md"); else args+=(--no-append); fi
    echo "== feeder, $p" >&2
    # No --data: bench_loader makes $FEEDER_DATA on the first run.
    "$bench" "${args[@]}" "${extra[@]}" > "$out/feeder_$p.json" \
        2> >(tee "$out/feeder_$p.log" >&2)
    if (( have_torch )); then
        echo "== torch, $p" >&2
        if ! "$PYTHON" "$here/compare_torch.py" --data "$FEEDER_DATA" --workers "$SWEEP" \
            --epochs "$EPOCHS" --pipeline "$p" --batch "$BATCH" --prefetch "$PREFETCH" \
            --json > "$out/torch_$p.json" 2> >(tee "$out/torch_$p.log" >&2); then
            echo "run_figures.sh: compare_torch.py failed for $p (log: $out/torch_$p.log)" >&2
            rm -f "$out/torch_$p.json"
        fi
    fi
done
wait  # for the tee processes

# Combine with the standard library only: any python3 will do.
combiner=python3
command -v python3 >/dev/null || combiner=$PYTHON
cmdline="SWEEP=$SWEEP EPOCHS=$EPOCHS BATCH=$BATCH PREFETCH=$PREFETCH PIPELINES='$PIPELINES'"
# shellcheck disable=SC2016  # the single quotes are literal, inside double quotes
cmdline+=" FEEDER_DATA=$FEEDER_DATA${FEEDER_ARGS:+ FEEDER_ARGS='$FEEDER_ARGS'} $0 $*"
PYTHONPATH="$here" "$combiner" - "$out" "$md" "$cmdline" "$PIPELINES" <<'EOF'
import json, os, sys
from torchbench import load_json, md_table, publish_combined

out, md, cmd, pipelines = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()

def load(name):
    return load_json(out, name)

def eff(rate, w, rate0):
    return rate / (w * rate0) if w > 0 and rate0 else None

def fmt(v, spec):
    return "-" if v is None else format(v, spec)

head = ["pipeline", "workers", "feeder images/s", "torch images/s", "ratio",
        "feeder first batch ms", "torch first batch ms", "feeder scaling eff.",
        "torch scaling eff."]
rows, combined = [], []
meta = {}
for p in pipelines:
    fe = load(f"feeder_{p}.json")
    to = load(f"torch_{p}.json")
    if fe is None:
        continue
    meta.setdefault("feeder", {k: fe[k] for k in ("version", "label", "cpu", "cores", "dataset")})
    if to:
        meta.setdefault("torch", {k: to[k] for k in ("torch", "torchvision", "decoder", "cuda",
                                                      "gpu", "torch_threads")})
    truns = {r["workers"]: r for r in (to or {}).get("runs", [])}
    t0 = truns.get(0, {}).get("median_images_per_s")
    for r in fe["runs"]:
        w = r["workers"]
        t = truns.get(w)
        fr = r["median_images_per_s"]
        tr = t["median_images_per_s"] if t else None
        row = dict(pipeline=p, workers=w, feeder_images_per_s=fr, torch_images_per_s=tr,
                   ratio=(fr / tr) if tr else None,
                   feeder_first_batch_ms=r["median_first_batch_ms"],
                   torch_first_batch_ms=t["median_first_batch_ms"] if t else None,
                   feeder_scaling_efficiency=r.get("scaling_efficiency"),
                   torch_scaling_efficiency=eff(tr, w, t0) if tr else None)
        combined.append(row)
        rows.append([p, str(w), fmt(fr, ".0f"), fmt(tr, ".0f"), fmt(row["ratio"], ".2f"),
                     fmt(row["feeder_first_batch_ms"], ".1f"),
                     fmt(row["torch_first_batch_ms"], ".1f"),
                     fmt(row["feeder_scaling_efficiency"], ".2f"),
                     fmt(row["torch_scaling_efficiency"], ".2f")])

if not rows:
    sys.exit("run_figures.sh: no feeder results to combine")
tbl = md_table(head, rows, [False] + [True] * (len(head) - 1)) + "\n"

f = meta["feeder"]
desc = (f"feeder {f['version']} on {f['label']} ({f['cpu']}); dataset {f['dataset']['path']}: "
        f"{f['dataset']['images']} images, {f['dataset']['jpeg_bytes'] / 1e6:.1f} MB of JPEG.\n")
if "torch" in meta:
    t = meta["torch"]
    desc += (f"torch {t['torch']}, torchvision {t['torchvision']}, decode {t['decoder']}, "
             + (f"pin_memory + non_blocking copy to {t['gpu']}" if t["cuda"] else "no CUDA")
             + ". feeder here: host batches (no GPU copy in this build).\n")
else:
    desc += "PyTorch not available on this machine: torch columns empty.\n"
desc += ("Medians over epochs; each epoch timed from the first request (iter(loader) for "
         "torch, which forks its workers) to its end. ratio = feeder / torch. "
         "Scaling efficiency = images/s / (workers × images/s at workers 0).\n")
with open(os.path.join(out, "combined.json"), "w") as fh:
    json.dump(dict(meta=meta, command=cmd, rows=combined), fh, indent=2)
    fh.write("\n")
publish_combined(out, md, f["label"], "feeder vs PyTorch DataLoader", cmd, desc, tbl)
EOF
echo "run_figures.sh: raw JSON, logs and combined.md in $out" >&2
