#!/usr/bin/env bash
# The feeder.DataLoader figures of docs/BENCHMARKS.md ("feeder.DataLoader against
# torch's DataLoader"): makes the web set of 10,000 images with and without its
# large photos under SETS, builds the Python module into BUILD/python, and runs
# bench/bench_dataloader.py at 4 and 15 workers, appending the records to OUT.
#   bash bench/run_dataloader_figures.sh BUILD OUT [SETS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "$1"); out=$2; sets=${3:-/tmp/feeder-sets}
py=${PYTHON:-python3}
mkdir -p "$sets"
[[ -d $sets/web10k ]] || "$build/bench/make_set" --set web "$sets/web10k" 10000
[[ -d $sets/web10k-nolarge ]] || "$build/bench/make_set" --set web --large 0 "$sets/web10k-nolarge" 10000
FEEDER_BUILD_DIR=$build "$py" python/setup.py -q build_py -d "$build/python" \
  build_ext -f -b "$build/python" -t "$build/python-temp" >/dev/null
export PYTHONPATH=$build/python
for w in 4 15; do
  "$py" bench/bench_dataloader.py --data "$sets/web10k" --workers "$w" --epochs 3 --batch 64 \
    --cases pil,small,native,float --bench-loader "$build/bench/bench_loader" --append-to "$out" \
    --label "web 10k (make_set --set web 10000: 3 % photos of 2,000-3,000 px)"
  "$py" bench/bench_dataloader.py --data "$sets/web10k-nolarge" --workers "$w" --epochs 3 \
    --batch 64 --cases native --bench-loader "$build/bench/bench_loader" --append-to "$out" \
    --label "web 10k without large photos (make_set --set web --large 0 10000)"
done
