"""Uploads that stream while a file is written (docs/SEMANTICS.md §3.3, "Streamed uploads"),
through a real mount of a gs:// prefix behind the fault proxy (faultproxy.py), on each Cloud
Storage server: a new file written in order sends its session's chunks before close, and close
sends only the rest; a seek back cancels the stream and the file is uploaded whole, once; a 503
or a reset in the middle of the stream resumes from what the server kept, sending nothing twice;
a crash mid-stream leaves no object and the data cut off in lost+found.

Every request the proxy sees is recorded with its Content-Range (`Recorder`), so the tests check
what was sent and when, not only the object.
"""
import base64
import subprocess
import json
import os
import signal
import sys
import threading
import time

import pytest

from conftest import ROOT
from daemons import daemon_pid
from test_faults import MOUNT_OPTS, OP, SLACK, Fx, lost_and_found, mount_options, _zombie

MIB = 1 << 20

# Writes the bytes of SRC to DST in order, 1 MiB a write (at RATE bytes a second, if given). With SEEK_AT: after that many MiB it
# says so (GO.waiting), waits for GO (a file) to exist, writes bytes 4096-5095 reversed there (a
# seek back), then goes on at the end. Prints one JSON line: when the last write ended and when close began and ended.
WRITER = r"""
import json, os, sys, time
src, dst = os.environ["SRC"], os.environ["DST"]
seek_at = int(os.environ.get("SEEK_AT", "-1")); go = os.environ.get("GO", "")
rate = float(os.environ.get("RATE", "0"))  # bytes a second, 0: as fast as it goes
t0 = time.time()
data = open(src, "rb").read()
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
at, mib = 0, 1 << 20
while at < len(data):
    if seek_at >= 0 and at == seek_at * mib:
        open(go + ".waiting", "w").close()
        while not os.path.exists(go):
            time.sleep(0.01)
        os.pwrite(fd, data[4096:5096][::-1], 4096)
    n = os.pwrite(fd, data[at:at + mib], at)
    at += n
    if rate:
        time.sleep(max(0.0, t0 + at / rate - time.time()))
last = time.time()
os.close(fd)
print(json.dumps({"last_write": last, "close_end": time.time(), "close_start": last}), flush=True)
"""


class Recorder:
    """Every request the proxy handles: method, target, Content-Range, result, time read."""

    def __init__(self, proxy):
        self.lock = threading.Lock()
        self.rows = []
        proxy.on_request = self.note

    def note(self, req, result):
        with self.lock:
            self.rows.append((req.method, req.target, req.header("Content-Range") or "", result, time.time()))

    def session_puts(self):
        """The PUTs to an upload session (chunks, status questions, the last request)."""
        with self.lock:
            return [r for r in self.rows if r[0] == "PUT" and "/upload/" in r[1]]

    def session_deletes(self):
        with self.lock:
            return [r for r in self.rows if r[0] == "DELETE" and "/upload/" in r[1]]

    def finished(self):
        """Upload requests that made an object (200/201)."""
        with self.lock:
            return [r for r in self.rows if "/upload/" in r[1] and r[0] in ("PUT", "POST")
                    and r[3] in (200, 201) and ("upload_id" in r[1] or "uploadType=multipart" in r[1] or r[0] == "PUT")]


def chunk_ranges(rows):
    """(start, end-exclusive, total or None) of the PUTs that carried bytes and were answered."""
    out = []
    for _, _, cr, result, _ in rows:
        if not cr.startswith("bytes ") or cr.startswith("bytes */"):
            continue
        span, total = cr[6:].split("/")
        a, b = span.split("-")
        out.append((int(a), int(b) + 1, None if total == "*" else int(total), result))
    return out


def crc32c_b64(data):
    import google_crc32c
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


STREAM = ["--stream-uploads", "on"]


@pytest.fixture
def sx(emulator, prefix, mounts, tmp_path):
    f = Fx(emulator, prefix, mounts, tmp_path)
    f.rec = Recorder(f.proxy)
    yield f
    f.cleanup()


def write(sx, mnt, name, data, seek_at=None, go=None, rate=None):
    src = sx.tmp / f"{name}.src"
    src.write_bytes(data)
    env = {**os.environ, "SRC": str(src), "DST": f"{mnt}/{name}"}
    if rate:
        env["RATE"] = str(rate)
    if seek_at is not None:
        env.update(SEEK_AT=str(seek_at), GO=str(go))
    return sx.job([sys.executable, "-c", WRITER], env=env)


def times(result):
    lines = [l for l in result.out.decode().splitlines() if l.startswith("{")]
    assert lines, result
    return json.loads(lines[-1])


def blob(sx, name):
    b = sx.gcs.get_blob(f"{sx.prefix}/{name}")
    return b


