"""A flat bucket's directory rename through the real `mv` (docs/SEMANTICS.md §3.2): its progress
is its liveness, so a rename that keeps moving objects outlasts a short `--op-timeout` as a whole;
one that stalls answers EIO, and coreutils mv's next step (moving the directory into the half-built
destination, which it sees as an existing directory) is refused with EBUSY, so no object ends up
in two places under the new name; `mv -T` finishes it. The server is the project's own
(gcs-test-server), behind a proxy: latencyproxy.py (a fixed delay a request) for the long rename,
faultproxy.py (copies that hang after the first ones) for the stall.

Ports: BUCKETFS_OWN_GCS_PORT (the server's first port to try) and BUCKETFS_PROXY_PORT (the
proxy's), else any free ones."""
import concurrent.futures
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import run
from own_gcs import OwnServer

N = 600
OP_TIMEOUT = 2


def fill(endpoint, bucket, prefix, n):
    """n small objects PREFIX/f00000... straight into the server (not through the proxy)."""
    url = f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=multipart"

    def put(i):
        resource = json.dumps({"name": f"{prefix}/f{i:05d}", "contentType": "application/octet-stream"}).encode()
        b = b"flat-rename"
        data = (b"--" + b + b"\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" + resource
                + b"\r\n--" + b + b"\r\nContent-Type: application/octet-stream\r\n\r\n" + f"object {i}".encode()
                + b"\r\n--" + b + b"--\r\n")
        req = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "multipart/related; boundary=flat-rename"})
        urllib.request.urlopen(req, timeout=30).read()

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(put, range(n)))


def names(endpoint, bucket):
    """Every object name in the bucket, asked of the server itself."""
    out, token = [], None
    while True:
        q = "maxResults=1000" + (f"&pageToken={urllib.parse.quote(token)}" if token else "")
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{bucket}/o?{q}", timeout=30) as r:
            page = json.load(r)
        out += [o["name"] for o in page.get("items", [])]
        token = page.get("nextPageToken")
        if not token:
            return out


def expected(prefix):
    return [f"{prefix}/f{i:05d}" for i in range(N)]


@pytest.fixture
def own():
    srv = OwnServer("flat-rename")
    yield srv
    srv.stop()


def proxy_port():
    return int(os.environ.get("BUCKETFS_PROXY_PORT", "0"))


