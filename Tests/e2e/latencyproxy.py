"""A latency-adding, request-counting HTTP proxy in front of the Cloud Storage emulator, for
Scripts/bench-reads.sh and Tests/e2e/test_latencyproxy.py. It is FaultProxy
(faultproxy.py) with its own request handling: the same client side (threads, HTTP/1.1
keep-alive) and the same upstream side (a new `Connection: close` connection per request, since
the emulator is single-threaded HTTP/1.0), but

- every request waits `delay` seconds before it is forwarded (a fixed round trip added to each
  request; requests in flight at once wait at once, as on a real network);
- if `max_upstream` is given, at most that many requests are at the upstream at once (the stock
  emulator serves one at a time and listens with a backlog of 5: more connections wait for a 1 s
  SYN retransmission). Unlimited by default: a client that stops reading one response while it
  waits for another would deadlock against a limit; the bench's emulator is threaded;
- media bodies are streamed through as they arrive (Content-Length, Content-Range and X-Goog-*
  headers passed on), never held whole;
- JSON answers are read whole and every occurrence of the emulator's own address is replaced by
  the proxy's (objects' `mediaLink`, which rclone downloads from, and `selfLink` name the
  address the object was uploaded through), with Content-Length fixed;
- with `stall_fraction`, that share of media GETs (drawn at random, seeded) waits `stall`
  seconds more before it is forwarded: the rare slow answer of a real network (counted as
  `stalled`);
- with `conn_rate`, each client connection carries at most that many bytes a second each way
  (FaultProxy's per-connection limit), beside the shared `rate`;
- every request is counted by kind: `list` (GET .../o), `metadata` (GET .../o/NAME without
  alt=media), `media` (alt=media, either path form) and `other`, for the JSON API and for
  Firebase's v0 (`/v0/b/BUCKET/o...`); `media_bytes` is the body bytes of media answers sent on.

    proxy = LatencyProxy("127.0.0.1:9501", delay=0.02).start()   # or start(port=9541)
    proxy.endpoint; proxy.stats(); proxy.reset()

The counts are also served by the proxy itself: GET /__stats answers them as JSON, GET or POST
/__reset zeroes them (neither is counted nor delayed). As a program:

    python latencyproxy.py --upstream 127.0.0.1:9501 --port 9541 --delay-ms 20
"""
import argparse
import contextlib
import json
import random
import re
import signal
import sys
import threading
import time

from faultproxy import FaultProxy, Response, _get

KINDS = ("list", "metadata", "media", "other")
# rclone (the Go client with an endpoint) leaves out /storage/v1; the emulator answers both forms;
# /v0/b/... is Firebase Storage's API (Tests/e2e/firebase_server.py, Scripts/bench-firebase.sh)
_OBJECTS = re.compile(r"^(?:/download)?(?:/storage/v1|/v0)?/b/[^/]+/o(/.*)?$")


def classify(method, path, query):
    """The kind of a JSON-API request: list, metadata, media or other."""
    if method != "GET":
        return "other"
    m = _OBJECTS.match(path)
    if not m:
        return "other"
    if re.search(r"(^|&)alt=media(&|$)", query):
        return "media"
    return "metadata" if m.group(1) and m.group(1) != "/" else "list"


