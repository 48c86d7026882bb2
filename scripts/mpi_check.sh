#!/usr/bin/env bash
# Run examples/mpi_train under mpirun on the CPU path and check what its ranks
# report: equal batch counts, disjoint shards that cover the dataset minus the
# tail drop_last removes, and identical final weights.
#   scripts/mpi_check.sh [PATH_TO_mpi_train]     (default: build/examples/mpi_train)
# Exit 0: all good; 1: a check failed; 77: skipped (no mpirun or no mpi_train).
#
# Each rank prints "mpi_train: summary rank= world= n= epochs= batches= samples=
# index_sum= weights=", where index_sum is the sum mod 2^64 of splitmix64(i)
# over every sample index the rank saw. The ranks' sums add up to the sum over
# the set they read together only when no index was read twice and none was
# missed (up to a 2^-64 accident), so comparing it with the sum over the
# expected set checks disjointness and coverage at once.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1-build/examples/mpi_train}
if ! command -v mpirun >/dev/null; then
  echo "mpi_check: mpirun not found (install openmpi-bin): skipped"
  exit 77
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "mpi_check: '${bin}' is not built (needs MPI at configure time): skipped"
  exit 77
fi
command -v python3 >/dev/null || { echo "mpi_check: python3 is needed" >&2; exit 1; }

# A container has no network to speak of and may forbid ptrace: shared memory
# (vader) between the ranks of this one machine, no single-copy (CMA) transfer,
# the ob1 messaging layer rather than UCX, and more ranks than cores are fine.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
# A rank waiting in MPI_Allreduce yields its core instead of spinning on it,
# so on a small CI machine the other ranks' feeder workers get it.
export OMPI_MCA_mpi_yield_when_idle=1
# Only Open MPI's own variables may place the ranks here.
unset FEEDER_RANK FEEDER_WORLD_SIZE FEEDER_LOCAL_RANK FEEDER_LOCAL_SIZE
# Under ASan, Open MPI leaves allocations of its plugins behind at exit, and
# they were unloaded by then, so LeakSanitizer reports them from "<unknown
# module>" where no suppression can name them: leak checking is off for the
# job (ASan and UBSan still check every access); the Check suites keep it for
# the library.
if [ -n "${ASAN_OPTIONS-}" ]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
fi
root=()
[ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)

work=$(mktemp -d /tmp/feeder-mpi-check-XXXXXX)
trap 'rm -rf "$work"' EXIT

# run NP SHUFFLE BATCH EPOCHS: one job, checked.
run() {
  local np=$1 shuffle=$2 batch=$3 epochs=$4 log="$work/np$1-s$2-b$3.log"
  echo "== mpirun -np $np mpi_train --shuffle $shuffle --batch $batch --epochs $epochs =="
  # --device -1: the CPU path also on a machine with GPUs (mpi_gpu_check.sh runs the GPU path).
  if ! timeout 300 mpirun "${root[@]}" -np "$np" "$bin" --cache "$work/data" --images 210 \
      --size 64 --workers 1 --batch "$batch" --epochs "$epochs" --shuffle "$shuffle" \
      --drop-last 1 --device -1 >"$log" 2>&1; then
    cat "$log"
    echo "mpi_check: mpirun -np $np failed" >&2
    return 1
  fi
  cat "$log"
  PYTHONPATH="$PWD/scripts" python3 - "$log" "$np" "$shuffle" "$batch" "$epochs" <<'PY'
import sys
from mpi_summary import index_sum, summaries, want_sum
log, np_, shuffle, batch, epochs = sys.argv[1], *map(int, sys.argv[2:])
ranks = summaries(open(log))
fail = []
if sorted(ranks) != list(range(np_)):
    sys.exit(f"mpi_check: summary lines from ranks {sorted(ranks)}, expected 0..{np_ - 1}")
n = int(ranks[0]["n"])
per = n // np_                  # the sampler drops n % world
nb = per // batch               # the batch sampler drops the short batch
kept = nb * batch
for r, kv in ranks.items():
    if int(kv["world"]) != np_ or int(kv["n"]) != n:
        fail.append(f"rank {r}: world {kv['world']} n {kv['n']}")
    if int(kv["batches"]) != epochs * nb:
        fail.append(f"rank {r}: {kv['batches']} batches, expected {epochs * nb} (equal on every rank)")
    if int(kv["samples"]) != epochs * kept:
        fail.append(f"rank {r}: {kv['samples']} samples, expected {epochs * kept}")
weights = {kv["weights"] for kv in ranks.values()}
if len(weights) != 1:
    fail.append(f"final weights differ between ranks: {sorted(weights)}")
got = index_sum(ranks)
# Without shuffling, rank r reads r, r + world, ...: the job reads exactly
# 0 .. world*kept-1. Shuffled, the set is known when nothing is dropped.
if shuffle == 0 or np_ * kept == n:
    want = want_sum(np_ * kept, epochs)
    if got != want:
        fail.append(f"index sets: sum 0x{got:016x}, expected 0x{want:016x}: the shards "
                    f"overlap or miss samples of 0..{np_ * kept - 1}")
    what = f"disjoint shards covering 0..{np_ * kept - 1} of {n}"
else:
    what = f"{np_ * kept} of {n} samples per epoch (set not checked: shuffled with a dropped tail)"
if fail:
    sys.exit("mpi_check: " + "; ".join(fail))
print(f"mpi_check: ok: {np_} ranks, {nb} batches each per epoch, {what}, identical weights")
PY
}

# 210 images (small, so the sanitizer builds make them quickly):
run 2 1 21 2   # 210 = 2 x 5 x 21: every sample once per epoch, shuffled
run 2 0 32 2   # drop_last: each rank 105 -> 3 x 32, the job reads 0..191
run 3 0 32 1   # 210 / 3 = 70 -> 2 x 32 each: the job reads 0..191
echo "mpi_check: all runs passed"