def test_in_order_file_sends_its_chunks_before_close(sx):
    """64 MiB written in order at 16 MiB/s (a writer the servers here keep up with): the
    session's chunks reach the server, and are answered, while the file is written; close sends
    only the rest with the total; the object has the bytes and their crc32c."""
    mnt = sx.mount(*STREAM)
    data = os.urandom(64 * MIB + 12345)
    r = write(sx, mnt, "ckpt.bin", data, rate=16 * MIB).result(OP * 20)
    assert r.rc == 0 and not r.hung, r
    t = times(r)
    ranges = chunk_ranges(sx.rec.session_puts())
    before = [row for row in sx.rec.session_puts() if row[4] < t["close_start"] and row[2].endswith("/*")]
    assert before, f"no chunk was sent before close: {ranges}"
    assert any(row[3] == 308 for row in before), before
    # Chunks are contiguous from byte 0, the last one says the total, and nothing is sent twice.
    at = 0
    for a, b, total, result in ranges:
        assert a == at, f"chunk {a}-{b} after byte {at}: {ranges}"
        at = b
    assert at == len(data) and ranges[-1][2] == len(data), ranges
    # What close sent: less than the whole file.
    last = ranges[-1]
    assert last[1] - last[0] < len(data) // 2, ranges
    assert len(sx.rec.finished()) == 1, sx.rec.finished()
    b = blob(sx, "ckpt.bin")
    assert b is not None and b.size == len(data)
    assert b.download_as_bytes() == data
    if b.crc32c:
        assert b.crc32c == crc32c_b64(data)
    assert open(f"{mnt}/ckpt.bin", "rb").read() == data


def test_seek_back_cancels_the_stream_and_uploads_the_file_once(sx):
    """A writer that seeks back after 24 MiB (once a chunk is in the server): the session is
    cancelled and close uploads the whole file, with the rewritten bytes, in one generation."""
    mnt = sx.mount(*STREAM)
    data = bytearray(os.urandom(40 * MIB + 7))
    go = sx.tmp / "go"
    job = write(sx, mnt, "seek.bin", bytes(data), seek_at=24, go=go)
    end = time.time() + 60
    while not any(row[3] == 308 for row in sx.rec.session_puts()) and time.time() < end:
        time.sleep(0.05)
    assert any(row[3] == 308 for row in sx.rec.session_puts()), "no chunk reached the server before the seek back"
    go.write_text("go")
    r = job.result(OP * 20)
    assert r.rc == 0 and not r.hung, r
    data[4096:5096] = data[4096:5096][::-1]
    b = blob(sx, "seek.bin")
    assert b.download_as_bytes() == bytes(data)
    assert len(sx.rec.finished()) == 1, f"more than one object was made: {sx.rec.finished()}"
    assert sx.rec.session_deletes(), "the streamed session was not cancelled"
    # The object came from a request that sent the whole file (not the stream's rest).
    ranges = chunk_ranges(sx.rec.session_puts())
    assert any(a == 0 and total == len(data) and result in (200, 201) for a, _, total, result in ranges), ranges


@pytest.mark.parametrize("fault", ["503", "reset", "lost answer"])
def test_a_fault_mid_stream_resumes_and_sends_nothing_twice(sx, fault):
    """The second chunk of the session meets a 503, a reset (not forwarded) or a lost answer
    (forwarded, then the connection closed): the session is asked what it holds and the rest is
    sent from there; the object is right, made once, and no byte the server kept is sent twice."""
    mnt = sx.mount(*STREAM)
    action = {"503": dict(action="status", status=503), "reset": dict(action="reset"),
              "lost answer": dict(action="lose_response")}[fault]
    rule = sx.proxy.add_rule(method="PUT", path_re=r"/upload/", req_headers={"Content-Range": r"/\*$"}, times=1, skip=1, **action)
    data = os.urandom(40 * MIB + 99)
    r = write(sx, mnt, "fault.bin", data, rate=16 * MIB).result(OP * 20)
    assert r.rc == 0 and not r.hung, r
    assert rule.fired == 1, "the fault never met a chunk of the stream"
    b = blob(sx, "fault.bin")
    assert b.download_as_bytes() == data
    if sx.emulator.has("status-query-finishes"):
        # fake-gcs-server finishes a session when asked what it holds (`bytes */*`): the part
        # object is removed again, the stream given up, and close uploads the whole file.
        assert sx.rec.session_deletes(), "the stream was not given up"
        ranges = chunk_ranges(sx.rec.session_puts())
        assert any(a == 0 and total == len(data) and result in (200, 201) for a, _, total, result in ranges), ranges
        return
    assert len(sx.rec.finished()) == 1, "\n".join(map(str, sx.rec.rows))
    # The chunks the server took (308, 200) follow each other from 0 to the end: after the fault
    # the upload went on from what the server held.
    kept = [(a, z) for a, z, _, result in chunk_ranges(sx.rec.session_puts()) if result in (200, 201, 308)]
    if fault == "lost answer":
        # The chunk whose answer was lost was taken by the server too.
        lost = [(a, z) for a, z, _, result in chunk_ranges(sx.rec.session_puts()) if result == "lose_response"]
        kept = sorted(kept + lost)
    at = 0
    for a, z in kept:
        assert a == at, f"{fault}: bytes {a}-{z} sent after {at} were taken: {kept}"
        at = z
    assert at == len(data)
    assert not sx.rec.session_deletes(), "the stream was given up instead of resumed"


