#!/usr/bin/env bash
# The remote-shard figures of docs/BENCHMARKS.md: the same packs
# read by bench_loader from local files, from lighttpd on 127.0.0.1, and from
# lighttpd behind tests/remote_proxy.py adding DELAY ms to every request;
# first epoch (empty shard cache) and warm epochs, RAW and JPEG.
#   bench/run_remote_figures.sh BUILD WWW [WORKERS] [EPOCHS] [DELAY_MS]
# WWW holds raw.pack, jpeg.pack and their shards rawsh-0000{0..7}-of-00008.pack
# and jpegsh-...; make them with feeder-pack (docs/BENCHMARKS.md gives the
# commands). Starts and stops its own servers; the cache is a fresh folder.
set -euo pipefail
build=${1:?usage: $0 BUILD WWW [WORKERS] [EPOCHS] [DELAY_MS]}
www=${2:?usage: $0 BUILD WWW [WORKERS] [EPOCHS] [DELAY_MS]}
workers=${3:-2}
epochs=${4:-4}
delay=${5:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/feeder-remote-bench-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$here/scripts/lighttpd.sh"
start_lighttpd "$www" "$tmp"
pids+=("$lighttpd_pid")
port=$lighttpd_port
/usr/bin/python3 "$here/tests/remote_proxy.py" "$port" --delay-ms "$delay" >"$tmp/proxy.port" &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
proxy=$(head -1 "$tmp/proxy.port")
sleep 0.5
run() { # label data
  rm -rf "$tmp/cache"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  if ! FEEDER_CACHE_DIR="$tmp/cache" nice "$build/bench/bench_loader" --data "$2" \
      --workers "$workers" --epochs "$epochs" --persistent --label "$1" >"$tmp/out" 2>&1; then
    tail -5 "$tmp/out"
  fi
  grep -E "^\| +[0-9]" "$tmp/out" || true
}
for kind in raw jpeg; do
  shards="${kind}sh-{00000..00007}-of-00008.pack"
  echo "== $kind: one local file"
  run "$kind-local-file" "$www/$kind.pack"
  echo "== $kind: 8 local shards"
  run "$kind-local-shards" "$www/$shards"
  echo "== $kind: 8 shards from lighttpd"
  run "$kind-http" "http://127.0.0.1:$port/$shards"
  echo "== $kind: 8 shards from lighttpd + ${delay} ms a request"
  run "$kind-http-${delay}ms" "http://127.0.0.1:$proxy/$shards"
done
