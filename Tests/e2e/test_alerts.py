"""The alert rules of docs/OPERATING.md ("Nightly backups") against a real mount's /metrics: each
fires on a failure of the crash drill and clears once it is settled. A kill -9 leaves a complete
file and a cut-off one in a cache directory; a mount of the same source with another cache
directory shows them in `bucketfs_unsaved_files{where="elsewhere"}` (refreshed at most every
30 s); `bucketfs recover` settles the complete one, removing the cut-off one the rest, and the
metric returns to 0. Counters with known labels are there at 0 from the start. The drill adds an
outage and a full cache directory to it, and ends green."""
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import BIN, ROOT, sh
from daemons import daemon_pid
from test_faults import UPLOAD, fx, rand  # noqa: F401 (fx: fixture)
from test_operating import free_port, samples, scrape
from test_unattended import CLOSE_WITH_METADATA, crash, lost_entries, wait_gone, writer_holding_open

REFRESH = 30  # bucketfs_unsaved_files is read again at most every 30 s (docs/OPERATING.md)


def alert_rules():
    """{alert: expr} from the rules block of docs/OPERATING.md."""
    text = open(os.path.join(ROOT, "docs", "OPERATING.md")).read()
    at = text.index("<!-- checked by Tests/e2e/test_alerts.py: alert rules -->")
    block = text[at:].split("```", 2)[1]
    return dict(re.findall(r"- alert: (\w+).*\n\s+expr: (.+)", block))


def unsaved(s, where, kind):
    return s[("bucketfs_unsaved_files", frozenset({("where", where), ("kind", kind)}))]


def unsaved_alert(s):
    """docs/OPERATING.md: `sum(bucketfs_unsaved_files) > 0`."""
    return sum(v for (name, _), v in s.items() if name == "bucketfs_unsaved_files") > 0


def until(port, want, timeout=2 * REFRESH):
    """The samples once `want(samples)` holds, within two refresh intervals."""
    deadline = time.monotonic() + timeout
    while True:
        s = samples(scrape(port))
        if want(s) or time.monotonic() > deadline:
            return s
        time.sleep(1)


@pytest.mark.faults
def test_the_unsaved_files_alert_fires_after_a_crash_elsewhere_and_clears_when_settled(fx, tmp_path):
    src = f"gs://{fx.emulator.bucket_name}/{fx.prefix}"
    direct = ["--endpoint", fx.emulator.endpoint, "--anonymous"]
    mnt = fx.mount("--write-back")
    cache = fx.mounts.cache_dir(mnt)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, action="hang")
    r = fx.job([sys.executable, "-c", CLOSE_WITH_METADATA, f"{mnt}/done.txt"]).result(30)
    assert r.rc == 0, r
    (tmp_path / "part.bin").write_bytes(rand(1 << 20))
    w = writer_holding_open(tmp_path / "part.bin", f"{mnt}/part.bin")
    crash(mnt)
    w.kill()
    w.wait()
    fx.proxy.clear()
    fx.proxy.release()

    # Another cache directory, with metrics: the alert fires at once.
    port = free_port()
    other = fx.mounts.mount(src, *direct, "--metrics-address", f"127.0.0.1:{port}", cache_dir=tmp_path / "second.cache")
    s = samples(scrape(port))
    assert unsaved(s, "elsewhere", "complete") == 1 and unsaved(s, "elsewhere", "cut_off") == 1, s
    assert unsaved(s, "here", "complete") == 0 and unsaved(s, "here", "cut_off") == 0, s
    assert unsaved_alert(s)
    # Every rule of the docs can be evaluated from the start: each metric it names is exported.
    rules = alert_rules()
    assert rules["BucketfsUnsavedFiles"] == "sum by (instance) (bucketfs_unsaved_files) > 0", rules
    names = {name for name, _ in s}
    for alert, expr in rules.items():
        for metric in re.findall(r"bucketfs_\w+", expr):
            assert metric in names, (alert, metric)
    # Counters with known labels are there at 0 before their first event (an increase() sees it).
    for errno in ("ENOSPC", "EDQUOT", "EIO"):
        assert s[("bucketfs_cache_dir_errors_total", frozenset({("errno", errno)}))] == 0, s
    assert s[("bucketfs_uploads_failed_total", frozenset())] == 0
    for op in ("write", "flush", "release"):
        assert s[("bucketfs_fuse_errors_total", frozenset({("operation", op), ("errno", "EIO")}))] == 0, s

    # recover settles the complete file; within the refresh interval the metric says so.
    rec = subprocess.run([BIN, "recover", cache, *direct], capture_output=True, text=True, timeout=60)
    assert "uploaded: 'done.txt'" in rec.stdout, rec
    s = until(port, lambda s: unsaved(s, "elsewhere", "complete") == 0)
    assert unsaved(s, "elsewhere", "complete") == 0 and unsaved(s, "elsewhere", "cut_off") == 1, s
    assert unsaved_alert(s)
    # The cut-off file, once settled (the runbook: the writer ran again; delete it), clears it.
    [entry] = lost_entries(cache)
    os.unlink(entry)
    os.unlink(entry + ".json")
    s = until(port, lambda s: not unsaved_alert(s))
    assert not unsaved_alert(s), s
    fx.mounts.unmount(other)