def test_a_crash_mid_stream_leaves_no_object_and_the_data_cut_off(sx, mounts):
    """kill -9 of the mount while a streamed upload is under way: the session never got its
    size, so the bucket has no object; the next mount keeps the data in lost+found, cut off."""
    mnt = sx.mount(*STREAM)
    cache = mounts.cache_dir(mnt)
    data = os.urandom(24 * MIB)
    go = sx.tmp / "never"
    job = write(sx, mnt, "crash.bin", data + b"x" * MIB, seek_at=24, go=go)  # holds the file open after 24 MiB
    end = time.time() + 60
    while not any(row[3] == 308 for row in sx.rec.session_puts()) and time.time() < end:
        time.sleep(0.05)
    assert any(row[3] == 308 for row in sx.rec.session_puts()), "no chunk reached the server"
    # The writer has written its 24 MiB and waits.
    end = time.time() + 60
    while not os.path.exists(str(go) + ".waiting") and time.time() < end:
        time.sleep(0.05)
    assert os.path.exists(str(go) + ".waiting"), "the writer did not write its 24 MiB"
    pid = daemon_pid(mnt)
    assert pid
    os.kill(pid, signal.SIGKILL)
    end = time.time() + 5
    while os.path.exists(f"/proc/{pid}") and not _zombie(pid) and time.time() < end:
        time.sleep(0.05)
    assert sx.job(["fusermount3", "-uz", mnt]).result(10).rc == 0
    job.p.kill()
    job.result(10)
    assert blob(sx, "crash.bin") is None, "a streamed session made an object without its size"
    opts = mount_options([*MOUNT_OPTS, *STREAM, "--endpoint", sx.proxy.endpoint, "--anonymous"])
    mounts.mount(f"gs://{sx.emulator.bucket_name}/{sx.prefix}", *opts, cache_dir=cache)
    kept = lost_and_found(cache, data, 15)
    assert kept, f"no file with the data in {cache}/lost+found: {os.listdir(cache)}"
    assert kept.endswith(".cut-off"), kept
    assert blob(sx, "crash.bin") is None


# The paced writer of Scripts/bench-checkpoint.sh: SIZE bytes at RATE bytes a second, 1 MiB a
# write; prints the seconds it wrote, the seconds from its last write to the end of close, the md5.
PACED_WRITER = os.path.join(ROOT, "Scripts", "bench", "paced_write.py")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


@pytest.mark.slow
def test_a_2_gib_writer_at_50_mb_s_closes_within_a_second(emulator, prefix, mounts, tmp_path):
    """What streamed uploads promise: a writer producing 2 GiB at 50 MB/s into the mount (no proxy):
    close returns within 1 s of its last write, and the daemon's memory stays bounded (its peak
    RSS is printed; the stream reads 256 KiB at a time from the stage file). BUCKETFS_SLOW=1."""
    size = int(os.environ.get("BUCKETFS_STREAM_SIZE", str(2 << 30)))
    mnt = mounts.mount(emulator.src(prefix), *STREAM)
    pid = daemon_pid(mnt)
    p = subprocess.run([sys.executable, PACED_WRITER, f"{mnt}/big.bin", str(size), "50e6"],
                       capture_output=True, timeout=size / 50e6 + 300)
    assert p.returncode == 0, p.stderr
    writing, close, _ = p.stdout.decode().split()
    writing, close = float(writing), float(close)
    hwm = vm_hwm_kib(pid)
    print(f"\n{emulator.name}: {size} bytes at 50 MB/s in {writing:.1f} s; close took {close:.3f} s; daemon peak RSS {hwm / 1024:.0f} MiB")
    b = emulator.bucket().get_blob(f"{prefix}/big.bin")
    assert b is not None and b.size == size
    assert close <= 1.0, f"close took {close:.3f} s after the last write"
    assert hwm < 512 * 1024, f"the daemon's peak RSS was {hwm / 1024:.0f} MiB"
