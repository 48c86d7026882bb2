#!/usr/bin/env bash
# examples/python/train_ddp.py under torchrun on a machine with 2 GPUs: one
# feeder loader per rank (the Python module, torch's DistributedSampler),
# 1 rank and then 2 ranks with the same workers per rank, for each decoder
# and model asked. Every run must pass its checks (labels at the sampler's
# indices, shares disjoint but for padding and covering the set). Prints a
# Markdown table of images/s per GPU and the per-GPU ratio (2 ranks / 1),
# beside the control: two 1-GPU jobs run at once, one per GPU, with no
# collective between them (what the machine gives two loaders side by side).
# The table is also written to $OUT/ddp_gpu_check.md; logs go to $OUT.
#   DATA=DIR bash scripts/ddp_gpu_check.sh [BUILD]
# DATA: an image folder (default: make_set --set web, 10,000 images, made in
# /tmp/feeder-ddp-web10k). BUILD: a Release build with the CUDA plugin
# (default build-gpu; built here if missing). WORKERS (default 7 per rank),
# DECODERS (default "roi nvjpeg synthetic"; synthetic is train_ddp.py
# --synthetic, the small model on a batch made on the device with no loader:
# the model's and the collective's own scaling, run for the small model only),
# MODELS (default "none small"), EPOCHS (4), BATCH (256 per rank).
# Exit 0: all runs passed their checks (or no GPU: skipped); 1: a run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-./gpu-out}
mkdir -p "$out"
log=$out/ddp_gpu_check.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ((ngpu < 1)); then
  say "ddp_gpu_check: no GPU here (nvidia-smi lists none): skipped"
  exit 0
fi
if [[ ! -e $build/libfeeder.so ]]; then
  { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release && cmake --build "$build" -j"$(nproc)"; } \
    >"$out/ddp_build.log" 2>&1 || { tail -30 "$out/ddp_build.log"; exit 1; }
fi
py=$build/py
FEEDER_BUILD_DIR=$PWD/$build python3 python/setup.py -q build_py -d "$py" build_ext -f -b "$py" \
  -t "$build/pytmp" >>"$out/ddp_build.log" 2>&1 || { tail -30 "$out/ddp_build.log"; exit 1; }
data=${DATA:-/tmp/feeder-ddp-web10k}
if [[ -z ${DATA:-} && ! -d $data ]]; then
  "$build/bench/make_set" --set web "$data" 10000 >"$out/ddp_make_set.log" 2>&1 ||
    { tail "$out/ddp_make_set.log"; exit 1; }
fi
workers=${WORKERS:-7}
epochs=${EPOCHS:-4}
batch=${BATCH:-256}
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$py
run=(torchrun)
command -v torchrun >/dev/null || run=(python3 -m torch.distributed.run)
status=0
rows=()
for decoder in ${DECODERS:-roi nvjpeg synthetic}; do
  for model in ${MODELS:-none small}; do
    src=(--decoder "$decoder")
    if [[ $decoder == synthetic ]]; then
      [[ $model == small ]] || continue
      src=(--synthetic)
    fi
    for np in 1 2; do
      ((np <= ngpu)) || continue
      name=ddp-$decoder-$model-np$np
      cmd=("${run[@]}" --standalone --nproc_per_node "$np" examples/python/train_ddp.py --data "$data"
           --workers "$workers" "${src[@]}" --model "$model" --epochs "$epochs"
           --batch "$batch" --json "$out/$name.json")
      say "== ${cmd[*]}"
      if ! timeout 300 "${cmd[@]}" >"$out/$name.log" 2>&1; then
        tail -20 "$out/$name.log" | tee -a "$log"
        say "ddp_gpu_check: $name failed"
        status=1
        continue
      fi
      grep '^epoch' "$out/$name.log" | tee -a "$log"
      rows+=("$out/$name.json")
    done
    # The control: two 1-GPU jobs at once, one on each GPU, no collective
    # between them: what the machine gives two loaders side by side.
    if ((ngpu >= 2)); then
      pids=()
      for g in 0 1; do
        name=ddp-$decoder-$model-side$g
        CUDA_VISIBLE_DEVICES=$g timeout 300 "${run[@]}" --standalone --nproc_per_node 1 \
          examples/python/train_ddp.py --data "$data" --workers "$workers" "${src[@]}" \
          --model "$model" --epochs "$epochs" --batch "$batch" --json "$out/$name.json" \
          >"$out/$name.log" 2>&1 &
        pids+=($!)
      done
      for g in 0 1; do
        if wait "${pids[$g]}"; then
          rows+=("$out/ddp-$decoder-$model-side$g.json")
        else
          tail -20 "$out/ddp-$decoder-$model-side$g.log" | tee -a "$log"
          say "ddp_gpu_check: ddp-$decoder-$model-side$g failed"
          status=1
        fi
      done
    fi
  done
done
machine="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); $ngpu x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
python3 - "$machine" "${rows[@]}" <<'PY' | tee "$out/ddp_gpu_check.md" | tee -a "$log"
import json, sys
machine, files = sys.argv[1], sys.argv[2:]
runs = [json.load(open(f)) for f in files]
print(f"{machine}; {runs[0]['images'] if runs else 0} images, {max((r['workers_per_rank'] for r in runs), default=0)} "
      "workers a rank, batch per rank "
      f"{runs[0]['batch'] if runs else 0}, median of the epochs after the first\n")
print("| decoder | model | 1 GPU: images/s | 2 GPUs: images/s per GPU | total | per GPU, 2 / 1 "
      "| two 1-GPU jobs at once: images/s each | waiting for the loader, 1 GPU "
      "| waiting for the loader, 2 GPUs, each rank | checks |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
one, one_wait, two, side, bad = {}, {}, {}, {}, {}
# a rank's time in next(): its share of the epoch; one step's median / 90th percentile
wait_s = lambda w: f"{w['share']:.0%} ({w['step_ms_p50']:.1f} / {w['step_ms_p90']:.1f} ms)"
for f, r in zip(files, runs):
    key = (r["decoder"], r["model"])
    if not all(r["checks"].values()):
        bad.setdefault(key, []).append(f"{f}: {r['checks']}")
    if "-side" in f:
        side.setdefault(key, []).append(r["images_per_s_total"])
    elif r["world_size"] == 1:
        one[key] = r["images_per_s_total"]
        one_wait[key] = r["loader_wait_per_rank"][0]
    else:
        two[key] = r
for key, r in two.items():
    per = r["images_per_s_per_rank"]
    base = one.get(key)
    ratio = f"{min(per) / base:.1%}" if base else "n/a"
    base_s = f"{base:,}" if base else "n/a"
    side_s = ", ".join(f"{v:,}" for v in side.get(key, [])) or "n/a"
    ok = "ok" if key not in bad else "FAILED " + "; ".join(bad[key])
    print(f"| {key[0]} | {key[1]} | {base_s} | {', '.join(f'{v:,}' for v in per)} "
          f"| {r['images_per_s_total']:,} | {ratio} | {side_s} "
          f"| {wait_s(one_wait[key]) if key in one_wait else 'n/a'} "
          f"| {', '.join(wait_s(w) for w in r['loader_wait_per_rank'])} | {ok} |")
PY
for f in "${rows[@]}"; do
  grep -q '"labels_match_sampler": true' "$f" && grep -q '"covers_dataset": true' "$f" &&
    grep -q '"disjoint_but_padding": true' "$f" || status=1
done
exit $status
