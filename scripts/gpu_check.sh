#!/usr/bin/env bash
# The GPU machine's run: build, GPU tests (plain and under compute-sanitizer),
# then the GPU benchmarks. Logs and tables go to OUT (default ./gpu-out).
#   bash scripts/gpu_check.sh [all | a comma list of tests,bench,packed]
# Needs the CUDA toolkit and a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
want() { [[ $what == all || ",$what," == *",$1,"* ]]; }
out=${OUT:-./gpu-out}
mkdir -p "$out"
build=${BUILD:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,noheader > "$out/gpu.txt" 2>&1
rc=0
if want tests; then
  echo "== ctest (all suites, GPU included)"
  ctest --test-dir "$build" --output-on-failure --timeout 300 > "$out/ctest.log" 2>&1 || rc=1
  grep -E "tests passed|Passed|Failed|Skipped" "$out/ctest.log" | tail -8
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool test_cuda"
    # Instrumented, nvJPEG's calls outlast the 10 s watchdog (racecheck: two did).
    FEEDER_NVJPEG_STUCK_MS=300000 FEEDER_TEST_STRESS_BATCHES=100 CK_DEFAULT_TIMEOUT=600 timeout 400 \
      compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 \
      "$build/tests/test_cuda" > "$out/sanitizer-$tool.log" 2>&1
    s=$?
    tail -3 "$out/sanitizer-$tool.log"
    echo "compute-sanitizer $tool exit $s"
    (( s == 0 )) || rc=1
  done
  if [[ -x $build/examples/train_loop ]]; then
    echo "== examples/train_loop (first step checked on the CPU; exits 3 if the loss did not fall)"
    "$build/examples/train_loop" --device 0 --workers 8 > "$out/train_loop.log" 2>&1
    s=$?
    tail -9 "$out/train_loop.log"
    echo "train_loop exit $s"
    (( s == 0 )) || rc=1
    echo "== compute-sanitizer --tool memcheck train_loop, one epoch"
    timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$build/examples/train_loop" --device 0 --workers 8 --epochs 1 \
      > "$out/sanitizer-train_loop.log" 2>&1
    s=$?
    tail -3 "$out/sanitizer-train_loop.log"
    echo "compute-sanitizer memcheck train_loop exit $s"
    (( s == 0 )) || rc=1
  fi
fi
if want bench; then
  b="$build/bench/bench_loader"
  md="$out/BENCHMARKS.md"
  common=(--images 10000 --workers 15 --persistent --epochs 3 --batch 256 --append-to "$md")
  echo "== pin modes, no compute (loader-bound)"
  for pin in none copy register; do
    "$b" "${common[@]}" --device 0 --pin "$pin" 2>>"$out/bench.log" | tail -4
  done
  echo "== dtype fp32 NCHW and bf16, register"
  "$b" "${common[@]}" --device 0 --dtype fp32 --layout nchw 2>>"$out/bench.log" | tail -3
  "$b" "${common[@]}" --device 0 --dtype bf16 --layout nchw 2>>"$out/bench.log" | tail -3
  echo "== overlap: compute longer than loading (40 ms/batch), then shorter (5 ms)"
  for ms in 40 5; do
    "$b" "${common[@]}" --device 0 --compute-ms "$ms" 2>>"$out/bench.log" | tail -4
  done
  echo "== host batches, same data (the loader's own rate)"
  "$b" "${common[@]}" 2>>"$out/bench.log" | tail -3
  if [[ -x $build/bench/bench_transfer ]]; then
    echo "== bench_transfer"
    "$build/bench/bench_transfer" --device 0 --append-to "$md" 2>>"$out/bench.log" | tail -30
  fi
fi
if want packed; then
  b="$build/bench/bench_loader"
  md="$out/BENCHMARKS.md"
  images=${PACK_IMAGES:-10000}
  ds=${FEEDER_DATA:-$HOME/.cache/feeder/web-$images}
  pack=${PACK:-/tmp/web-$images-224.pack}
  "$b" --images "$images" --workers 0 --epochs 1 --no-append > /dev/null 2>>"$out/bench.log"
  if [[ ! -f $pack ]]; then
    echo "== feeder-pack raw 224 of $ds"
    "$build/tools/feeder-pack" --data "$ds" --out "$pack" --mode raw --workers "$(nproc)" --quiet \
      || { echo "feeder-pack failed"; exit 1; }
  fi
  ls -l "$pack"
  echo "== packed RAW to the GPU, warm cache, workers 1 2 4 8"
  for pin in register copy; do
    "$b" --data "$pack" --device 0 --pin "$pin" --threads-sweep 1,2,4,8 --persistent --epochs 5 \
      --append-to "$md" 2>>"$out/bench.log" | tail -7
  done
  echo "== packed RAW to the GPU, cold cache (pages evicted before every epoch), 8 workers"
  "$b" --data "$pack" --device 0 --workers 8 --drop-cache --epochs 3 --append-to "$md" \
    2>>"$out/bench.log" | tail -4
  echo "== PyTorch: batches gathered from a numpy memmap, pin_memory, non_blocking copy"
  PYTHONUNBUFFERED=1 python3 bench/compare_torch_packed.py --data "$pack" --workers 1,2,4,8 \
    --persistent --epochs 3 > "$out/torch_packed.txt" 2>>"$out/bench.log"
  tail -12 "$out/torch_packed.txt"
fi
exit $rc