@pytest.mark.faults
def test_recover_through_the_running_mount_uploads_its_lost_and_found_while_it_writes(fx, tmp_path):
    """An outage gives a file up into the mount's own lost+found (`where="here"`); once the
    server is back, `POST /recover` on the metrics port uploads it through the running mount,
    with no unmount, while another writer keeps writing; the alert then clears."""
    from test_faults import LOST_FOUND_WAIT, OP, SLACK, lost_and_found
    import threading
    import urllib.request
    port = free_port()
    mnt = fx.mount("--metrics-address", f"127.0.0.1:{port}")
    data = rand(200_000)
    (tmp_path / "f.bin").write_bytes(data)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("f.bin"), action="status", status=503)
    assert fx.job(["cp", str(tmp_path / "f.bin"), f"{mnt}/f.bin"]).result(OP + 2 * SLACK).rc != 0
    assert lost_and_found(fx.mounts.cache_dir(mnt), data, LOST_FOUND_WAIT)
    s = until(port, lambda s: unsaved(s, "here", "complete") == 1)
    assert unsaved(s, "here", "complete") == 1 and unsaved_alert(s), s
    fx.proxy.clear()
    # A writer keeps writing through the mount meanwhile.
    stop, written, errors = threading.Event(), [], []

    def writer():
        i = 0
        while not stop.is_set():
            try:
                with open(f"{mnt}/w{i}.txt", "wb") as f:
                    f.write(b"x" * 1000)
                written.append(i)
            except OSError as e:
                errors.append(e)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/recover", method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            out = r.read().decode()
    finally:
        stop.set()
        t.join(60)
    assert "uploaded: 'f.bin'" in out and "recovered 1 file(s)" in out, out
    assert fx.get("f.bin") == data
    assert not os.listdir(os.path.join(fx.mounts.cache_dir(mnt), "lost+found")), out
    assert written and not errors, errors[:3]
    s = until(port, lambda s: not unsaved_alert(s))
    assert not unsaved_alert(s), s


def cache_errors(s, errno):
    return s[("bucketfs_cache_dir_errors_total", frozenset({("errno", errno)}))]


@pytest.mark.faults
@pytest.mark.skipif(os.geteuid() != 0, reason="the drill's full cache is a tmpfs, and mounting one needs root")
def test_the_crash_drill_ends_green(fx, tmp_path):
    """The drill, scripted: kill -9 while a backup writes (a closed file whose upload hung, and a
    pack still being written, cut off), a mount with another cache directory, an outage that gives
    a file up into that mount's lost+found, and that cache directory full (a 2 MiB tmpfs) during a
    write. The alert and `status` are red; recovery through the running mount and `recover` of
    the old directory settle the complete files, `recover --drop-cut-off` the rest; `status`
    exits 0 and the metric returns to 0."""
    tiny = tmp_path / "tiny-cache"
    tiny.mkdir()
    sh(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(tiny)])
    try:
        drill(fx, tmp_path, tiny)
    finally:
        # The mount holds its cache directory until it exits; the tmpfs goes lazily after it.
        for mnt in fx.mounts.points:
            pid = daemon_pid(mnt)
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
            if pid:
                wait_gone(pid)
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True)


