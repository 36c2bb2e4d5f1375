"""Mounts an operator can leave alone (docs/OPERATING.md, "Nightly backups"): one mount per mount
point (a live, dead or foreign mount and a non-empty directory are refused with the command that
fixes it), a cache directory in use is refused on the terminal naming the process to wait for, and
every message of a failed mount reaches the terminal (as JSON with --log-format json)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN, ROOT, sh
from daemons import daemon_pid


def mounted_entries(path):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if line.split()[4] == str(path)]


def wait_gone(pid, timeout=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if ") Z" in open(f"/proc/{pid}/stat").read():
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def try_mount(source, mnt, *options):
    return subprocess.run([BIN, "mount", source, str(mnt), *map(str, options)], capture_output=True, timeout=60)


def test_a_second_mount_on_a_live_mount_point_is_refused(bucket, mounts, tmp_path):
    bucket.put("a.txt", "first")
    mnt = mounts.mount(bucket.src(), "--log-format", "json")
    first_cache = mounts.cache_dir(mnt)
    # Another cache directory, then the same: both refused, nothing stacked.
    for cache in (tmp_path / "other.cache", first_cache):
        p = try_mount(bucket.src(), mnt, "--cache-dir", cache)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert "already a bucketfs mount" in err and f"bucketfs unmount {mnt}" in err, err
        assert len(mounted_entries(mnt)) == 1
    # The first mount's JSON log stays JSON (the refusals went to the terminal, not into it).
    for line in open(mounts.log_path(mnt)).read().splitlines():
        json.loads(line)
    assert open(f"{mnt}/a.txt").read() == "first"
    mounts.unmount(mnt)


def test_a_cache_directory_in_use_is_refused_naming_the_process_to_wait_for(bucket, mounts, tmp_path):
    mnt = mounts.mount(bucket.src(), "--log-format", "json")
    pid = daemon_pid(mnt)
    assert pid
    other = tmp_path / "other-mnt"
    other.mkdir()
    for fmt in ("text", "json"):
        p = try_mount(bucket.src(), other, "--cache-dir", mounts.cache_dir(mnt), "--log-format", fmt)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert not mounted_entries(other)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        message = json.loads(lines[0])["message"] if fmt == "json" else lines[0]
        assert f"in use by bucketfs process {pid}" in message and "wait for it" in message, message
        assert "its own --cache-dir" not in message
    for line in open(mounts.log_path(mnt)).read().splitlines():
        json.loads(line)
    mounts.unmount(mnt)


def test_a_non_empty_mount_point_is_refused_unless_allowed(bucket, mounts, tmp_path):
    bucket.put("in-bucket.txt", "b")
    mnt = tmp_path / "full"
    mnt.mkdir()
    (mnt / "mine.txt").write_text("hidden while mounted")
    mounts.points.append(str(mnt))
    p = try_mount(bucket.src(), mnt, "--cache-dir", tmp_path / "c1")
    assert p.returncode == 1 and b"not empty" in p.stderr and b"--allow-non-empty" in p.stderr, p.stderr
    assert not mounted_entries(mnt)
    p = try_mount(bucket.src(), mnt, "--cache-dir", tmp_path / "c1", "--allow-non-empty")
    assert p.returncode == 0, p.stderr
    assert os.listdir(mnt) == ["in-bucket.txt"]
    mounts.unmount(mnt)
    assert (mnt / "mine.txt").read_text() == "hidden while mounted"


def test_a_dead_mount_is_refused_with_the_command_that_clears_it(bucket, mounts, tmp_path):
    mnt = mounts.mount(bucket.src())
    pid = daemon_pid(mnt)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    with pytest.raises(OSError) as e:
        os.listdir(mnt)
    assert e.value.errno in (103, 107)  # the first request after the death, then ENOTCONN
    p = try_mount(bucket.src(), mnt, "--cache-dir", mounts.cache_dir(mnt))
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "dead mount" in err and f"fusermount3 -u {mnt}" in err, err
    sh(["fusermount3", "-u", mnt])
    p = try_mount(bucket.src(), mnt, "--cache-dir", mounts.cache_dir(mnt))
    assert p.returncode == 0, p.stderr
    mounts.unmount(mnt)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_any_other_mount_on_the_mount_point_is_refused(bucket, tmp_path):
    mnt = tmp_path / "tmpfs-mnt"
    mnt.mkdir()
    sh(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)])
    try:
        p = try_mount(bucket.src(), mnt, "--cache-dir", tmp_path / "c", "--allow-non-empty")
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert "already a mount point (tmpfs" in err and f"umount {mnt}" in err, err
        assert len(mounted_entries(mnt)) == 1
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        subprocess.run(["umount", str(mnt)], capture_output=True)


# --- logs and metrics that tell the truth, disk space -------------------------------------------

from test_faults import (LOST_FOUND_WAIT, OP, SLACK, UPLOAD, WRITER_HOLDING_OPEN,  # noqa: E402
                         fx, log_naming, lost_and_found, rand)  # noqa: F401 (fx: fixture)
from test_operating import free_port, samples, scrape  # noqa: E402

STAT_WITH_A_HANDLER = r"""
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda *a: None)
print("ready", flush=True)
try:
    os.stat(sys.argv[1])