class LatencyProxy(FaultProxy):
    def __init__(self, upstream, delay=0.02, max_upstream=None, upstream_timeout=120, log_file=None, rate=None,
                 timing_file=None, stall_fraction=0.0, stall=1.0, seed=1, conn_rate=None):
        super().__init__(upstream, upstream_timeout=upstream_timeout, rate=rate, conn_rate=conn_rate)
        self.delay = delay
        self.log_file = open(log_file, "a", buffering=1) if log_file else None
        # One line per answered request: arrival and answer times (s), kind, method, target.
        self.timing_file = open(timing_file, "a", buffering=1) if timing_file else None
        self._upstream_slots = threading.BoundedSemaphore(max_upstream) if max_upstream else contextlib.nullcontext()
        self._counts = self._zero()
        self.stall_fraction, self.stall = stall_fraction, stall
        self._random = random.Random(seed)

    @staticmethod
    def _zero():
        return {"total": 0, **{k: 0 for k in KINDS}, "media_bytes": 0, "stalled": 0}

    def stats(self):
        """{"total", "list", "metadata", "media", "other", "media_bytes", "stalled"} since the last reset."""
        with self._lock:
            return dict(self._counts)

    def reset(self):
        with self._lock:
            self._counts = self._zero()
            self.log = []

    def _count(self, key, n=1):
        with self._lock:
            self._counts[key] += n

    # --- request handling (replaces FaultProxy's rules) -----------------------------------------

    def _handle(self, c, req):
        keep = self._client_keep_alive(req)
        if req.path in ("/__stats", "/__reset"):
            if req.path == "/__reset":
                self.reset()
            body = json.dumps(self.stats()).encode()
            self._send(c, Response(200, "OK", [("Content-Type", "application/json")], body), keep, req)
            return keep
        t = time.time()
        kind = classify(req.method, req.path, req.query)
        with self._lock:
            self._counts["total"] += 1
            self._counts[kind] += 1
            if self.log_file:
                self.log_file.write(f"{kind} {req.method} {req.target}\n")
            stalled = kind == "media" and self.stall_fraction > 0 and self._random.random() < self.stall_fraction
            if stalled:
                self._counts["stalled"] += 1
        self._wait(self.delay + (self.stall if stalled else 0))
        with self._upstream_slots:
            try:
                u, conn, status, reason, headers = self._upstream(req)
            except Exception as e:
                body = json.dumps({"error": {"code": 502, "message": f"latency proxy: upstream failed: {e}"}}).encode()
                self._send(c, Response(502, "Bad Gateway", [("Content-Type", "application/json")], body), keep, req)
                self._record(req, 502, t, None)
                self._timing(t, kind, req)
                return keep
            try:
                resp = Response(status, reason, headers, b"")
                ctype = (_get(headers, "Content-Type") or "").lower()
                length = _get(headers, "Content-Length")
                if "json" in ctype or length is None or req.method == "HEAD":
                    resp.body = self._upstream_body(conn, req, status, headers)
                    if "json" in ctype:
                        resp.body = resp.body.replace(self.upstream_origin.encode(), self.endpoint.encode())
                    if kind == "media":
                        self._count("media_bytes", len(resp.body))
                    self._send(c, resp, keep, req)
                else:
                    self._stream(c, conn, resp, int(length), keep, kind)
            finally:
                u.close()
        self._record(req, status, t, None)
        self._timing(t, kind, req)
        return keep

    def _timing(self, t, kind, req):
        if self.timing_file:
            with self._lock:
                self.timing_file.write(f"{t:.6f} {time.time():.6f} {kind} {req.method} {req.target}\n")

    def _stream(self, c, conn, resp, length, keep, kind):
        """Sends the head, then `length` body bytes as they come from upstream."""
        self._sendall(c, self._head(resp, keep, length))
        left = length
        if conn.buf:
            chunk, conn.buf = conn.buf[:left], conn.buf[left:]
            self._sendall(c, chunk)
            left -= len(chunk)
        while left > 0:
            chunk = conn.sock.recv(min(left, 1 << 18))
            if not chunk:
                raise ConnectionError("upstream closed mid-body")
            self._sendall(c, chunk)
            left -= len(chunk)
        if kind == "media":
            self._count("media_bytes", length)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the emulator")
    ap.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    ap.add_argument("--delay-ms", type=float, default=20.0, help="added to every request (default 20)")
    ap.add_argument("--log", help="append one line per request (kind, method, target) to this file")
    ap.add_argument("--timing-log", help="append one line per answered request (arrival and answer times, kind, method, target)")
    ap.add_argument("--max-upstream", type=int, default=None, help="requests at the upstream at once (default: no limit)")
    ap.add_argument("--rate", type=float, default=None,
                    help="bandwidth limit, bytes a second each way (faultproxy.py's Throttle; default: none)")
    ap.add_argument("--conn-rate", type=float, default=None,
                    help="bandwidth limit of each client connection on its own, bytes a second each way (default: none)")
    ap.add_argument("--stall-fraction", type=float, default=0.0,
                    help="share of media GETs that wait --stall-ms more (random, seeded by --seed; default 0)")
    ap.add_argument("--stall-ms", type=float, default=1000.0, help="the extra wait of a stalled media GET (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the stall draws (default 1)")
    a = ap.parse_args(argv)
    proxy = LatencyProxy(a.upstream, delay=a.delay_ms / 1000, max_upstream=a.max_upstream, log_file=a.log,
                         rate=a.rate, timing_file=a.timing_log, stall_fraction=a.stall_fraction,
                         stall=a.stall_ms / 1000, seed=a.seed, conn_rate=a.conn_rate).start(a.port)
    limit = f", {a.rate / 1e6:g} MB/s each way" if a.rate else ""
    limit += f", {a.conn_rate / 1e6:g} MB/s a connection" if a.conn_rate else ""
    print(f"latencyproxy: {proxy.endpoint} -> {proxy.upstream_origin}, +{a.delay_ms:g} ms a request{limit}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
