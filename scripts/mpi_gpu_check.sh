#!/usr/bin/env bash
# examples/mpi_train's GPU path on a machine with GPUs (made for one with
# 2 GPUs and 32 cores): build, then under mpirun with 1 and 2 ranks, --bench, on
# mpi_train's dataset made with 10,000 images, 15 workers per rank (fewer
# where the cores do not allow it: cores / ranks - 1). Checks every run (the
# GPU path ran, its first step matched the CPU, equal batch counts, disjoint
# shards covering the dataset, bit-identical weights), then one short run
# without --bench that must learn (the loss falls). Prints a Markdown table of
# per-rank and total images/s, the time split and the scaling efficiency
# (total at 2 ranks / (2 x total at 1)), appended with the command and the
# machine to $OUT/BENCHMARKS.md; logs go to $OUT too.
#   bash scripts/mpi_gpu_check.sh           (OUT default ./gpu-out, BUILD default build-mpi-gpu)
# Where there is no GPU it builds, says so and skips the GPU runs (exit 0).
# WORKERS=N gives every rank N workers instead (the same at 1 and 2 ranks).
# ROUNDS=N runs the 1- and 2-rank jobs N times, alternating (each 2-rank run
# is set against the 1-rank run just before it, and the mean is printed):
# runs on one machine move by 5-15 % from one to the next.
# Exit 0: all good or skipped; 1: a build, run or check failed.
# Meant to finish well inside 6 minutes: making the 10,000 JPEGs took ~3 ms each on one core
# here (once, in the first run), and the mpirun runs are capped at 150 + 90 + 90 + 60 s.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-./gpu-out}
mkdir -p "$out"
build=${BUILD:-build-mpi-gpu}
log=$out/mpi_gpu_check.log
: > "$log"
say() { echo "$@" | tee -a "$log"; }

say "== build ($build)"
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$build" -j"$(nproc)" --target mpi_train; } > "$out/mpi_gpu_build.log" 2>&1; then
  tail -40 "$out/mpi_gpu_build.log"
  say "mpi_gpu_check: the build failed (whole log: $out/mpi_gpu_build.log)"
  exit 1
fi
grep -E "feeder: (CUDA|NCCL)|Found MPI" "$out/mpi_gpu_build.log" | tee -a "$log"
bin=$build/examples/mpi_train
if [[ ! -x $bin ]]; then
  say "mpi_gpu_check: $bin was not built: CMake found no MPI (install libopenmpi-dev)"
  exit 1
