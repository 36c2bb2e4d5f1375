"""The slow link of docs/SEMANTICS.md §5.2's cases: the fault proxy's bandwidth limit (`rate`,
faultproxy.py), which Scripts/bench-slow-link.sh uses through latencyproxy.py for the
full-size upload (2 GiB at 5 MB/s with the default timings)."""
import http.client
import http.server
import os
import threading
import time

# --- the proxy's bandwidth limit ----------------------------------------------------------------


class _Store(http.server.BaseHTTPRequestHandler):
    """A tiny upstream for the proxy: POST stores the body under the path, GET returns it. Its
    own time is next to nothing, so the proxy's limit is what a transfer takes."""
    data = {}

    def do_POST(self):
        self.data[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(b"{}")

    def do_GET(self):
        self._answer(self.data.get(self.path, b""))

    def _answer(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_proxy_rate_limits_each_way():
    """The proxy's `rate`: 512 KiB up and down at 256 KiB/s take about 2 s each (at least 1.7 s,
    the client's socket buffer aside), and the bytes arrive whole; with no limit the same
    transfers take a fraction of that."""
    from faultproxy import FaultProxy
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    data = os.urandom(512 << 10)

    def up_and_down(proxy):
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
        t0 = time.monotonic()
        conn.request("POST", "/rate.bin", body=data, headers={"Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        up = time.monotonic() - t0
        t0 = time.monotonic()
        conn.request("GET", "/rate.bin")
        r = conn.getresponse()
        got = r.read()
        down = time.monotonic() - t0
        assert r.status == 200 and got == data
        conn.close()
        return up, down

    try:
        with FaultProxy(f"127.0.0.1:{upstream.server_port}", rate=256 << 10) as slow:
            up, down = up_and_down(slow)
        with FaultProxy(f"127.0.0.1:{upstream.server_port}") as fast:
            up0, down0 = up_and_down(fast)
    finally:
        upstream.shutdown()
    print(f"512 KiB at 256 KiB/s: up {up:.2f} s, down {down:.2f} s; unlimited: up {up0:.2f} s, down {down0:.2f} s")
    assert 1.7 <= up < 6, f"upload took {up:.2f} s at 256 KiB/s"
    assert 1.7 <= down < 6, f"download took {down:.2f} s at 256 KiB/s"
    assert up0 < up / 2 and down0 < down / 2