except OSError as e:
    print("ERRNO", e.errno, flush=True)
"""


@pytest.mark.faults
def test_an_interrupted_call_is_logged_at_debug_never_as_an_error(fx):
    """restic's case: a signal reaches a process blocked in a slow call; the kernel interrupts the
    request, the mount cancels it (EINTR). Nothing went wrong: a debug line, no error line."""
    mnt = fx.mount("--log-level", "debug")
    log = fx.mounts.log_path(mnt)
    # The lookup asks the bucket with one list request of the names from slow.txt on, or (a
    # store that cannot list under a partial name) with a GET of it: either hangs.
    hangs = [fx.proxy.add_rule(method="GET", path_re=fx.obj_path("slow.txt"), action="hang"),
             fx.proxy.add_rule(method="GET", path_re=r"/o$", query_re=r"slow\.txt", action="hang")]
    job = fx.job([sys.executable, "-c", STAT_WITH_A_HANDLER, f"{mnt}/slow.txt"])
    assert job.p.stdout.readline().strip() == b"ready"
    deadline = time.time() + 10
    while time.time() < deadline and not any(h.fired for h in hangs):
        time.sleep(0.02)
    assert any(h.fired for h in hangs), "the lookup never reached the server"
    for _ in range(3):
        job.p.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
    job.p.kill()  # a fatal signal interrupts the request too
    job.result(10)
    fx.proxy.clear()
    fx.proxy.release()
    deadline = time.time() + 10
    while time.time() < deadline and not log_naming(log, "interrupted", r"debug"):
        time.sleep(0.2)
    assert log_naming(log, "interrupted", r"debug"), open(log).read()[-2000:]
    text = open(log).read()
    assert not log_naming(log, "Interrupted system call"), text[-2000:]
    assert not log_naming(log, "cancelled"), text[-2000:]


@pytest.mark.faults
def test_every_failed_upload_attempt_is_counted_in_the_default_mode(fx, tmp_path):
    port = free_port()
    mnt = fx.mount("--metrics-address", f"127.0.0.1:{port}")
    data = rand(200_000)
    (tmp_path / "f.bin").write_bytes(data)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("f.bin"), action="status", status=503)
    r = fx.job(["cp", str(tmp_path / "f.bin"), f"{mnt}/f.bin"]).result(OP + 2 * SLACK)
    assert r.rc != 0, r
    kept = lost_and_found(fx.mounts.cache_dir(mnt), data, LOST_FOUND_WAIT)
    assert kept
    s = samples(scrape(port))
    # close's attempt and each background one (--upload-retries 2)
    assert s[("bucketfs_uploads_failed_total", frozenset())] == 3, s
    assert s[("bucketfs_lost_found_entries", frozenset())] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_read_only_cache_directory_is_refused_naming_the_path_and_the_option(bucket, tmp_path):
    ro = tmp_path / "ro-cache"
    ro.mkdir()
    sh(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)])
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        p = try_mount(bucket.src(), mnt, "--cache-dir", ro)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert str(ro) in err and "--cache-dir" in err and "Read-only file system" in err, err
        assert not mounted_entries(mnt)
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        subprocess.run(["umount", str(ro)], capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_cache_directory_is_logged_counted_and_never_uploads_a_partial_file(bucket, mounts, tmp_path):
    bucket.put("old.bin", "the old content")
    tiny = tmp_path / "tiny-cache"
    tiny.mkdir()
    sh(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tiny)])
    try:
        port = free_port()
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        mounts.points.append(str(mnt))
        log = tmp_path / "full.log"
        p = try_mount(bucket.src(), mnt, "--cache-dir", tiny, "--log-file", log, "--metrics-address", f"127.0.0.1:{port}")
        assert p.returncode == 0, p.stderr
        # The mount warns: its cache has less room than the bound it states.
        assert b"warning" in p.stderr and str(tiny).encode() in p.stderr and b"1.0 GiB" in p.stderr, p.stderr
        src = tmp_path / "big.bin"
        src.write_bytes(rand(3 << 20))
        for name in ("new.bin", "old.bin"):
            r = subprocess.run(["cp", str(src), f"{mnt}/{name}"], capture_output=True, timeout=60)
            assert r.returncode != 0 and b"No space left on device" in r.stderr, r
        # Neither a new object nor a replaced one from the cut content.
        assert not bucket.exists("new.bin")
        assert bucket.cat("old.bin") == b"the old content"
        line = log_naming(str(log), "No space left on device")
        assert line and str(tiny) in line and "--cache-dir" in line and "not be uploaded" in line, open(log).read()
        s = samples(scrape(port))
        assert s[("bucketfs_cache_dir_errors_total", frozenset({("errno", "ENOSPC")}))] >= 2, s
        # The cut stage files are gone: the room is back.
        assert not [n for n in os.listdir(tiny) if n.startswith("stage-")]
    finally:
        pid = daemon_pid(tmp_path / "mnt")
        subprocess.run(["fusermount3", "-uz", str(tmp_path / "mnt")], capture_output=True)
        try:
            if pid:
                wait_gone(pid)  # it holds the cache directory until it exits
        finally:
            # Lazily, so that a process still holding it never leaves the tmpfs mounted.
            subprocess.run(["umount", "-l", str(tiny)], capture_output=True)


# --- crashes: cut-off files, the bucket already has it, another cache directory, recover -----------

def sidecar(path):
    return json.load(open(path + ".json"))


def lost_entries(cache):
    d = os.path.join(cache, "lost+found")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if not n.endswith(".json")) if os.path.isdir(d) else []


def writer_holding_open(src, dst):
    """A process that wrote all of `src` to `dst` and holds it open (never closes it)."""
    p = subprocess.Popen([sys.executable, "-c", WRITER_HOLDING_OPEN], env={**os.environ, "SRC": str(src), "DST": str(dst)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready", p.stderr.read()
    return p


def crash(mnt):
    """kill -9 of the mount's process, then the dead mount cleared."""
    pid = daemon_pid(mnt)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_kill_during_a_write_keeps_a_file_marked_cut_off(bucket, mounts, tmp_path):
    mnt = mounts.mount(bucket.src())
    cache = mounts.cache_dir(mnt)
    data = rand(1 << 20)
    (tmp_path / "part.bin").write_bytes(data)
    w = writer_holding_open(tmp_path / "part.bin", f"{mnt}/part.bin")
    crash(mnt)
    w.kill()
    w.wait()
    again = mounts.mount(bucket.src(), cache_dir=cache)
    # the move into lost+found runs in the background once the mount serves
    deadline = time.time() + 15
    while time.time() < deadline and not (lost_entries(cache) and log_naming(mounts.log_path(again), lost_entries(cache)[0])):
        time.sleep(0.1)
    [entry] = lost_entries(cache)
    assert os.path.basename(entry).startswith("part.bin.") and entry.endswith(".cut-off"), entry
    side = sidecar(entry)
    assert side["closed"] is False and side["complete"] is False and side["bytes"] == len(data), side
    assert "CUT OFF" in side["reason"]
    line = log_naming(mounts.log_path(again), entry)
    assert line and "cut-off" in line and "not a complete copy" in line, line
    assert not bucket.exists("part.bin")
    mounts.unmount(again)


