"""A write that failed is never lost when the mount ends (docs/SEMANTICS.md §3): unmount and SIGTERM
wait for an upload attempt in flight, give every unsaved file one more attempt within one bound,
keep what still fails in CACHE_DIR/lost+found (logged at error level), leave no stage file behind,
and the process does not exit before that is done.

One case runs with the DEFAULT timings (--op-timeout 60, --upload-retries 5, --retry-backoff-max
30), where unmount meets a background attempt in flight — the schedule the short timings of the
other fault tests never reach. It takes about 70 s.
"""
import os
import signal
import time

import pytest

from test_faults import (OP, SLACK, UPLOAD, daemon_pid, fx, log_naming, lost_and_found,  # noqa: F401 (fx: fixture)
                         rand)

pytestmark = pytest.mark.faults


def stage_files(cache):
    return sorted(n for n in os.listdir(cache) if n.startswith("stage-") and "." not in n)


def wait_exit(pid, timeout):
    """Waits for process `pid` to end; returns the seconds it took, or None if it did not."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            st = open(f"/proc/{pid}/stat").read()
        except OSError:
            return time.monotonic() - t0
        if ") Z" in st:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def end_mount(fx, mnt, how):
    pid = daemon_pid(mnt)
    assert pid, f"no bucketfs process for {mnt}"
    if how == "unmount":
        r = fx.job(["fusermount3", "-u", mnt]).result(10)
        assert r.rc == 0, r
    else:
        os.kill(pid, signal.SIGTERM)
    return pid


def test_unmount_during_a_background_attempt_with_default_timings_keeps_the_data(fx, tmp_path):
    """The issue's sequence: a server that takes the upload and never answers; close gives EIO
    after the 60 s deadline; 5 s later (a background attempt is in flight) the user unmounts; the
    server then answers again. The data must end in the bucket, no stage file left."""
    mnt = fx.mount(fast=False)
    cache = fx.mounts.cache_dir(mnt)
    data = rand(5 << 20)
    (tmp_path / "up5.bin").write_bytes(data)
    hang = fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("up5.bin"), action="hang")
    r = fx.job(["cp", str(tmp_path / "up5.bin"), f"{mnt}/up5.bin"]).result(60 + 3 * SLACK)
    assert not r.hung and r.rc != 0 and b"Input/output error" in r.err, r
    assert r.elapsed < 60 + SLACK, r
    assert fx.proxy.wait_fired(hang, count=hang.fired + 1, timeout=10), "no background attempt after close's EIO"
    time.sleep(4)
    assert len(stage_files(cache)) == 1, "the data is not staged after close's EIO"
    pid = end_mount(fx, mnt, "unmount")
    time.sleep(1)
    assert stage_files(cache), "the stage file went at unmount while its upload was in flight"
    # The server answers again: the attempt in flight fails (its connection ends), unmount's own
    # attempt goes through.
    fx.proxy.clear()
    fx.proxy.release()
    took = wait_exit(pid, 60 + SLACK)
    assert took is not None, "the mount process did not exit within the unmount bound (--op-timeout)"
    assert fx.get("up5.bin") == data, "the 5 MiB are not in the bucket"
    assert not stage_files(cache), f"stage files left: {stage_files(cache)}"
    assert log_naming(fx.mounts.log_path(mnt), "up5.bin", r"notice|info") is not None


@pytest.mark.parametrize("how", ["unmount", "sigterm"])
def test_mount_ending_while_the_server_hangs_keeps_the_data_in_lost_and_found(fx, tmp_path, how):
    """Short timings: the server never answers; the mount ends (unmount or SIGTERM) while a
    background attempt is in flight. The data goes to lost+found, logged at error level; the
    process exits within the bound; no stage file is left."""
    mnt = fx.mount()
    cache = fx.mounts.cache_dir(mnt)
    data = rand((1 << 20) + 77)
    (tmp_path / "h.bin").write_bytes(data)
    hang = fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("h.bin"), action="hang")
    r = fx.job(["cp", str(tmp_path / "h.bin"), f"{mnt}/h.bin"]).result(OP + 2 * SLACK)
    assert not r.hung and r.rc != 0, r
    assert fx.proxy.wait_fired(hang, count=hang.fired + 1, timeout=10), "no background attempt after close's EIO"
    pid = end_mount(fx, mnt, how)
    took = wait_exit(pid, 2 * OP + SLACK)
    assert took is not None, "the mount process did not exit within the bound"
    assert took < 2 * OP + SLACK
    kept = lost_and_found(cache, data, 1)
    assert kept, f"the data is neither in the bucket nor in lost+found: {os.listdir(cache)}"
    assert "h.bin" in os.path.basename(kept)
    assert log_naming(fx.mounts.log_path(mnt), kept, within=15), "the log does not name the lost+found file at error level"
    assert not stage_files(cache), f"stage files left: {stage_files(cache)}"
    assert fx.get("h.bin") is None


@pytest.mark.parametrize("how", ["unmount", "sigterm"])
def test_mount_ending_between_attempts_uploads_when_the_server_is_back(fx, tmp_path, how):
    """Short timings: every upload answered 503; close gives EIO; the fault lifts; the mount ends
    before the next background attempt. Its last attempt uploads the data."""
    mnt = fx.mount("--retry-backoff-max", 30)  # the next background attempt comes late
    cache = fx.mounts.cache_dir(mnt)
    data = rand(300_000)
    (tmp_path / "s.bin").write_bytes(data)
    rule = fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("s.bin"), action="status", status=503)
    r = fx.job(["cp", str(tmp_path / "s.bin"), f"{mnt}/s.bin"]).result(OP + 2 * SLACK)
    assert not r.hung and r.rc != 0, r
    fx.proxy.wait_fired(rule, count=rule.fired + 1, timeout=10)  # the first background attempt (after 1 s)
    fx.proxy.clear()
    pid = end_mount(fx, mnt, how)
    took = wait_exit(pid, OP + SLACK)
    assert took is not None, "the mount process did not exit within the bound"
    assert fx.get("s.bin") == data
    assert not stage_files(cache), f"stage files left: {stage_files(cache)}"
