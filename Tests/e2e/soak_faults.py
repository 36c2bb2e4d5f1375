"""The fault cases with the DEFAULT timings, one after another as a user meets them,
repeated N times. Run by Scripts/soak-faults.sh (not in CI: a pass takes about 25 minutes).

A gs:// mount of a prefix of gcp-storage-emulator through the fault proxy (faultproxy.py), with no
timing option at all: --op-timeout 60, --idle-timeout 10, --upload-retries 5 and
--retry-backoff-max 30 are what every user gets. Objects are checked with the official client
directly against the emulator, never through the proxy. The page cache is dropped between cases.

Phase 1, one mount, as a user works on while one upload is in trouble:
  upload-hangs-then-given-up   the server takes the upload and never answers (runs in the background
                               through the whole phase): close EIO within one deadline, then the
                               background attempts, then the data in lost+found, logged
  upload-503-then-recovers     503 for every upload; the fault lifts 30 s after close's EIO: the
                               next background attempt puts the bytes in the bucket
  upload-response-lost         the upload lands, its answer is lost once: cp succeeds
  upload-response-reset        the upload lands, its answer is reset mid-body once: cp succeeds
  download-stalled-once        a ranged GET stalls mid-body once: the read gets the right bytes
  download-stalled-always      every ranged GET stalls after its headers: EIO within one deadline
  download-cut-once            a body ends early (no Content-Length, clean close) once: right bytes
  download-reset-always        every body is reset mid-way: EIO within one deadline
  unmount-after-hung-upload-given-up   unmount once the hung upload has been given up
Phase 2, for unmount (fusermount3 -u) and for SIGTERM, each on a fresh mount of the same cache dir:
  …-right-after-eio            the server hangs; 0.2 s after close's EIO (before the first
                               background attempt, due 1 s after it)
  …-hung-attempt-in-flight     the server hangs; 5 s after close's EIO, while the first background
                               attempt waits on it (the issue's sequence)
  …-503-attempt-in-flight      503 for every upload; 20 s after EIO, a background attempt runs
  …-waiting-for-next-attempt   503 + Retry-After: 3600 (each attempt fails at once); 10 s after
                               EIO: attempts at +1, +3, +7 s are done, the next is due at +15 s
  …-after-last-attempt         the same fault; once the last attempt gave up (lost+found)
  …-fault-lifts-then-end       503 that lifts 70 s after EIO; the end comes 2 s after it lifts

Phase 3 (crash), kill -9 of the mount process, each on a fresh mount of the same cache dir:
  crash-during-write           a writer holds a file open, half written: the next mount keeps it in
                               lost+found marked cut off (name ends in .cut-off, sidecar not
                               complete), logged at error level
  crash-during-close-uploaded  the upload lands, its answer is held: the next mount finds the bucket
                               has the same md5, keeps nothing, logs no error
  crash-then-other-cache-dir   the upload hangs: a mount of the same source with another cache dir
                               names the old one and `bucketfs recover` at error level; recover
                               puts the bytes in the bucket

For every case: the worst time to EIO or success against its bound, the worst time from unmount
or SIGTERM to the process's end against its bound, and where every byte of every write that
failed ended up: in the bucket with exactly its bytes, or in CACHE_DIR/lost+found with exactly its
bytes and an error-level log line naming that path. A case fails if any written byte is nowhere
(or only in a stage file left behind after the process ended), or a bound is exceeded.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import quote

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from faultproxy import FaultProxy  # noqa: E402
from daemons import daemon_pid

OP = 60.0            # docs/SEMANTICS.md §5: one deadline per operation (the default --op-timeout)
RETRIES = 5          # default --upload-retries
BACKOFF_MAX = 30.0   # default --retry-backoff-max
SLACK = 10.0         # scheduling on a busy 2-core machine
PAUSES = [min(BACKOFF_MAX, 2.0 ** i) for i in range(RETRIES)]  # 1, 2, 4, 8, 16
SIZE = 5 << 20       # one multipart upload
UPLOAD = r"^/upload/storage/v1/b/[^/]+/o$"
MEDIA = r"(^|&)alt=media(&|$)"
WRITER = r"""
import os, sys, time
fd = os.open(os.environ["DST"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
data = open(os.environ["SRC"], "rb").read()
off = 0
while off < len(data):
    off += os.write(fd, data[off:off + (1 << 17)])
print("ready", flush=True)
time.sleep(600)
"""


def now():
    return time.monotonic()


def drop_caches():
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, capture_output=True, timeout=60)


def proc_alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Outcome:
    """What one run of one case showed."""

    def __init__(self, case):
        self.case = case
        self.t_op = None         # seconds to EIO or success of the user's operation
        self.op_result = None    # "EIO", "ok", or what else happened
        self.op_bound = None
        self.t_end = None        # seconds from unmount/SIGTERM to the process's end
        self.end_bound = None
        self.t_settled = None    # seconds from close's EIO to the bytes in the bucket or lost+found
        self.settled_bound = None
        self.where = []          # per written file: "bucket", "lost+found", or a failure
        self.problems = []

    @property
    def ok(self):
        return not self.problems


class Soak:
    def __init__(self, args):
        self.a = args
        self.bin = args.bin
        self.tmp = args.tmp
        self.cache = os.path.join(self.tmp, "cache")
        self.proxy = FaultProxy(args.upstream).start()
        self.prefix = f"soak-{uuid.uuid4().hex[:8]}"
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        self.gcs = storage.Client(project="test", client_options={"api_endpoint": "http://" + args.upstream},
                                  credentials=AnonymousCredentials()).bucket(args.bucket)
        self.mounts = 0
        self.results = []  # Outcome
        self.lock = threading.Lock()

    # --- the bucket, directly ----------------------------------------------------------------

    def key(self, name):
        return f"{self.prefix}/{name}"

    def get(self, name):
        from google.api_core.exceptions import NotFound
        try:
            return self.gcs.blob(self.key(name)).download_as_bytes()
        except NotFound:
            return None

    def put(self, name, data):
        self.gcs.blob(self.key(name)).upload_from_string(data)

    # --- the mount ---------------------------------------------------------------------------

    def mount(self):
        self.mounts += 1
        mnt = os.path.join(self.tmp, f"mnt{self.mounts}")
        os.makedirs(mnt)
        self.log = os.path.join(self.tmp, f"mnt{self.mounts}.log")
        p = subprocess.run([self.bin, "mount", f"gs://{self.a.bucket}/{self.prefix}", mnt, "--cache-dir", self.cache,
                            "--log-file", self.log, "--log-level", "info",
                            "--endpoint", self.proxy.endpoint, "--anonymous"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SystemExit(f"mount failed: {p.stderr}")
        self.mount_stderr = p.stderr
        self.mnt = mnt
        self.pid = daemon_pid(mnt)
        return mnt

    def end(self, how):
        """Unmount (fusermount3 -u) or SIGTERM; waits for the process's end (bounded); returns
        the seconds it took, or None if it did not end."""
        t0 = now()
        if how == "unmount":
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, timeout=30)
        else:
            os.kill(self.pid, signal.SIGTERM)
        limit = OP + 3 * SLACK + 60
        while proc_alive(self.pid) and now() - t0 < limit:
            time.sleep(0.1)
        took = now() - t0
        if proc_alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)
            took = None
        subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True, timeout=30)
        return took

    # --- rules -------------------------------------------------------------------------------

    def upload_rule(self, name, action, **params):
        body = re.escape(self.prefix.encode()) + rb"\\?/" + re.escape(name.encode()) + rb'"'
        return self.proxy.add_rule(method="POST", path_re=UPLOAD, body_re=body, action=action, **params)

    def download_rule(self, name, action, **params):
        path = "/o/" + re.escape(quote(self.key(name), safe="")) + "$"
        return self.proxy.add_rule(method="GET", path_re=path, query_re=MEDIA, action=action, **params)

    @staticmethod
    def lift(rule):
        rule.times = rule.fired  # acts no more

    # --- what the user does ------------------------------------------------------------------

    def cp(self, name, data, timeout=OP + 3 * SLACK):
        """Writes `data` to the mount with cp; returns (seconds, "ok" | "EIO" | other)."""
        src = os.path.join(self.tmp, f"src-{uuid.uuid4().hex[:6]}")
        with open(src, "wb") as f:
            f.write(data)
        t0 = now()
        try:
            p = subprocess.run(["cp", src, f"{self.mnt}/{name}"], capture_output=True, timeout=timeout)
            res = "ok" if p.returncode == 0 else ("EIO" if b"Input/output error" in p.stderr
                                                  else p.stderr.decode(errors="replace").strip()[-120:])
        except subprocess.TimeoutExpired:
            res = f"hung over {timeout:.0f} s"
        os.unlink(src)
        return now() - t0, res

    def cat(self, name, timeout=OP + 3 * SLACK):
        t0 = now()
        try:
            p = subprocess.run(["cat", f"{self.mnt}/{name}"], capture_output=True, timeout=timeout)
            return now() - t0, p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            return now() - t0, None, b"", b"hung"

    # --- where the bytes are -----------------------------------------------------------------

    def lost_found(self, data):
        d = os.path.join(self.cache, "lost+found")
        out = []
        if os.path.isdir(d):
            for n in sorted(os.listdir(d)):
                p = os.path.join(d, n)
                try:
                    if os.path.isfile(p) and os.path.getsize(p) == len(data) and open(p, "rb").read() == data:
                        out.append(p)
                except OSError:
                    pass
        return out

    def staged(self, data):
        out = []
        for n in os.listdir(self.cache) if os.path.isdir(self.cache) else []:
            p = os.path.join(self.cache, n)
            try:
                if n.startswith("stage-") and os.path.isfile(p) and open(p, "rb").read() == data:
                    out.append(p)
            except OSError:
                pass
        return out

    def logged(self, path):
        for log in (os.path.join(self.tmp, f) for f in os.listdir(self.tmp) if f.endswith(".log")):
            try:
                for line in open(log, errors="replace"):
                    if path in line and re.search(r"\b(error|critical)\b", line, re.I):
                        return True
            except OSError:
                pass
        return False

    def where(self, name, data, ended):
        """Where the bytes of a failed write are: "bucket", "lost+found", or why that is wrong.
        `ended`: the mount process has ended (a stage file then does not count)."""
        if self.get(name) == data:
            return "bucket"
        kept = self.lost_found(data)
        if kept:
            return "lost+found" if any(self.logged(p) for p in kept) else f"lost+found, NOT logged ({kept[0]})"
        st = self.staged(data)
        if st:
            return f"ONLY a stage file left ({os.path.basename(st[0])})" if ended else "stage file"
        return "NOWHERE"

    def wait_where(self, name, data, timeout, want=("bucket", "lost+found")):
        end = now() + timeout
        while True:
            w = self.where(name, data, ended=False)
            if w in want or now() >= end:
                return w, now()
            time.sleep(1)

    def log_has(self, text):
        try:
            return text in open(self.log, errors="replace").read()
        except OSError:
            return False

    # --- cases -------------------------------------------------------------------------------

    def record(self, o):
        with self.lock:
            self.results.append(o)
        flag = "ok" if o.ok else "FAIL: " + "; ".join(o.problems)
        t_op = f"{o.t_op:.1f} s {o.op_result}" if o.t_op is not None else "-"
        t_end = f", end {o.t_end:.1f} s" if o.t_end is not None else ""
        t_end += f", settled {o.t_settled:.1f} s after EIO" if o.t_settled is not None else ""
        print(f"  {o.case:34s} {t_op}{t_end}; bytes: {', '.join(o.where) or '-'}; {flag}", flush=True)

    def expect_op(self, o, t, res, want, bound):
        o.t_op, o.op_result, o.op_bound = t, res, bound
        if res != want:
            o.problems.append(f"{want} expected, got {res}")
        if t > bound:
            o.problems.append(f"{t:.1f} s > bound {bound:.0f} s")

    def check_bytes(self, o, name, data, ended):
        w = self.where(name, data, ended)
        o.where.append(w)
        if w not in ("bucket", "lost+found"):
            o.problems.append(f"{name}: {w}")

    def schedule_bound(self, attempt_s):
        """From close's EIO to the end of the last background attempt (then lost+found)."""
        return sum(PAUSES) + RETRIES * attempt_s + SLACK * 2

    def phase1(self):
        self.mount()
        self.put("other.txt", b"other\n")
        bg = threading.Thread(target=self.case_hang_given_up, daemon=True)
        bg.start()
        time.sleep(2)
        for case in (self.case_503_recovers, self.case_lost_response, self.case_reset_response,
                     self.case_download_stalled_once, self.case_download_stalled_always,
                     self.case_download_cut_once, self.case_download_reset_always):
            drop_caches()
            case()
        bg.join(timeout=OP + self.schedule_bound(OP) + 120)
        drop_caches()
        o = Outcome("unmount-after-hung-upload-given-up")
        o.t_end, o.end_bound = self.end("unmount"), OP + SLACK
        self.check_end(o)
        self.check_bytes(o, "hung.bin", self.hung_data, ended=True)
        self.record(o)
        self.proxy.clear()
        self.proxy.release()

    def check_end(self, o):
        if o.t_end is None:
            o.problems.append("the process did not end")
        elif o.t_end > o.end_bound:
            o.problems.append(f"ending took {o.t_end:.1f} s > bound {o.end_bound:.0f} s")
        left = [n for n in os.listdir(self.cache) if n.startswith("stage-")]
        if left:
            o.problems.append(f"{len(left)} stage file(s) left in the cache dir after the process ended")

    def case_hang_given_up(self):
        o = Outcome("upload-hangs-then-given-up")
        data = self.hung_data = os.urandom(SIZE)
        self.upload_rule("hung.bin", "hang")
        t, res = self.cp("hung.bin", data)
        self.expect_op(o, t, res, "EIO", OP + SLACK)
        eio = now()
        w, t_w = self.wait_where("hung.bin", data, self.schedule_bound(OP) + 60, want=("lost+found",))
        o.t_settled, o.settled_bound = t_w - eio, self.schedule_bound(OP)
        if o.t_settled > o.settled_bound:
            o.problems.append(f"lost+found {o.t_settled:.0f} s after EIO > {o.settled_bound:.0f} s")
        o.where.append(w)
        if w != "lost+found":
            o.problems.append(f"hung.bin: {w} after the retry schedule ({self.schedule_bound(OP):.0f} s)")
        self.record(o)

    def case_503_recovers(self):
        o = Outcome("upload-503-then-recovers")
        data = os.urandom(SIZE)
        rule = self.upload_rule("r503.bin", "status", status=503)
        t, res = self.cp("r503.bin", data)
        self.expect_op(o, t, res, "EIO", OP + SLACK)
        time.sleep(30)
        self.lift(rule)
        lifted = now()
        # the attempt in flight retries within its deadline, or the next one starts
        w, t_w = self.wait_where("r503.bin", data, OP + BACKOFF_MAX + 2 * SLACK, want=("bucket",))
        # the attempt in flight when the fault lifts ends by its deadline or succeeds on its next
        # retry; at worst the next attempt starts after the longest pause and needs one deadline
        o.t_settled, o.settled_bound = t_w - (lifted - 30), 30 + OP + BACKOFF_MAX + SLACK
        o.where.append(w)
        if w != "bucket":
            o.problems.append(f"r503.bin: {w} {t_w - lifted:.0f} s after the fault lifted")
        self.record(o)

    def case_lost_response(self):
        o = Outcome("upload-response-lost")
        data = os.urandom(SIZE)
        self.upload_rule("lost.bin", "lose_response", times=1)
        t, res = self.cp("lost.bin", data)
        self.expect_op(o, t, res, "ok", OP)
        self.check_bytes(o, "lost.bin", data, ended=False)
        self.record(o)

    def case_reset_response(self):
        o = Outcome("upload-response-reset")
        data = os.urandom(SIZE)
        self.upload_rule("reset.bin", "reset_mid_body", times=1, bytes=10)
        t, res = self.cp("reset.bin", data)
        self.expect_op(o, t, res, "ok", OP)
        self.check_bytes(o, "reset.bin", data, ended=False)
        self.record(o)

    def _download(self, case, name, action, times, want_ok, **params):
        o = Outcome(case)
        data = os.urandom(3 << 20)
        self.put(name, data)
        # Look it up before the fault (metadata is not the point). Another client's new object
        # may stay hidden for the metadata TTL (5 s) after a miss or a listing of its directory
        # (docs/SEMANTICS.md §6), so the lookup is repeated until it shows.
        shows_by = now() + 8
        while True:
            try:
                os.stat(f"{self.mnt}/{name}")
                break
            except FileNotFoundError:
                if now() > shows_by:
                    raise
                time.sleep(0.25)
        rule = self.download_rule(name, action, times=times, **params)
        t, rc, got, err = self.cat(name)
        self.lift(rule)
        if want_ok:
            res = "ok" if rc == 0 and got == data else ("wrong bytes" if rc == 0 else err.decode(errors="replace")[-80:])
            self.expect_op(o, t, res, "ok", OP)
        else:
            res = "EIO" if rc not in (0, None) and b"Input/output error" in err else (
                "hung" if rc is None else ("read succeeded" if rc == 0 else err.decode(errors="replace")[-80:]))
            self.expect_op(o, t, res, "EIO", OP + SLACK)
        # held bodies are not released here: that would also end the hung upload's connection;
        # the mount abandons them itself after --idle-timeout
        self.record(o)

    def case_download_stalled_once(self):
        self._download("download-stalled-once", "stall1.bin", "stall_mid_body", 1, True, bytes=256 << 10)

    def case_download_stalled_always(self):
        # headers, then nothing, every time: no read can make progress. (A stall mid-body after N
        # bytes lets each retry bring N more: every read(2) then ends within its deadline, and a
        # whole `cat` of 3 MiB took 80 s for its 24 reads, the last one failing after 40 s.)
        self._download("download-stalled-always", "stall.bin", "stall_after_headers", None, False)

    def case_download_cut_once(self):
        self._download("download-cut-once", "cut1.bin", "short_body_no_cl", 1, True, bytes=256 << 10)

    def case_download_reset_always(self):
        self._download("download-reset-always", "reset-dl.bin", "reset_mid_body", None, False, bytes=256 << 10)

    # --- phase 3: kill -9 --------------------------------------------------------------------

    def crash(self):
        """kill -9 of the mount's process, then its dead mount cleared; returns nothing."""
        os.kill(self.pid, signal.SIGKILL)
        t0 = now()
        while proc_alive(self.pid) and now() - t0 < 30:
            time.sleep(0.05)
        subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True, timeout=30)

    def lost_entries(self, cache=None):
        d = os.path.join(cache or self.cache, "lost+found")
        return sorted(n for n in os.listdir(d) if not n.endswith(".json")) if os.path.isdir(d) else []

    def phase3(self):
        for case in (self.crash_during_write, self.crash_during_close_uploaded, self.crash_then_other_cache_dir):
            drop_caches()
            self.mount()
            case()
            self.proxy.clear()
            self.proxy.release()

    def crash_during_write(self):
        o = Outcome("crash-during-write")
        data = os.urandom(SIZE)
        src = os.path.join(self.tmp, "part-src")
        with open(src, "wb") as f:
            f.write(data)
        w = subprocess.Popen([sys.executable, "-c", WRITER], env={**os.environ, "SRC": src, "DST": f"{self.mnt}/part.bin"},
                             stdout=subprocess.PIPE)
        w.stdout.readline()
        before = set(self.lost_entries())
        self.crash()
        w.kill()
        w.wait()
        self.mount()
        # the move into lost+found runs in the background once the mount serves
        t0 = now()
        while now() - t0 < 15 and not any(self.logged(os.path.join(self.cache, "lost+found", n))
                                          for n in self.lost_entries() if n not in before):
            time.sleep(0.1)
        new = [n for n in self.lost_entries() if n not in before]
        cut = [n for n in new if n.startswith("part.bin.") and n.endswith(".cut-off")]
        if len(cut) != 1:
            o.problems.append(f"lost+found holds {new}, not one part.bin….cut-off")
        else:
            path = os.path.join(self.cache, "lost+found", cut[0])
            side = json.load(open(path + ".json"))
            if side.get("complete") is not False or side.get("closed") is not False:
                o.problems.append(f"the sidecar does not say cut off: {side}")
            if open(path, "rb").read() != data:
                o.problems.append("the cut-off file does not hold what was written")
            if not self.logged(path):
                o.problems.append("no error line names the cut-off file")
            o.where.append("lost+found (cut off)")
        if self.get("part.bin") is not None:
            o.problems.append("a cut-off file reached the bucket")
        self.end("unmount")
        self.record(o)

    def crash_during_close_uploaded(self):
        o = Outcome("crash-during-close-uploaded")
        data = os.urandom(SIZE)
        rule = self.upload_rule("closed.bin", "stall_after_headers")
        src = os.path.join(self.tmp, "closed-src")
        with open(src, "wb") as f:
            f.write(data)
        cp = subprocess.Popen(["cp", src, f"{self.mnt}/closed.bin"], stderr=subprocess.PIPE)
        t0 = now()
        while now() - t0 < OP and (rule.fired == 0 or self.get("closed.bin") != data):
            time.sleep(0.2)
        before = set(self.lost_entries())
        self.crash()
        cp.kill()
        cp.wait()
        self.proxy.clear()
        self.proxy.release()
        self.mount()
        new = [n for n in self.lost_entries() if n not in before]
        if self.get("closed.bin") != data:
            o.problems.append("the upload did not land before the crash (the case did not happen)")
        if new:
            o.problems.append(f"a copy the bucket already has was kept: {new}")
        if self.log_error_naming("closed.bin"):
            o.problems.append("an error was logged for a file the bucket has")
        o.where.append("bucket")
        self.end("unmount")
        self.record(o)

    def crash_then_other_cache_dir(self):
        o = Outcome("crash-then-other-cache-dir")
        data = os.urandom(SIZE)
        self.upload_rule("other.bin", "hang")
        src = os.path.join(self.tmp, "other-src")
        with open(src, "wb") as f:
            f.write(data)
        cp = subprocess.Popen(["cp", src, f"{self.mnt}/other.bin"], stderr=subprocess.PIPE)
        time.sleep(3)
        self.crash()
        cp.kill()
        cp.wait()
        self.proxy.clear()
        self.proxy.release()
        old, self.cache = self.cache, os.path.join(self.tmp, f"other-cache-{self.mounts}")
        try:
            out = self.mount()
            if not (self.mount_stderr and old in self.mount_stderr and f"bucketfs recover {old}" in self.mount_stderr):
                o.problems.append(f"the mount with another cache dir did not name {old}: {self.mount_stderr!r}")
            self.end("unmount")
        finally:
            self.cache = old
        t0 = now()
        r = subprocess.run([self.bin, "recover", old, "--endpoint", "http://" + self.a.upstream, "--anonymous"],
                           capture_output=True, text=True, timeout=OP + SLACK)
        o.t_op, o.op_result, o.op_bound = now() - t0, "ok" if r.returncode == 0 else f"rc {r.returncode}", OP
        if r.returncode != 0 or "uploaded: 'other.bin'" not in r.stdout:
            o.problems.append(f"recover: {r.stdout[-300:]} {r.stderr[-300:]}")
        self.check_bytes(o, "other.bin", data, ended=True)
        self.record(o)

    def log_error_naming(self, text):
        try:
            for line in open(self.log, errors="replace"):
                if text in line and re.search(r"\b(error|critical)\b", line, re.I):
                    return line
        except OSError:
            pass
        return None

    def phase2(self, how):
        for case in (self.end_right_after_eio, self.end_hung_attempt_in_flight, self.end_attempt_in_flight,
                     self.end_waiting_for_next_attempt,
                     self.end_after_last_attempt, self.end_fault_lifts):
            drop_caches()
            self.mount()
            case(how)
            self.proxy.clear()
            self.proxy.release()

    def _end_case(self, how, case, name, fault, wait_after_eio, lift_after=None, eio_bound=OP + SLACK):
        """Writes, meets `fault` (a rule already added), waits, ends the mount with `how`."""
        o = Outcome(f"{how}-{case}")
        data = os.urandom(SIZE)
        rule = fault(name)
        t, res = self.cp(name, data)
        self.expect_op(o, t, res, "EIO", eio_bound)
        eio = now()
        if lift_after is not None:
            time.sleep(max(0.0, lift_after - (now() - eio)))
            self.lift(rule)
        if callable(wait_after_eio):
            wait_after_eio(name, data)
        else:
            time.sleep(max(0.0, wait_after_eio - (now() - eio)))
        o.t_end, o.end_bound = self.end(how), OP + SLACK
        self.check_end(o)
        self.check_bytes(o, name, data, ended=True)
        self.record(o)

    def end_right_after_eio(self, how):
        self._end_case(how, "right-after-eio", f"{how}-first.bin", lambda n: self.upload_rule(n, "hang"), 0.2)

    def end_hung_attempt_in_flight(self, how):
        self._end_case(how, "hung-attempt-in-flight", f"{how}-hang.bin", lambda n: self.upload_rule(n, "hang"), 5)

    def end_attempt_in_flight(self, how):
        self._end_case(how, "503-attempt-in-flight", f"{how}-inflight.bin",
                       lambda n: self.upload_rule(n, "status", status=503), 20)

    def end_waiting_for_next_attempt(self, how):
        self._end_case(how, "waiting-for-next-attempt", f"{how}-waiting.bin",
                       lambda n: self.upload_rule(n, "status", status=503, headers={"Retry-After": "3600"}), 10,
                       eio_bound=SLACK)

    def end_after_last_attempt(self, how):
        def given_up(name, data):
            self.wait_where(name, data, sum(PAUSES) + RETRIES * SLACK + 30, want=("lost+found",))
            time.sleep(1)
        self._end_case(how, "after-last-attempt", f"{how}-last.bin",
                       lambda n: self.upload_rule(n, "status", status=503, headers={"Retry-After": "3600"}), given_up,
                       eio_bound=SLACK)

    def end_fault_lifts(self, how):
        self._end_case(how, "fault-lifts-then-end", f"{how}-lifts.bin",
                       lambda n: self.upload_rule(n, "status", status=503), 72, lift_after=70)

    # --- the run -----------------------------------------------------------------------------

    def run(self):
        only = set(self.a.only.split(",")) if self.a.only else None
        for i in range(1, self.a.n + 1):
            print(f"== soak pass {i} of {self.a.n} (prefix {self.prefix})", flush=True)
            if not only or "phase1" in only:
                self.phase1()
            for how in ("unmount", "sigterm"):
                if not only or how in only:
                    self.phase2(how)
            if not only or "crash" in only:
                self.phase3()
        self.proxy.stop()
        return self.table()

    def table(self):
        cases, order = {}, []
        for o in self.results:
            if o.case not in cases:
                order.append(o.case)
            cases.setdefault(o.case, []).append(o)
        lines = ["| case | runs | worst time to EIO / success | bound | worst unmount or SIGTERM to exit | bound "
                 "| worst EIO to bytes in bucket / lost+found | bound | where the bytes of failed writes ended up | result |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        failed = 0
        for c in order:
            os_ = cases[c]
            ops = [o for o in os_ if o.t_op is not None]
            worst = max(ops, key=lambda o: o.t_op) if ops else None
            results = sorted({o.op_result for o in ops})
            op = f"{worst.t_op:.1f} s ({'/'.join(results)})" if worst else "-"
            op_bound = f"{worst.op_bound:.0f} s" if worst else "-"
            ends = [o.t_end for o in os_ if o.end_bound is not None]
            end = ("did not end" if None in ends else f"{max(ends):.1f} s") if ends else "-"
            end_bound = f"{os_[0].end_bound:.0f} s" if ends else "-"
            sets = [o.t_settled for o in os_ if o.t_settled is not None]
            settled = f"{max(sets):.1f} s" if sets else "-"
            settled_bound = f"{os_[0].settled_bound:.0f} s" if sets else "-"
            wh = {}
            for o in os_:
                for w in o.where:
                    wh[w] = wh.get(w, 0) + 1
            where = ", ".join(f"{k} ×{v}" for k, v in sorted(wh.items())) or "-"
            bad = [o for o in os_ if not o.ok]
            failed += len(bad)
            res = "pass" if not bad else f"**FAIL** {len(bad)}/{len(os_)}: " + "; ".join(sorted({p for o in bad for p in o.problems}))[:300]
            lines.append(f"| {c} | {len(os_)} | {op} | {op_bound} | {end} | {end_bound} | {settled} | {settled_bound} | {where} | {res} |")
        print("\n" + "\n".join(lines) + "\n", flush=True)
        if self.a.table:
            with open(self.a.table, "w") as f:
                f.write("\n".join(lines) + "\n")
        print(f"soak: {len(self.results) - failed} passed, {failed} failed", flush=True)
        return failed == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", nargs="?", type=int, default=1, help="how many times to run the whole sequence")
    ap.add_argument("--upstream", default=os.environ.get("BUCKETFS_EMULATOR"), help="the emulator, host:port")
    ap.add_argument("--bucket", default=os.environ.get("BUCKETFS_EMULATOR_BUCKET", "bucketfs-test"))
    ap.add_argument("--bin", default=os.environ.get("BUCKETFS_BIN", "bucketfs"))
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--only", help="comma-separated: phase1, unmount, sigterm, crash")
    ap.add_argument("--table", help="also write the final table (markdown) to this file")
    a = ap.parse_args(argv)
    if not a.upstream:
        ap.error("no emulator: give --upstream or set BUCKETFS_EMULATOR")
    # Mounts record their cache directories (docs/OPERATING.md, "The cache directory"): here, not
    # in the machine's state directory.
    os.environ.setdefault("XDG_STATE_HOME", os.path.join(a.tmp, "state"))
    return 0 if Soak(a).run() else 1


if __name__ == "__main__":
    sys.exit(main())