@pytest.mark.faults
def test_kill_during_close_when_the_bucket_has_the_file_raises_no_alarm(fx, tmp_path):
    """The upload reached the bucket, its answer did not (held), and the mount was killed: the
    next mount finds the stage file, sees the bucket has the same md5, keeps nothing, logs no error."""
    mnt = fx.mount()
    cache = fx.mounts.cache_dir(mnt)
    data = rand(300_000)
    (tmp_path / "done.bin").write_bytes(data)
    held = fx.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=fx.upload_body("done.bin"), action="stall_after_headers")
    job = fx.job(["cp", str(tmp_path / "done.bin"), f"{mnt}/done.bin"])
    assert fx.proxy.wait_fired(held, count=1, timeout=15)
    deadline = time.time() + 10
    while time.time() < deadline and fx.get("done.bin") != data:
        time.sleep(0.1)
    assert fx.get("done.bin") == data
    crash(mnt)
    job.result(10)
    fx.proxy.clear()
    fx.proxy.release()
    assert [n for n in os.listdir(cache) if n.startswith("stage-") and n.endswith(".json")], "no stage sidecar left by the crash"
    again = fx.mounts.mount(f"gs://{fx.emulator.bucket_name}/{fx.prefix}", "--endpoint", fx.emulator.endpoint, "--anonymous",
                            cache_dir=cache)
    log = fx.mounts.log_path(again)
    # the check runs in the background once the mount serves
    deadline = time.time() + 15
    while time.time() < deadline and not log_naming(log, "done.bin", r"notice"):
        time.sleep(0.1)
    assert lost_entries(cache) == []
    assert log_naming(log, "done.bin", r"notice") and "nothing to recover" in log_naming(log, "done.bin", r"notice")
    assert not log_naming(log, "done.bin"), open(log).read()
    fx.mounts.unmount(again)


