#!/usr/bin/env bash
# bench_loader on WebDataset tar shards against the same images as a folder
# (docs/BENCHMARKS.md, "Tar shards"). Makes the set with make_set, then the
# shards with GNU tar: the images in the folder's sorted order, split into
# SHARDS shards, each image a key <nnnnnn> with its .jpg (the file's own
# bytes, under its own extension) and a .cls of its class index. Then both
# runs, with the same options and --checksum: the two checksums must agree.
# Last, the open alone, three times each: walking the headers (no .idx) and
# reading the .idx files, with the page cache warm and with the shards and
# indexes evicted (dd iflag=nocache count=0 drops a file's cached pages).
#   bench/run_tar_figures.sh [DIR]    (BUILD=build N=2000 SHARDS=4 WORKERS=2)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${1:-/tmp/feeder-tar-bench}
n=${N:-2000}
shards=${SHARDS:-4}
workers=${WORKERS:-2}
mkdir -p "$dir"
[ -d "$dir/folder" ] || "$build/bench/make_set" "$dir/folder" "$n" >/dev/null
if [ ! -f "$dir/shards/s-0.tar" ]; then
  rm -rf "$dir/stage" "$dir/shards"
  mkdir -p "$dir/stage" "$dir/shards"
  i=0
  per=$(( (n + shards - 1) / shards ))
  for cdir in $(ls -d "$dir"/folder/*/ | sort); do
    label=$(( $(ls -d "$dir"/folder/*/ | sort | grep -n "^$cdir$" | cut -d: -f1) - 1 ))
    for f in $(ls "$cdir" | sort); do
      s=$(( i / per ))
      mkdir -p "$dir/stage/s$s"
      ext=$(echo "${f##*.}" | tr 'A-Z' 'a-z')
      key=$(printf '%06d' "$i")
      ln "$cdir$f" "$dir/stage/s$s/$key.$ext" 2>/dev/null || cp "$cdir$f" "$dir/stage/s$s/$key.$ext"
      printf '%d' "$label" > "$dir/stage/s$s/$key.cls"
      i=$((i + 1))
    done
  done
  for ((s = 0; s < shards; s++)); do
    tar -C "$dir/stage" --sort=name -cf "$dir/shards/s-$s.tar" "s$s"
  done
  rm -rf "$dir/stage"
fi
common=(--workers "$workers" --shuffle 1 --epochs 3 --checksum --batch 64)
echo "== folder"
"$build/bench/bench_loader" --data "$dir/folder" "${common[@]}"
echo "== tar shards"
"$build/bench/bench_loader" --data "$dir/shards/s-{0..$((shards - 1))}.tar" "${common[@]}"
pattern="$dir/shards/s-{0..$((shards - 1))}.tar"
evict() { for f in "$dir"/shards/*; do sync "$f"; dd if="$f" iflag=nocache count=0 status=none; done; }
open_once() { # the open line of a one-epoch run
  "$build/bench/bench_loader" --data "$pattern" --workers 0 --epochs 1 --batch 64 2>&1 |
    grep -o 'opened in .*'
}
for cache in warm cold; do
  for run in 1 2 3; do
    rm -f "$dir"/shards/*.idx
    [ $cache = cold ] && evict
    echo "$cache, walk:  $(open_once)"
    [ $cache = cold ] && evict
    echo "$cache, .idx:  $(open_once)"
  done
done