def drill(fx, tmp_path, tiny):
    from test_faults import LOST_FOUND_WAIT, OP, SLACK, lost_and_found
    import urllib.request
    src = f"gs://{fx.emulator.bucket_name}/{fx.prefix}"
    mnt = fx.mount("--write-back")
    old = fx.mounts.cache_dir(mnt)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, action="hang")
    assert fx.job([sys.executable, "-c", CLOSE_WITH_METADATA, f"{mnt}/done.txt"]).result(30).rc == 0
    (tmp_path / "pack.tmp").write_bytes(rand(1 << 20))
    w = writer_holding_open(tmp_path / "pack.tmp", f"{mnt}/pack.tmp")
    crash(mnt)
    w.kill()
    w.wait()
    fx.proxy.clear()
    fx.proxy.release()
    # The next night's mount, with another cache directory (fstab, systemd), a small one, and
    # metrics.
    port = free_port()
    new = fx.mount("--metrics-address", f"127.0.0.1:{port}", cache_dir=tiny)
    assert cache_errors(samples(scrape(port)), "ENOSPC") == 0
    data = rand(100_000)
    (tmp_path / "night.bin").write_bytes(data)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("night.bin"), action="status", status=503)
    assert fx.job(["cp", str(tmp_path / "night.bin"), f"{new}/night.bin"]).result(OP + 2 * SLACK).rc != 0
    assert lost_and_found(str(tiny), data, LOST_FOUND_WAIT)
    fx.proxy.clear()
    # The cache directory fills up during a write (docs/OPERATING.md, "The cache directory"): the
    # writer gets ENOSPC, nothing of the file is uploaded, the error is counted, and the cut stage
    # file goes, so the room is back and the next write succeeds.
    (tmp_path / "big.bin").write_bytes(rand(4 << 20))
    r = fx.job(["cp", str(tmp_path / "big.bin"), f"{new}/big.bin"]).result(OP + 2 * SLACK)
    assert r.rc != 0 and b"No space left on device" in r.err, r
    assert fx.get("big.bin") is None
    assert cache_errors(samples(scrape(port)), "ENOSPC") >= 1
    assert not [n for n in os.listdir(tiny) if n.startswith("stage-")], os.listdir(tiny)
    assert lost_entries(str(tiny)) == [lost_and_found(str(tiny), data, 1)]  # night.bin's alone: no partial file kept
    assert fx.job(["cp", str(tmp_path / "night.bin"), f"{new}/after-full.bin"]).result(OP + 2 * SLACK).rc == 0
    assert fx.get("after-full.bin") == data
    s = until(port, lambda s: unsaved(s, "here", "complete") == 1)
    assert unsaved(s, "here", "complete") == 1 and unsaved(s, "elsewhere", "complete") == 1, s
    assert unsaved(s, "elsewhere", "cut_off") == 1 and unsaved_alert(s), s
    st = subprocess.run([BIN, "status", src], capture_output=True, text=True, timeout=30)
    assert st.returncode == 1, st
    # status says what the running mount holds unsaved, not only that it is in use
    [line] = [l for l in st.stdout.splitlines() if l.split("\t")[1:2] == [str(tiny)]]
    assert "running: mounted at" in line and "it holds 1 file(s) in lost+found" in line, st.stdout
    # Recovery through the running mount, and of the old directory beside it.
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/recover", method="POST"), timeout=120) as r:
        assert "uploaded: 'night.bin'" in r.read().decode()
    rec = subprocess.run([BIN, "recover", old], capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0 and "uploaded: 'done.txt'" in rec.stdout and "cut off (left)" in rec.stdout, rec
    assert subprocess.run([BIN, "status", src], capture_output=True, timeout=30).returncode == 1
    s = until(port, lambda s: unsaved(s, "here", "complete") + unsaved(s, "elsewhere", "complete") == 0)
    assert unsaved(s, "elsewhere", "cut_off") == 1 and unsaved_alert(s), s
    # The cut-off pack, after a look.
    rec = subprocess.run([BIN, "recover", old, "--drop-cut-off"], capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0 and "dropped (--drop-cut-off)" in rec.stdout, rec
    st = subprocess.run([BIN, "status", src], capture_output=True, text=True, timeout=30)
    assert st.returncode == 0 and "nothing to run" in st.stdout.splitlines()[-1], st
    s = until(port, lambda s: not unsaved_alert(s))
    assert not unsaved_alert(s), s
    assert fx.get("done.txt") == b"complete content\n" * 1000 and fx.get("night.bin") == data
    assert fx.get("pack.tmp") is None and fx.get("big.bin") is None
