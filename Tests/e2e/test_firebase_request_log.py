"""`--request-log` counts what the Firebase server sees (docs/OPERATING.md, "Logs"): v0 has no
preconditions and no generations in its requests, so the store sends GETs of its own (a create's
"does not exist yet", a copy's source, a read's generation check), and a create's question to the
rules opens an upload session that it then cancels: each is a line of the log, as each is a
request the server answers, and the metrics count the same."""
import os
import re
import socket
import time
import urllib.request

from conftest import sh
from firebase_http import BUCKET
from test_firebase import SRC, fb  # noqa: F401 (fb: fixture)


def storage_requests(fb):
    with fb.server.lock:
        return [r for r in fb.server.requests if r[1].startswith("/v0/")]


def test_the_request_log_holds_the_guard_gets_and_the_probes_cancel(fb, mounts, tmp_path):
    fb.login_email()
    fb.server.put_object(BUCKET, fb.home("seen.txt"), b"x")
    reqlog = tmp_path / "requests.log"
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mnt = mounts.mount(SRC, "--request-log", reqlog, "--metrics-address", f"127.0.0.1:{port}")
    home = os.path.join(mnt, fb.home())
    os.listdir(home)
    reqlog.write_text("")
    before = len(storage_requests(fb))
    sh(["bash", "-c", f"echo hello > {home}/new.txt"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "cancel " not in reqlog.read_text():
        time.sleep(0.05)
    lines = reqlog.read_text().splitlines()
    seen = storage_requests(fb)[before:]
    name = fb.home("new.txt")
    assert f"probe {name}" in lines and f"cancel {name}" in lines, lines
    assert f"get {name}" in lines and f"write {name}" in lines, lines  # the create's "does not exist yet"
    assert len(lines) == len(seen), (lines, seen)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    mounts.unmount(mnt)
    assert re.search(r'^bucketfs_store_requests_total\{operation="cancel",status="ok"\} 1(\.0)?$', metrics, re.M), \
        [l for l in metrics.splitlines() if "requests_total" in l]
