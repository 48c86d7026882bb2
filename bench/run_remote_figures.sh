#!/usr/bin/env bash
# The remote-shard figures of docs/BENCHMARKS.md: the same packs
# read by bench_loader from local files, from lighttpd on 127.0.0.1, and from
# lighttpd behind tests/remote_proxy.py adding DELAY ms to every request;
# first epoch (empty shard cache) and warm epochs, RAW and JPEG, and tar
# shards when WWW/tar/s-0.tar is there.
#   bench/run_remote_figures.sh BUILD WWW [WORKERS] [EPOCHS] [DELAY_MS] [FETCH_AHEAD]
# WORKERS 2, EPOCHS 4, DELAY_MS 20; FETCH_AHEAD is bench_loader's
# --fetch-ahead (0: none, each shard fetched by the worker that first needs
# it; not given: bench_loader's default, half the online CPUs, 1 to 4). The
# first line of output gives the settings.
# WWW holds raw.pack, jpeg.pack, their shards rawsh-NNNNN-of-MMMMM.pack and
# jpegsh-..., and optionally tar/s-K.tar (+ .idx); make them with feeder-pack
# and bench/run_tar_figures.sh's layout (docs/BENCHMARKS.md gives the
# commands). SERVER=nginx serves with nginx instead of lighttpd (the proxy
# stays in front of it; NGINX names its binary, /usr/sbin/nginx by default,
# and NGINX_WORKERS its worker_processes, auto by default as in Debian's
# nginx.conf); KINDS="raw tar" picks the cases (default: raw jpeg tar). Starts and stops its own servers; the cache is a
# fresh folder each run. CEILING=1 adds, for each pack and shard set, the
# local run while curl fetches the same files from the server at the same
# moment and drops them (-o /dev/null): more than the first epoch from the
# server can reach, since that download also writes the shard cache and
# the readers wait for its bytes (on a machine of few cores the CPU the
# two need together is the bound).
set -euo pipefail
usage="usage: $0 BUILD WWW [WORKERS] [EPOCHS] [DELAY_MS] [FETCH_AHEAD]"
build=${1:?$usage}
www=${2:?$usage}
workers=${3:-2}
epochs=${4:-4}
delay=${5:-20}
ahead=${6:-}
server=${SERVER:-lighttpd}
kinds=" ${KINDS:-raw jpeg tar} "
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/feeder-remote-bench-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
ahead_opt=()
[ -n "$ahead" ] && ahead_opt=(--fetch-ahead "$ahead")
none=$([ "$ahead" = 0 ] && echo ' (none)' || true)
echo "workers $workers, epochs $epochs, persistent, --fetch-ahead ${ahead:-default}$none," \
  "proxy delay $delay ms, server $server"
if [ "$server" = nginx ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$tmp/nginx.conf" <<END
worker_processes ${NGINX_WORKERS:-auto};
pid $tmp/nginx.pid;
error_log $tmp/error.log;
daemon off;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $tmp/body;
  proxy_temp_path $tmp/proxy;
  fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi;
  scgi_temp_path $tmp/scgi;
  server { listen 127.0.0.1:$port; root $www; default_type application/octet-stream; }
}
END
  "${NGINX:-/usr/sbin/nginx}" -c "$tmp/nginx.conf" -p "$tmp" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
else
  source "$here/scripts/lighttpd.sh"
  start_lighttpd "$www" "$tmp"
  pids+=("$lighttpd_pid")
  port=$lighttpd_port
fi
/usr/bin/python3 "$here/tests/remote_proxy.py" "$port" --delay-ms "$delay" >"$tmp/proxy.port" &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
proxy=$(head -1 "$tmp/proxy.port")
sleep 0.5
run() { # label data
  rm -rf "$tmp/cache"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  local more=(--batch 256 --shuffle 0)
  case "$2" in *.tar) more=(--batch 64 --shuffle 1) ;; esac
  if ! FEEDER_CACHE_DIR="$tmp/cache" "$build/bench/bench_loader" --data "$2" \
      --workers "$workers" --epochs "$epochs" --persistent "${ahead_opt[@]}" \
      "${more[@]}" --label "$1" >"$tmp/out" 2>&1; then
    tail -5 "$tmp/out"
  fi
  grep -E "^\| +[0-9]" "$tmp/out" || true
}
# run, with curl fetching URLS (one connection, in turn) to /dev/null meanwhile.
run_with_curl() { # label data urls...
  local label=$1 data=$2 u args=()
  shift 2
  for u in "$@"; do args+=(-o /dev/null "$u"); done
  curl -sf "${args[@]}" &
  local cpid=$!
  run "$label" "$data"
  wait "$cpid" || echo "curl failed ($?)"
}
# The URLs of brace range PATTERN (one level, {A..B} with zero padding).
urls_of() {
  eval "printf '%s\n' http://127.0.0.1:$port/$1"
}
# The brace range of WWW's shards named PREFIX-NNNNN-of-MMMMM.pack.
shards_of() {
  local f n
  f=$(ls "$www/$1"-00000-of-*.pack 2>/dev/null | head -1)
  [ -n "$f" ] || return 1
  n=${f##*-of-}; n=${n%.pack}
  printf '%s-{00000..%05d}-of-%s.pack' "$1" $((10#$n - 1)) "$n"
}
for kind in raw jpeg; do
  [[ $kinds == *" $kind "* && -f "$www/$kind.pack" ]] || continue
  echo "== $kind: one local file"
  run "$kind-local-file" "$www/$kind.pack"
  echo "== $kind: one file from $server"
  run "$kind-http-file" "http://127.0.0.1:$port/$kind.pack"
  if [ "${CEILING:-0}" = 1 ]; then
    echo "== $kind: one local file, curl fetching it from $server to /dev/null meanwhile"
    run_with_curl "$kind-local-file-curl" "$www/$kind.pack" "http://127.0.0.1:$port/$kind.pack"
  fi
  shards=$(shards_of "${kind}sh") || continue
  echo "== $kind: local shards"
  run "$kind-local-shards" "$www/$shards"
  echo "== $kind: shards from $server"
  run "$kind-http" "http://127.0.0.1:$port/$shards"
  if [ "${CEILING:-0}" = 1 ]; then
    echo "== $kind: local shards, curl fetching them from $server to /dev/null meanwhile"
    mapfile -t urls < <(urls_of "$shards")
    run_with_curl "$kind-local-shards-curl" "$www/$shards" "${urls[@]}"
  fi
  echo "== $kind: shards from $server + ${delay} ms a request"
  run "$kind-http-${delay}ms" "http://127.0.0.1:$proxy/$shards"
done
if [[ $kinds == *" tar "* && -f "$www/tar/s-0.tar" ]]; then
  n=$(ls "$www"/tar/s-*.tar | wc -l)
  tars="tar/s-{0..$((n - 1))}.tar"
  echo "== tar: local shards"
  run "tar-local" "$www/$tars"
  echo "== tar: shards from $server"
  run "tar-http" "http://127.0.0.1:$port/$tars"
  if [ "${CEILING:-0}" = 1 ]; then
    echo "== tar: local shards, curl fetching them from $server to /dev/null meanwhile"
    mapfile -t urls < <(urls_of "$tars")
    run_with_curl "tar-local-curl" "$www/$tars" "${urls[@]}"
  fi
  echo "== tar: shards from $server + ${delay} ms a request"
  run "tar-http-${delay}ms" "http://127.0.0.1:$proxy/$tars"
fi
