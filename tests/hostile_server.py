#!/usr/bin/env python3
"""A hostile HTTP server for tests/test_hostile.c: serves the files of
DOCROOT at /MODE/NAME, where MODE says how it misbehaves. Range requests
(the open's header and index reads) are answered honestly unless the mode
says otherwise; the hostile part is the whole-object GET:

  ok            honest: 200 or 206, Content-Length, ETag
  noetag        honest, but no ETag (a changed file of the same size looks the same)
  endless       the file's bytes, then zeros forever (no Content-Length)
  biglen        Content-Length of the file + 1 GB, then the file and zeros
  endless-range a range request gets 200 and an endless body
  endless-idx   NAME.idx is endless; everything else honest
  norange       range requests get 206 without Content-Range (no size); the
                whole-object GET is endless
  smuggle       NAME.idx gets 20000 bytes, as its Content-Length says, then
                more bytes (kept alive); everything else honest
  stall         half the file, then silence (the connection kept open)
  trickle       the file at --rate bytes/s
  fail          503 for every whole-object GET
  loop          every request redirected to itself (a new query each time)
  to-file       redirected to file:///etc/passwd
  to-ftp        redirected to ftp://127.0.0.1:1/NAME
  to-localhost  redirected to http://localhost:PORT/ok/NAME (another host name)
  to-self       redirected to http://127.0.0.1:PORT/ok/NAME (the same origin)

Logs one line a request to --log: method, path, Range, Host, and whether
Authorization and x-amz-security-token came. Prints its port on the first
line of stdout, then serves until killed (a hanging response ends after
--hang-s seconds at most).

  hostile_server.py DOCROOT [--log FILE] [--rate N] [--hang-s N]
"""
import argparse
import http.server
import os
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("docroot")
    ap.add_argument("--log", default=None)
    ap.add_argument("--rate", type=float, default=1100)
    ap.add_argument("--hang-s", type=float, default=120)
    a = ap.parse_args()
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def log(self):
            if not a.log:
                return
            h = self.headers
            with lock, open(a.log, "a") as f:
                f.write("%s %s range=%s host=%s auth=%d token=%d\n" % (
                    self.command, self.path, h.get("Range", "-"), h.get("Host", "-"),
                    "Authorization" in h, "x-amz-security-token" in h))

        def body(self, data):
            try:
                self.wfile.write(data)
                self.wfile.flush()
                return True
            except OSError:
                return False

        def forever(self, first):
            """first, then zeros, until the client goes or --hang-s passes."""
            end = time.time() + a.hang_s
            ok = self.body(first)
            zeros = b"\0" * 65536
            while ok and time.time() < end:
                ok = self.body(zeros)
            self.close_connection = True

        def redirect(self, where):
            self.send_response(302)
            self.send_header("Location", where)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def head(self, status, length, extra=()):
            self.send_response(status)
            if length is not None:
                self.send_header("Content-Length", str(length))
            else:
                self.send_header("Connection", "close")
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()

        def do_GET(self):
            self.log()
            path = self.path.split("?")[0]
            parts = path.lstrip("/").split("/", 1)
            if len(parts) != 2:
                return self.head(404, 0)
            mode, name = parts
            port = self.server.server_address[1]
            if mode == "loop":
                n = int(self.path.split("?n=")[1]) + 1 if "?n=" in self.path else 1
                return self.redirect("%s?n=%d" % (path, n))
            if mode == "to-file":
                return self.redirect("file:///etc/passwd")
            if mode == "to-ftp":
                return self.redirect("ftp://127.0.0.1:1/" + name)
            if mode == "to-localhost":
                return self.redirect("http://localhost:%d/ok/%s" % (port, name))
            if mode == "to-self":
                return self.redirect("http://127.0.0.1:%d/ok/%s" % (port, name))
            if mode == "smuggle" and name.endswith(".idx"):
                self.head(200, 20000)
                return self.body(b"x" * 20000 + b"bytes past the Content-Length\r\n")
            if mode == "endless-idx" and name.endswith(".idx"):
                self.head(200, None)
                return self.forever(b"")
            fp = os.path.join(a.docroot, name)
            try:
                with open(fp, "rb") as f:
                    data = f.read()
            except OSError:
                return self.head(404, 0)
            tag = ("ETag", '"%d-%d"' % (len(data), int(os.stat(fp).st_mtime)))
            if mode == "noetag":
                tag = ("X-No-ETag", "1")
            rng = self.headers.get("Range")
            if rng and mode == "endless-range":
                self.head(200, None, [tag])
                return self.forever(data)
            if rng and mode == "norange":
                lo, hi = rng.split("=")[1].split("-")
                part = data[int(lo):int(hi) + 1]
                self.head(206, len(part), [tag])
                return self.body(part)
            if rng:
                lo, hi = rng.split("=")[1].split("-")
                lo, hi = int(lo), min(int(hi), len(data) - 1)
                self.head(206, hi - lo + 1,
                          [tag, ("Content-Range", "bytes %d-%d/%d" % (lo, hi, len(data)))])
                return self.body(data[lo:hi + 1])
            if mode in ("endless", "norange"):
                self.head(200, None, [tag])
                return self.forever(data)
            if mode == "biglen":
                self.head(200, len(data) + 10**9, [tag])
                return self.forever(data)
            if mode == "stall":
                self.head(200, len(data), [tag])
                self.body(data[:len(data) // 2])
                time.sleep(a.hang_s)
                self.close_connection = True
                return
            if mode == "trickle":
                self.head(200, len(data), [tag])
                step = max(1, int(a.rate / 10))
                end = time.time() + a.hang_s
                for i in range(0, len(data), step):
                    if time.time() > end or not self.body(data[i:i + step]):
                        break
                    time.sleep(0.1)
                self.close_connection = True
                return
            if mode == "fail":
                return self.head(503, 0)
            self.head(200, len(data), [tag])
            self.body(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
