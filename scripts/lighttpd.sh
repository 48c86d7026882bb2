# Sourced by scripts/mpi_remote_check.sh and bench/run_remote_figures.sh.
# start_lighttpd ROOT WORKDIR serves ROOT with lighttpd on 127.0.0.1 at a
# free port (its config and error log in WORKDIR), sets lighttpd_port and
# lighttpd_pid (the caller stops it), and returns once the port accepts.
start_lighttpd() {
  local root=$1 work=$2
  lighttpd_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/lighttpd.conf" <<EOF_CONF
server.document-root = "$root"
server.port = $lighttpd_port
server.bind = "127.0.0.1"
server.errorlog = "$work/error.log"
mimetype.assign = ("" => "application/octet-stream")
EOF_CONF
  /usr/sbin/lighttpd -D -f "$work/lighttpd.conf" &
  lighttpd_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$lighttpd_port") 2>/dev/null && break
    sleep 0.1
  done
}