fi
command -v mpirun >/dev/null || { say "mpi_gpu_check: mpirun not found"; exit 1; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if (( ngpu == 0 )); then
  say "mpi_gpu_check: no GPU here (nvidia-smi lists none): the GPU runs are skipped;"
  say "  scripts/mpi_check.sh runs the CPU path"
  exit 0
fi
nvidia-smi -L | tee -a "$log"

# One machine: shared memory between the ranks, no CMA (containers may
# forbid ptrace), no UCX; NVLink multicast stays off.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export NCCL_NVLS_ENABLE=0
unset FEEDER_RANK FEEDER_WORLD_SIZE FEEDER_LOCAL_RANK FEEDER_LOCAL_SIZE
root=()
[[ $(id -u) -ne 0 ]] || root=(--allow-run-as-root)
cores=$(nproc)
images=${IMAGES:-10000}
data=${MPI_DATA:-/tmp/feeder-mpi-$images}
# 250 divides 10,000 / 1 and / 2: no sample is dropped, so the index check
# covers the whole dataset even though the order is shuffled.
batch=${BATCH:-250}
epochs=${EPOCHS:-5}
status=0
runs=()

# run LIMIT NP [extra mpi_train args...]: one --bench job of at most LIMIT
# seconds, its log under $out.
run() {
  local limit=$1 np=$2; shift 2
  local w=$(( cores / np - 1 )); (( w > 15 )) && w=15; (( w < 1 )) && w=1
  [[ -n ${WORKERS:-} ]] && w=$WORKERS
  local name="np$np${1:+-${1#--}${2:+-$2}}$suffix"
  local cmd=(mpirun "${root[@]}" --bind-to none -np "$np" "$bin" --cache "$data" --images "$images"
             --batch "$batch" --epochs "$epochs" --workers "$w" --device auto --bench --json "$@")
  say "== ${cmd[*]}"
  if ! timeout "$limit" "${cmd[@]}" > "$out/mpi_gpu_$name.log" 2>&1; then
    cat "$out/mpi_gpu_$name.log" | tee -a "$log"
    say "mpi_gpu_check: the $np-rank run failed"
    status=1
    return
  fi
  grep -E "^(check|mpi_train: (gradient|total|final)|\|)" "$out/mpi_gpu_$name.log" | tee -a "$log"
  runs+=("$np:$name:${cmd[*]}")
}

rounds=${ROUNDS:-1}
suffix=""
for (( r = 1; r <= rounds; r++ )); do
  (( rounds > 1 )) && suffix="-r$r"
  run 150 1   # the first makes the dataset (not timed by --bench)
  if (( ngpu < 2 && r == 1 )); then
    say "mpi_gpu_check: one GPU here: the 2-rank runs share it (no scaling figure)"
  fi
  run 90 2
done
suffix=""
# The same job averaging through host memory, to compare with NCCL.
run 90 2 --allreduce mpi-host

say "== learning check: 2 ranks, 3 epochs of the 420-image set, no --bench"
if timeout 60 mpirun "${root[@]}" --bind-to none -np 2 "$bin" --epochs 3 --workers 4 \
    --device auto > "$out/mpi_gpu_learn.log" 2>&1; then
  grep -E "^(epoch|check|mpi_train: (loss|final))" "$out/mpi_gpu_learn.log" | tee -a "$log"
else
  cat "$out/mpi_gpu_learn.log" | tee -a "$log"
  say "mpi_gpu_check: the learning run failed (exit 3: the loss did not fall)"
  status=1
fi

(( ${#runs[@]} )) || exit 1
machine="$(hostname) ($cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); $ngpu x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
PYTHONPATH="$PWD/scripts" python3 - "$out" "$machine" "$ngpu" "${runs[@]}" <<'PY' | tee -a "$log"
import json, os, sys, time
from mpi_summary import index_sum, summaries, want_sum
out, machine, ngpu, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
fail, rows, cmds, total1, effs = [], [], [], 0, []
mixes = {}
for r in runs:
    np_, name, cmd = r.split(":", 2)
    np_ = int(np_)
    text = open(os.path.join(out, f"mpi_gpu_{name}.log")).read().splitlines()
    js = [json.loads(l) for l in text if l.startswith('{"program": "mpi_train"')]
    summ = summaries(text)
    if len(js) != 1 or sorted(summ) != list(range(np_)):
        fail.append(f"{name}: no report or summary lines from every rank")
        continue
    j = js[0]
    if j["path"] != "gpu":
        fail.append(f"{name}: ran the {j['path']} path, not the GPU path")
    if not any(l.startswith("check: first step") and l.endswith(": ok") for l in text):
        fail.append(f"{name}: no passing first-step check")
    if not j["weights_identical"] or len({kv["weights"] for kv in summ.values()}) != 1:
        fail.append(f"{name}: final weights differ between ranks")
    n, epochs, batch = int(summ[0]["n"]), int(summ[0]["epochs"]), j["batch"]
    nb = n // np_ // batch
    for rk, kv in summ.items():
        if int(kv["batches"]) != epochs * nb or int(kv["samples"]) != epochs * nb * batch:
            fail.append(f"{name}: rank {rk} ran {kv['batches']} batches, expected {epochs * nb}")
    if np_ * nb * batch == n:
        if (n, epochs) not in mixes:
            mixes[n, epochs] = want_sum(n, epochs)
        if index_sum(summ) != mixes[n, epochs]:
            fail.append(f"{name}: the ranks' shards overlap or miss samples")
    else:
        fail.append(f"{name}: batch {batch} does not divide {n} / {np_}: shards not checked")
    per = j["ranks"]
    tot = j["total_images_per_s"]
    if np_ == 1:
        total1 = tot
    eff = ""
    if np_ == 2 and total1:
        eff = f"{100 * tot / (2 * total1):.0f} %" + ("" if ngpu >= 2 else " (1 GPU)")
        if "-allreduce" not in name:  # the rounds' own runs, not the mpi-host one
            effs.append(tot / (2 * total1))
    split = "; ".join(f"{p['wait_s']:.3f} / {p['compute_s']:.3f} / {p['allreduce_s']:.3f}"
                      for p in per)
    rows.append([str(np_), ", ".join(f"GPU {p['device']}" if p["device"] >= 0 else "CPU" for p in per), str(per[0]["workers"]),
                 j["allreduce"], ", ".join(f"{p['images_per_s']:,.0f}" for p in per),
                 f"{tot:,.0f}", split, eff])
    cmds.append(cmd)
head = ["ranks", "GPUs", "workers/rank", "gradient averaging", "images/s per rank",
        "total images/s", "s per epoch: load wait / compute / allreduce, per rank",
        "scaling efficiency"]
table = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
table += ["| " + " | ".join(r) + " |" for r in rows]
if len(effs) > 1:
    table.append("")
    table.append(f"Scaling efficiency over {len(effs)} alternating rounds: "
                 + ", ".join(f"{100 * e:.0f} %" for e in effs)
                 + f"; mean {100 * sum(effs) / len(effs):.0f} %")
print("\n".join(table))
when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
with open(os.path.join(out, "BENCHMARKS.md"), "a") as f:
    f.write(f"\n## {when}, {machine}: mpi_train GPU path, 1 and 2 ranks (scripts/mpi_gpu_check.sh)\n\n")
    f.write("```\n" + "\n".join(cmds) + "\n```\n\n")
    f.write("Median of the epochs after the first (--bench); a rank's images/s is its images over "
            "its epoch time, the total the job's images over the slowest rank's. Scaling "
            "efficiency: total at 2 ranks / (2 x total at 1 rank).\n\n")
    f.write("\n".join(table) + "\n")
print(f"mpi_gpu_check: table appended to {os.path.join(out, 'BENCHMARKS.md')}")
if fail:
    print("mpi_gpu_check: FAILED: " + "; ".join(fail))
    sys.exit(1)
print("mpi_gpu_check: ok: every run took the GPU path, matched the CPU on its first step, "
      "gave every rank the same batch count, disjoint shards covering the dataset and "
      "bit-identical weights")
PY
(( PIPESTATUS[0] == 0 )) || status=1
exit $status