CLOSE_WITH_METADATA = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"complete content\n" * 1000)
os.fchmod(fd, 0o600)
os.setxattr(path, "user.color", b"blue")
os.utime(fd, (1500000000, 1500000000))
os.close(fd)
"""


@pytest.mark.faults
def test_a_crash_then_another_cache_directory_is_reported_and_recover_uploads_what_is_complete(fx, tmp_path):
    """--write-back: a file closed (with mode, xattr and mtime) whose upload hangs, a second one
    whose upload hangs and whose object then changes in the bucket, and a third still open; kill -9.
    A mount with another cache directory says at once, at error level, where the data is and the
    command that recovers it; so does `bucketfs status`. `bucketfs recover` uploads the complete
    file with its metadata, puts the one a newer object replaced beside it (never over it), and
    leaves the cut-off one."""
    src = f"gs://{fx.emulator.bucket_name}/{fx.prefix}"
    direct = ["--endpoint", fx.emulator.endpoint, "--anonymous"]
    mnt = fx.mount("--write-back")
    cache = fx.mounts.cache_dir(mnt)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, action="hang")
    r = fx.job([sys.executable, "-c", CLOSE_WITH_METADATA, f"{mnt}/done.txt"]).result(30)
    assert r.rc == 0, r
    (tmp_path / "other.txt").write_bytes(b"mine, older than the bucket's\n")
    assert fx.job(["cp", str(tmp_path / "other.txt"), f"{mnt}/other.txt"]).result(30).rc == 0
    part = rand(1 << 20)
    (tmp_path / "part.bin").write_bytes(part)
    w = writer_holding_open(tmp_path / "part.bin", f"{mnt}/part.bin")
    crash(mnt)
    w.kill()
    w.wait()
    fx.proxy.clear()
    fx.proxy.release()
    fx.put("other.txt", b"newer, written elsewhere after the crash\n")
    # Another cache directory (as fstab or systemd would give): the mount says where the data is.
    other_mnt = tmp_path / "second"
    other_mnt.mkdir()
    fx.mounts.points.append(str(other_mnt))
    p = try_mount(src, other_mnt, *direct, "--cache-dir", tmp_path / "second.cache", "--log-file", tmp_path / "second.log")
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "error" in err and cache in err and f"bucketfs recover {cache}" in err, err
    assert log_naming(str(tmp_path / "second.log"), f"bucketfs recover {cache}"), open(tmp_path / "second.log").read()
    st = subprocess.run([BIN, "status", src], capture_output=True, timeout=30)
    assert st.returncode == 1 and cache.encode() in st.stdout and b"bucketfs recover" in st.stderr, st
    fx.mounts.unmount(str(other_mnt))
    # A dry run changes nothing.
    dry = subprocess.run([BIN, "recover", cache, "--dry-run", *direct], capture_output=True, text=True, timeout=60)
    assert "would upload: 'done.txt'" in dry.stdout, dry
    assert fx.get("done.txt") is None
    # The recovery.
    rec = subprocess.run([BIN, "recover", cache, *direct], capture_output=True, text=True, timeout=60)
    out = rec.stdout
    assert "uploaded: 'done.txt'" in out, rec
    assert "cut off (left)" in out and "part.bin" in out, out
    m = re.search(r"uploaded beside: 'other\.txt' is now generation \d+, .*it is in '(other\.txt\.recovered-\d{8}T\d{6}Z)'", out)
    assert m, out
    last = out.splitlines()[-1]
    assert "recovered 2 file(s)" in last and "1 beside" in last and "1 cut off" in last and "0 left" in last, out
    assert rec.returncode == 0  # only the cut-off file is left, for --drop-cut-off or --keep-aside
    assert fx.get(m.group(1)) == b"mine, older than the bucket's\n"
    assert fx.get("done.txt") == b"complete content\n" * 1000
    blob = fx.gcs.get_blob(f"{fx.prefix}/done.txt")
    assert blob.metadata.get("color") == "blue", blob.metadata
    assert blob.metadata.get("goog-reserved-posix-mode") in ("600", "100600"), blob.metadata
    assert blob.metadata.get("goog-reserved-file-mtime") == "1500000000", blob.metadata
    assert blob.content_type == "text/plain"
    assert fx.get("other.txt") == b"newer, written elsewhere after the crash\n"
    assert fx.get("part.bin") is None
    left = [os.path.basename(e) for e in lost_entries(cache)]
    assert len(left) == 1 and left[0].startswith("part.bin.") and left[0].endswith(".cut-off"), left


# --- which binary the fstab form runs -----------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="mount(8) needs root")
def test_the_fstab_form_runs_the_binary_its_source_field_names(bucket, tmp_path):
    """docs/OPERATING.md's line with the type `fuse` and `PATH#SOURCE`: mount.fuse3 runs that
    binary, whatever is on mount's PATH."""
    text = open(os.path.join(ROOT, "docs", "OPERATING.md")).read()
    at = text.index("<!-- checked by Tests/e2e/test_unattended.py: fstab-binary -->")
    fields = text[at:].split("```", 2)[1].split("\n", 1)[1].split()
    assert fields[0].startswith("/opt/bucketfs/bin/bucketfs#gs://") and fields[2] == "fuse", fields
    bucket.put("hello.txt", "run by path")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    options = [f"cache_dir={tmp_path / 'cache'}" if o.startswith("cache_dir=") else o for o in fields[3].split(",")]
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{BIN}#{bucket.src()} {mnt} fuse {','.join(options)} 0 0\n")
    try:
        sh(["mount", "-T", str(fstab), str(mnt)])
        assert open(mnt / "hello.txt").read() == "run by path"
        pid = daemon_pid(mnt)
        assert pid and os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(BIN)
        sh(["umount", str(mnt)])
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
