"""The latency proxy of Scripts/bench-reads.sh (latencyproxy.py) in front of the test emulator: it
forwards, counts requests by kind, adds at least its delay, streams media with their headers and
points the links in JSON answers at itself. No timing upper bounds: only the delay's lower one."""
import http.client
import json
import os
import time
import urllib.parse

import pytest

from latencyproxy import LatencyProxy, classify


@pytest.fixture
def proxy(emulator):
    p = LatencyProxy(emulator.hostport, delay=0.05).start()
    yield p
    p.stop()


def _get(conn, path, headers=None):
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    return r, r.read()


def test_classify():
    assert classify("GET", "/storage/v1/b/bk/o", "prefix=a%2F&delimiter=%2F") == "list"
    assert classify("GET", "/storage/v1/b/bk/o/a%2Fb", "") == "metadata"
    assert classify("GET", "/storage/v1/b/bk/o/a%2Fb", "alt=media") == "media"
    assert classify("GET", "/download/storage/v1/b/bk/o/a%2Fb", "generation=1&alt=media") == "media"
    assert classify("POST", "/upload/storage/v1/b/bk/o", "uploadType=multipart") == "other"
    assert classify("GET", "/storage/v1/b/bk", "") == "other"
    assert classify("GET", "/b/bk/o", "prefix=a%2F") == "list"  # the Go client's form (rclone)
    assert classify("GET", "/b/bk/o/a%2Fb", "alt=media") == "media"
    # Firebase Storage's v0 API
    assert classify("GET", "/v0/b/app.appspot.com/o", "prefix=a%2F&delimiter=%2F") == "list"
    assert classify("GET", "/v0/b/app.appspot.com/o/a%2Fb", "") == "metadata"
    assert classify("GET", "/v0/b/app.appspot.com/o/a%2Fb", "alt=media") == "media"
    assert classify("POST", "/v0/b/app.appspot.com/o", "name=a%2Fb") == "other"


def test_forwards_counts_delays_and_rewrites_links(emulator, prefix, proxy):
    data = os.urandom(300_000)
    emulator.bucket().blob(f"{prefix}/a.bin").upload_from_string(data, content_type="application/octet-stream")
    quoted = urllib.parse.quote(f"{prefix}/a.bin", safe="")
    bucket = emulator.bucket_name
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)  # one keep-alive connection

    t0 = time.monotonic()
    r, body = _get(conn, f"/storage/v1/b/{bucket}/o/{quoted}")
    assert time.monotonic() - t0 >= 0.05
    assert r.status == 200
    meta = json.loads(body)
    assert meta["name"] == f"{prefix}/a.bin"
    assert int(r.getheader("Content-Length")) == len(body)
    # the emulator wrote its own address into mediaLink; the proxy answers with its own
    assert meta["mediaLink"].startswith(proxy.endpoint + "/"), meta["mediaLink"]
    assert emulator.endpoint not in body.decode()

    r, body = _get(conn, f"/storage/v1/b/{bucket}/o?prefix={urllib.parse.quote(prefix + '/')}")
    assert r.status == 200
    items = json.loads(body)["items"]
    assert [i["name"] for i in items] == [f"{prefix}/a.bin"]
    assert all(i["mediaLink"].startswith(proxy.endpoint + "/") for i in items)

    # a download through the rewritten mediaLink, streamed with its length
    link = urllib.parse.urlsplit(meta["mediaLink"])
    r, body = _get(conn, f"{link.path}?{link.query}")
    assert r.status == 200 and body == data
    assert int(r.getheader("Content-Length")) == len(data)
    # a range, with its Content-Range passed on
    r, body = _get(conn, f"/storage/v1/b/{bucket}/o/{quoted}?alt=media", {"Range": "bytes=1000-1999"})
    assert r.status == 206 and body == data[1000:2000]
    assert r.getheader("Content-Range") == f"bytes 1000-1999/{len(data)}"

    r, body = _get(conn, "/__stats")
    stats = json.loads(body)
    assert stats == {"total": 4, "list": 1, "metadata": 1, "media": 2, "other": 0,
                     "media_bytes": len(data) + 1000, "stalled": 0}
    assert proxy.stats() == stats
    r, body = _get(conn, "/__reset")
    assert json.loads(body)["total"] == 0
    assert proxy.stats()["total"] == 0
    conn.close()


def test_delay_applies_to_each_request(emulator, proxy):
    proxy.delay = 0.2
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    for _ in range(2):
        t0 = time.monotonic()
        r, _ = _get(conn, f"/storage/v1/b/{emulator.bucket_name}/o/no-such-object")
        assert r.status == 404
        assert time.monotonic() - t0 >= 0.2
    assert proxy.stats()["metadata"] == 2
    conn.close()


def test_stalls_hold_back_media_gets_only(emulator, prefix, proxy):
    """`stall_fraction` of the media GETs wait `stall` more (the bench's rare slow answer);
    nothing else does."""
    emulator.bucket().blob(f"{prefix}/s.bin").upload_from_string(b"x" * 1000)
    quoted = urllib.parse.quote(f"{prefix}/s.bin", safe="")
    proxy.stall_fraction, proxy.stall = 1.0, 0.3
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    r, _ = _get(conn, f"/storage/v1/b/{emulator.bucket_name}/o/{quoted}")
    assert r.status == 200 and proxy.stats()["stalled"] == 0, "a metadata GET is never held back"
    t0 = time.monotonic()
    r, body = _get(conn, f"/storage/v1/b/{emulator.bucket_name}/o/{quoted}?alt=media")
    assert r.status == 200 and body == b"x" * 1000
    assert time.monotonic() - t0 >= 0.05 + 0.3
    assert proxy.stats()["stalled"] == 1 and proxy.stats()["media"] == 1
    conn.close()
