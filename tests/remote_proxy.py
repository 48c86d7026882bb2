#!/usr/bin/env python3
"""A small HTTP proxy for the remote-shard tests (tests/test_remote.c) and
the latency figures (docs/BENCHMARKS.md): forwards every GET to UPSTREAM and
can add a delay per request, answer the first K requests with 503, cut
every response's body after N bytes, stall each body for MS milliseconds
after its first N bytes, or send every body of 64 KiB or more N bytes short
(with a Content-Length that says so: a complete answer, short; the header
page and index a dataset's open asks for are smaller). Logs one line a
request to --log, with the client's port (one port: one kept-alive
connection). Prints its port on the first line of stdout, then serves until
killed.

  remote_proxy.py UPSTREAM_PORT [--delay-ms N] [--fail-first K]
                  [--cut-after N] [--stall-after N --stall-ms MS]
                  [--short-by N] [--log FILE]
"""
import argparse
import http.client
import http.server
import sys
import threading
import time

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-connection"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream", type=int)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--cut-after", type=int, default=-1)
    ap.add_argument("--stall-after", type=int, default=-1)
    ap.add_argument("--stall-ms", type=float, default=0)
    ap.add_argument("--short-by", type=int, default=0)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    lock = threading.Lock()
    state = {"n": 0}
    local = threading.local()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def upstream(self):
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection("127.0.0.1", a.upstream, timeout=30)
            return local.conn

        def do_GET(self):
            with lock:
                state["n"] += 1
                n = state["n"]
                if a.log:
                    with open(a.log, "a") as f:
                        f.write("%s %s %s port=%d\n" % (self.command, self.path,
                                                        self.headers.get("Range", "-"),
                                                        self.client_address[1]))
            if a.delay_ms:
                time.sleep(a.delay_ms / 1000.0)
            if n <= a.fail_first:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            try:
                c = self.upstream()
                c.request(self.command, self.path, headers=hdrs)
                r = c.getresponse()
                body = r.read()
            except (OSError, http.client.HTTPException):
                local.conn = None
                self.send_response(502)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if a.short_by and r.status in (200, 206) and len(body) >= 65536:
                body = body[:max(0, len(body) - a.short_by)]
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if a.stall_after >= 0 and len(body) > a.stall_after:
                self.wfile.write(body[:a.stall_after])
                self.wfile.flush()
                time.sleep(a.stall_ms / 1000.0)
                body = body[a.stall_after:]
            if a.cut_after >= 0 and len(body) > a.cut_after:
                self.wfile.write(body[:a.cut_after])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)


    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
