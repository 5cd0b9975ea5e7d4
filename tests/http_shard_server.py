#!/usr/bin/python3
"""A web server on loopback for the remote-shard tests: serves the files under --root with
GET (whole or one `Range: bytes=A-B`) and HEAD, and fails a seeded share of requests
(--fail-rate) with 500 or by closing the connection, as a flaky store does.

Prints "listening on HOST:PORT" once it serves, and with --ready-file writes that file
(JSON: host, port) whole, through a rename, for a caller that waits for it. Counts requests in --log (one line per
request: method, path, status) when given. --host binds another address than loopback (the
testbed's store, docs/testbed.md); --rate caps what each response body sends, in bytes per
second (a store slower than the machine).
"""
import argparse
import http.server
import json
import os
import random
import re
import socketserver
import sys
import threading
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fail-rate", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--rate", type=float, default=0.0, help="bytes/s per response (0: no cap)")
    p.add_argument("--ready-file", default="", help="written (JSON: host, port) once serving")
    args = p.parse_args()
    root = os.path.realpath(args.root)
    rng = random.Random(args.seed)
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1) if args.log else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

        def log_message(self, *unused):
            pass

        def note(self, status):
            if log:
                with lock:
                    log.write(f"{self.command} {self.path} {status}\n")

        def fail(self):
            with lock:
                roll = rng.random()
                how = rng.random()
            if roll >= args.fail_rate:
                return False
            if how < 0.8:
                self.note(500)
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.note("reset")
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
            return True

        def target(self):
            path = os.path.realpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
            if not path.startswith(root + os.sep) or not os.path.isfile(path):
                return None
            return path

        def do_HEAD(self):
            self.serve(head=True)

        def do_GET(self):
            self.serve(head=False)

        def serve(self, head):
            if self.fail():
                return
            path = self.target()
            if path is None:
                self.note(404)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = os.path.getsize(path)
            start, end, status = 0, size - 1, 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if m and not head:
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
                if start >= size:
                    self.note(416)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.note(status)
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1 if not head else size))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if head:
                return
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1)
            if args.rate <= 0:
                self.wfile.write(body)
                return
            # Paced in 64 KiB pieces: piece k leaves no earlier than k * 64 KiB / rate.
            t0 = time.monotonic()
            for at in range(0, len(body), 65536):
                delay = t0 + at / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self.wfile.write(body[at:at + 65536])

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server((args.host, args.port), Handler)
    print(f"listening on {args.host}:{server.server_address[1]}", flush=True)
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"host": args.host, "port": server.server_address[1]}, f)
        os.replace(tmp, args.ready_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