def test_mv_of_a_directory_that_outlasts_the_op_timeout(own, mounts):
    """600 objects behind 60 ms a request: the rename takes longer than --op-timeout 2 s as a
    whole and succeeds, each object moved once (one copy, one delete each)."""
    from latencyproxy import LatencyProxy
    fill(own.endpoint, own.bucket_name, "big", N)
    proxy = LatencyProxy(own.hostport, delay=0.06).start(port=proxy_port())
    try:
        log = mounts.tmp / "requests.log"
        mnt = mounts.mount(own.src(), "--endpoint", proxy.endpoint, "--anonymous", "--op-timeout", OP_TIMEOUT,
                           "--request-log", log)
        t0 = time.monotonic()
        p = subprocess.run(["mv", f"{mnt}/big", f"{mnt}/big2"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, p.stderr
        assert took > OP_TIMEOUT, f"the rename took {took:.1f} s, not longer than the op timeout"
        assert sorted(names(own.endpoint, own.bucket_name)) == expected("big2")
        assert sorted(os.listdir(f"{mnt}/big2")) == [f"f{i:05d}" for i in range(N)]
        assert not os.path.exists(f"{mnt}/big")
        lines = open(log).read().splitlines()
        assert sum(1 for l in lines if l.startswith("copy ")) == N
        assert sum(1 for l in lines if l.startswith("delete ")) == N
    finally:
        proxy.stop()


def test_mv_of_a_stalled_directory_rename_duplicates_nothing(own, mounts):
    """The server stops answering copies after the first 100: the rename ends within the op
    timeout with EIO and mv exits 1; a move into the half-built big2 (what mv 9.1 does next when
    it sees big2 as a directory) is refused with EBUSY; no object is under big2/big, the log names
    what moved; a plain mv again is refused the same way, and `mv -T big big2` finishes it, each
    object moved once."""
    from faultproxy import FaultProxy
    fill(own.endpoint, own.bucket_name, "big", N)
    proxy = FaultProxy(own.hostport)
    proxy.start(port=proxy_port())
    try:
        hang = proxy.add_rule(method="POST", path_re="/rewriteTo/|/copyTo/", action="hang", skip=100)
        # --metadata-ttl 1: the kernel's cached "no such entry" for big2 (the lookup before the
        # rename) lasts 1 s, so mv's stat of big2 after the failed rename may see the directory.
        mnt = mounts.mount(own.src(), "--endpoint", proxy.endpoint, "--anonymous", "--op-timeout", OP_TIMEOUT,
                           "--metadata-ttl", 1)
        t0 = time.monotonic()
        p = subprocess.run(["mv", f"{mnt}/big", f"{mnt}/big2"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        # EIO when mv's stat of big2 still finds the kernel's cached "no such entry" from before
        # the rename, else EBUSY for its move of big into big2 (as big2/big): mv exits 1 either way.
        assert p.returncode != 0
        assert "Input/output error" in p.stderr or "Device or resource busy" in p.stderr, p.stderr
        # mv's next step when it sees big2 as a directory, asked explicitly once the kernel sees it.
        deadline = time.monotonic() + 10
        while not os.path.isdir(f"{mnt}/big2") and time.monotonic() < deadline:
            time.sleep(0.1)
        into = subprocess.run(["mv", f"{mnt}/big", f"{mnt}/big2/big"], capture_output=True, text=True, timeout=60)
        assert into.returncode != 0 and "Device or resource busy" in into.stderr, into.stderr
        assert took < 4 * OP_TIMEOUT + 5
        now = names(own.endpoint, own.bucket_name)
        assert not any(n.startswith("big2/big/") for n in now)
        moved = sorted(n for n in now if n.startswith("big2/"))
        left = sorted(n for n in now if n.startswith("big/"))
        assert len(moved) == 100 and len(left) == N - 100
        assert sorted(moved + left, key=lambda n: n.split("/")[1]) == sorted(now, key=lambda n: n.split("/")[1])
        text = open(mounts.log_path(mnt)).read()
        line = next(l for l in text.splitlines() if "did not finish" in l)
        assert "100 of 600 object(s) moved to 'big2/'" in line
        assert re.search(r"500 left where they were \(first 'big/f\d{5}', last 'big/f00599'\)", line), line
        assert "mv -T big big2" in line
        assert "refused (EBUSY)" in text

        # bucketfs status names it, and what finishes it (exit 1).
        st = run("status", own.src(), check=False)
        assert st.returncode == 1
        assert "1 directory rename(s) not finished: 'big' → 'big2'" in st.stdout.decode()
        assert "mv -T big big2" in st.stdout.decode()

        hang.times = 0
        proxy.release()
        # A plain mv again sees big2 as a directory to move into: refused, nothing changes.
        again = subprocess.run(["mv", f"{mnt}/big", f"{mnt}/big2"], capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "Device or resource busy" in again.stderr, again.stderr
        assert not any(n.startswith("big2/big/") for n in names(own.endpoint, own.bucket_name))
        # mv -T (the kernel answers its RENAME_NOREPLACE over big2 itself, then mv asks a plain
        # rename over it): the rename goes on and finishes.
        p = subprocess.run(["mv", "-T", f"{mnt}/big", f"{mnt}/big2"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert sorted(names(own.endpoint, own.bucket_name)) == expected("big2")
        assert sorted(os.listdir(f"{mnt}/big2")) == [f"f{i:05d}" for i in range(N)]
        assert "finished" in open(mounts.log_path(mnt)).read()
        st = run("status", own.src(), check=False)
        assert "not finished" not in st.stdout.decode(), st.stdout.decode()
    finally:
        proxy.stop()
