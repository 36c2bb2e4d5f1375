"""The slow link of docs/SEMANTICS.md §5.2's cases: the fault proxy's bandwidth limit (`rate`,
faultproxy.py), which Scripts/bench-slow-link.sh uses through latencyproxy.py for the
full-size upload (2 GiB at 5 MB/s with the default timings)."""
import http.client
import os
import time
import urllib.parse

import pytest

pytestmark = pytest.mark.faults

# --- the proxy's bandwidth limit ----------------------------------------------------------------


@pytest.mark.one_server
def test_proxy_rate_limits_each_way(emulator, prefix):
    """The proxy's `rate`: 512 KiB up and down at 256 KiB/s take about 2 s each (not less than
    1.7 s, the client's socket buffer aside), and the bytes arrive whole; with no limit the same
    transfers take a fraction of that."""
    from faultproxy import FaultProxy
    data = os.urandom(512 << 10)
    name = urllib.parse.quote(f"{prefix}/rate.bin", safe="")
    bucket = emulator.bucket_name

    def up_and_down(proxy):
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
        t0 = time.monotonic()
        conn.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}", body=data,
                     headers={"Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        up = time.monotonic() - t0
        t0 = time.monotonic()
        conn.request("GET", f"/storage/v1/b/{bucket}/o/{name}?alt=media")
        r = conn.getresponse()
        got = r.read()
        down = time.monotonic() - t0
        assert r.status == 200 and got == data
        conn.close()
        return up, down

    with FaultProxy(emulator.hostport, rate=256 << 10) as slow:
        up, down = up_and_down(slow)
    with FaultProxy(emulator.hostport) as fast:
        up0, down0 = up_and_down(fast)
    print(f"512 KiB at 256 KiB/s: up {up:.2f} s, down {down:.2f} s; unlimited: up {up0:.2f} s, down {down0:.2f} s")
    assert 1.7 <= up < 6, f"upload took {up:.2f} s at 256 KiB/s"
    assert 1.7 <= down < 6, f"download took {down:.2f} s at 256 KiB/s"
    assert up0 < up / 2 and down0 < down / 2
