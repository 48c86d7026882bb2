#!/usr/bin/env bash
# examples/mpi_train under mpirun (2 ranks, CPU path) reading JPEG packs as a
# shards dataset, first from local files, then from lighttpd on 127.0.0.1
# (started and stopped here): each run's ranks read disjoint, equal sets of
# whole shards that cover the dataset (the index-sum check of mpi_check.sh),
# and the HTTP run ends with the very weights of the local run.
#   scripts/mpi_remote_check.sh [BUILD]      (default: build)
# Exit 0: all good; 1: a check failed; 77: skipped (no mpirun, lighttpd or mpi_train).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1-build}
bin=$build/examples/mpi_train
pack=$build/tools/feeder-pack
for need in mpirun /usr/sbin/lighttpd python3; do
  command -v "$need" >/dev/null || { echo "mpi_remote_check: no $need: skipped"; exit 77; }
done
[ -x "$bin" ] && [ -x "$pack" ] || { echo "mpi_remote_check: $bin or $pack not built: skipped"; exit 77; }
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
unset FEEDER_RANK FEEDER_WORLD_SIZE FEEDER_LOCAL_RANK FEEDER_LOCAL_SIZE
root=()
[ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
work=$(mktemp -d /tmp/feeder-mpi-remote-XXXXXX)
server=
cleanup() {
  [ -z "$server" ] || { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT

# 240 images (mpi_train makes them), dealt into 6 lists of 40 'path label'
# lines (label = the class folder's rank in sorted order), packed as JPEG.
timeout 300 mpirun "${root[@]}" -np 1 "$bin" --cache "$work/data" --images 240 --size 64 \
  --workers 1 --epochs 1 --device -1 >/dev/null 2>&1
mkdir -p "$work/www"
python3 - "$work/data" <<'PY'
import os, sys
d = sys.argv[1]
classes = sorted(c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c)))
files = [(f"{c}/{f}", k) for k, c in enumerate(classes)
         for f in sorted(os.listdir(os.path.join(d, c)))]
assert len(files) == 240, len(files)
for s in range(6):
    with open(os.path.join(d, f"s-{s}.txt"), "w") as out:
        for p, k in files[s::6]:
            out.write(f"{p} {k}\n")
PY
for s in 0 1 2 3 4 5; do
  "$pack" --data "$work/data/s-$s.txt" --out "$work/www/s-$s.pack" --mode jpeg --quiet
done

source scripts/lighttpd.sh
start_lighttpd "$work/www" "$work"
server=$lighttpd_pid
port=$lighttpd_port

run() { # NAME PATTERN
  echo "== mpirun -np 2 mpi_train --shards $2 =="
  if ! FEEDER_CACHE_DIR="$work/cache-$1" timeout 300 mpirun "${root[@]}" -np 2 "$bin" \
      --shards "$2" --window 2 --size 64 --workers 1 --batch 20 --epochs 2 --shuffle 1 \
      --drop-last 1 --device -1 >"$work/$1.log" 2>&1; then
    cat "$work/$1.log"
    echo "mpi_remote_check: the $1 run failed" >&2
    exit 1
  fi
  grep -E "^rank|summary" "$work/$1.log"
}
run local "$work/www/s-{0..5}.pack"
run http "http://127.0.0.1:$port/s-{0..5}.pack"

PYTHONPATH="$PWD/scripts" python3 - "$work/local.log" "$work/http.log" <<'PY'
import sys
from mpi_summary import index_sum, summaries, want_sum
runs = []
for log in sys.argv[1:]:
    ranks = summaries(open(log))
    if sorted(ranks) != [0, 1]:
        sys.exit(f"mpi_remote_check: {log}: summaries from ranks {sorted(ranks)}")
    if {kv["samples"] for kv in ranks.values()} != {"240"}:
        sys.exit(f"mpi_remote_check: {log}: samples per rank {[kv['samples'] for kv in ranks.values()]}, "
                 "expected 240 each (2 epochs x 120)")
    if index_sum(ranks) != want_sum(240, 2):
        sys.exit(f"mpi_remote_check: {log}: the ranks' shards overlap or miss samples")
    if len({kv["weights"] for kv in ranks.values()}) != 1:
        sys.exit(f"mpi_remote_check: {log}: the ranks' weights differ")
    runs.append(ranks[0]["weights"])
if runs[0] != runs[1]:
    sys.exit(f"mpi_remote_check: weights differ: local {runs[0]}, http {runs[1]}")
print(f"mpi_remote_check: ok: 2 ranks, disjoint equal shards covering all 240 samples, "
      f"HTTP weights identical to local ({runs[0]})")
PY
