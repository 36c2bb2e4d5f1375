"""Concurrency under load: 16 processes create, write, append, read back, rename, unlink
and set xattrs on one mount while a second mount of the same bucket reads and lists.

    python Tests/e2e/stress.py --source DIR|gs://BUCKET/PREFIX [--endpoint URL] --seconds 300
    Scripts/stress.sh                 # embedded, then gs:// against gcp-storage-emulator

Each worker owns a directory `wNN/` of the first mount and keeps a model of what it closed
without error: {name: bytes, xattrs}. Every block of 4 KiB that is ever written says which file,
version and block it is and is filled from those, so any read, on either mount, can be checked
block by block without knowing which version it met. Checks:

- no unexpected errno: every operation of a worker on its own files must succeed; the readers of
  the second mount may meet ENOENT (a file renamed or unlinked by the first mount after the
  listing) and nothing else;
- no hang: every operation is timed by a watchdog; one that takes longer than --op-bound is a
  hang (and the run reports the process's state);
- no process in D state: sampled every second across the workers, the readers and both mounts;
- every file closed without error is in the bucket with exactly its bytes and xattrs (checked
  after the first mount is unmounted, through the library commands, not through a mount), and
  nothing else is in the workers' directories;
- the first mount's memory: RSS after mounting, its peak, and after the load (the kernel told to
  drop its caches, so it forgets inodes) must come back within --rss-slack-mb of the start.

With --write-back the first mount queues its uploads (docs/SEMANTICS.md §3.4): a close returns
once the data is staged, and everything above is checked the same way after the unmount, which
uploads what is still queued. The run also samples the queue each second: the stage files in the
cache directory and their bytes on disk (peak reported beside the RSS).

Prints a summary table; exits 1 when any check fails.
"""
import argparse
import errno as E
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from daemons import daemon_pid

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 4096
XATTR_KEYS = ["user.color", "user.owner", "user.note"]


# --- self-describing content -----------------------------------------------------------------


def block(tag, index):
    """Block `index` of a version tagged `tag` (e.g. "w03/f0017@v5")."""
    head = f"<{tag}#{index:08d}>".encode()
    seed = hashlib.sha256(head).digest()
    body = (seed * (BLOCK // len(seed) + 1))[: BLOCK - len(head)]
    return head + body


def blocks(tag, first, count):
    return b"".join(block(tag, i) for i in range(first, first + count))


def check_content(data):
    """None when every whole block of `data` is a well-formed block at its place, else a reason."""
    if len(data) % BLOCK:
        return f"size {len(data)} is not a multiple of {BLOCK}"
    for i in range(len(data) // BLOCK):
        b = data[i * BLOCK:(i + 1) * BLOCK]
        end = b.find(b">")
        if not b.startswith(b"<") or end < 0:
            return f"block {i} has no header"
        head = b[1:end].decode(errors="replace")
        tag, _, idx = head.rpartition("#")
        if not idx.isdigit() or int(idx) != i:
            return f"block {i} says it is block {idx!r} of {tag!r}"
        if b != block(tag, i):
            return f"block {i} of {tag!r} is damaged"
    return None


# --- the workers -----------------------------------------------------------------------------


class Worker:
    """One process's life on its own directory; all state it needs to report is sent back."""

    def __init__(self, wid, root, seconds, seed, status, events):
        self.wid = wid
        self.dir = os.path.join(root, f"w{wid:02d}")
        self.deadline = time.monotonic() + seconds
        self.rng = random.Random(seed)
        self.status = status   # shared array: [op code, start time] per worker (the watchdog reads it)
        self.events = events   # queue of ("error"|"count"|"model", ...)
        self.model = {}        # name -> {"data": bytes, "xattrs": {k: v}}
        self.counter = 0
        self.ops = {}

    OPS = ["create", "append", "read", "rename", "unlink", "setxattr", "rmxattr", "overwrite", "list"]

    def timed(self, op, fn, *args):
        self.status[self.wid * 2] = self.OPS.index(op) + 1
        self.status[self.wid * 2 + 1] = time.time()
        try:
            return fn(*args)
        finally:
            self.status[self.wid * 2] = 0
            self.ops[op] = self.ops.get(op, 0) + 1

    def fail(self, op, name, err):
        self.events.put(("error", self.wid, op, name, err))

    def new_name(self):
        self.counter += 1
        return f"f{self.counter:05d}"

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_file(self, name, data, mode):
        with open(self.path(name), mode) as f:
            f.write(data)
        # leaving the with block closes: close reports the upload

    def run(self):
        os.makedirs(self.dir, exist_ok=True)
        while time.monotonic() < self.deadline:
            op = self.rng.choices(self.OPS, weights=[4, 3, 4, 2, 1, 2, 1, 1, 1])[0]
            names = sorted(self.model)
            if op != "create" and op != "list" and not names:
                op = "create"
            name = self.rng.choice(names) if names else None
            try:
                self.step(op, name)
            except OSError as e:
                self.fail(op, name, f"{E.errorcode.get(e.errno, e.errno)}: {e.strerror}")
                # the model no longer knows what this file is: forget it, and drop it if we can
                if name in self.model and op in ("append", "overwrite", "rename"):
                    self.model.pop(name, None)
                    try:
                        os.unlink(self.path(name))
                    except OSError:
                        pass
            except AssertionError as e:
                self.fail(op, name, f"wrong result: {e}")
        self.events.put(("model", self.wid, {n: {"sha": hashlib.sha256(m["data"]).hexdigest(),
                                                 "size": len(m["data"]), "xattrs": m["xattrs"]}
                                             for n, m in self.model.items()}, self.ops))

    def step(self, op, name):
        rng = self.rng
        if op == "create":
            name = self.new_name()
            n = rng.choice([0, 1, 1, 2, 3, 8, 32, 128, 300])  # blocks: up to 1.2 MiB
            ver = f"w{self.wid:02d}/{name}@v1"
            data = blocks(ver, 0, n)
            self.timed("create", self.write_file, name, data, "xb")
            self.model[name] = {"data": data, "xattrs": {}, "ver": 1}
        elif op == "append":
            m = self.model[name]
            m["ver"] += 1
            have = len(m["data"]) // BLOCK
            more = blocks(f"w{self.wid:02d}/{name}@v{m['ver']}", have, rng.choice([1, 2, 16]))
            self.timed("append", self.write_file, name, more, "ab")
            m["data"] += more
        elif op == "overwrite":
            m = self.model[name]
            m["ver"] += 1
            data = blocks(f"w{self.wid:02d}/{name}@v{m['ver']}", 0, rng.choice([1, 4, 64]))
            self.timed("overwrite", self.write_file, name, data, "wb")
            m["data"] = data
        elif op == "read":
            def read():
                with open(self.path(name), "rb") as f:
                    return f.read()
            got = self.timed("read", read)
            want = self.model[name]["data"]
            assert got == want, f"{name}: read {len(got)} bytes, {check_content(got) or 'well-formed'}, want {len(want)}"
        elif op == "rename":
            new = self.new_name()
            self.timed("rename", os.rename, self.path(name), self.path(new))
            self.model[new] = self.model.pop(name)
        elif op == "unlink":
            self.timed("unlink", os.unlink, self.path(name))
            del self.model[name]
        elif op == "setxattr":
            k = rng.choice(XATTR_KEYS)
            v = f"{k[5:]}-{self.counter}-{rng.randrange(1000)}"
            self.timed("setxattr", os.setxattr, self.path(name), k, v.encode())
            self.model[name]["xattrs"][k] = v
            got = os.getxattr(self.path(name), k).decode()
            assert got == v, f"{name}: getxattr {k} gave {got!r} after setting {v!r}"
        elif op == "rmxattr":
            xs = self.model[name]["xattrs"]
            if not xs:
                return self.step("setxattr", name)
            k = rng.choice(sorted(xs))
            self.timed("rmxattr", os.removexattr, self.path(name), k)
            del xs[k]
        elif op == "list":
            got = set(self.timed("list", os.listdir, self.dir))
            assert got == set(self.model), f"listing differs: extra {sorted(got - set(self.model))[:5]}, missing {sorted(set(self.model) - got)[:5]}"


def worker_main(wid, root, seconds, seed, status, events):
    try:
        Worker(wid, root, seconds, seed, status, events).run()
    except Exception:
        events.put(("error", wid, "crash", None, traceback.format_exc()))
        events.put(("model", wid, {}, {}))


def reader_main(rid, root, seconds, seed, status, events):
    """A process on the second mount: walks, lists, stats, reads and checks every block it gets."""
    rng = random.Random(seed)
    slot = 16 + rid
    deadline = time.monotonic() + seconds
    counts = {"list": 0, "read": 0, "stat": 0, "enoent": 0, "bytes": 0}
    while time.monotonic() < deadline:
        try:
            status[slot * 2], status[slot * 2 + 1] = 1, time.time()
            dirs = [d for d in os.listdir(root) if d.startswith("w")]
            counts["list"] += 1
            if not dirs:
                time.sleep(0.2)
                continue
            d = os.path.join(root, rng.choice(dirs))
            names = os.listdir(d)
            counts["list"] += 1
            for n in rng.sample(names, min(len(names), 4)):
                p = os.path.join(d, n)
                try:
                    os.stat(p)
                    counts["stat"] += 1
                    with open(p, "rb") as f:
                        data = f.read()
                    counts["read"] += 1
                    counts["bytes"] += len(data)
                    bad = check_content(data)
                    if bad:
                        events.put(("error", f"r{rid}", "read(2nd mount)", p, f"bytes that were never written: {bad}"))
                    os.listxattr(p)
                except OSError as e:
                    if e.errno == E.ENOENT:
                        counts["enoent"] += 1
                    else:
                        events.put(("error", f"r{rid}", "read(2nd mount)", p, f"{E.errorcode.get(e.errno, e.errno)}: {e.strerror}"))
        except OSError as e:
            if e.errno == E.ENOENT:
                counts["enoent"] += 1
            else:
                events.put(("error", f"r{rid}", "list(2nd mount)", root, f"{E.errorcode.get(e.errno, e.errno)}: {e.strerror}"))
        finally:
            status[slot * 2] = 0
    events.put(("reader", rid, counts))


# --- the mounts and the checks ---------------------------------------------------------------


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def queued(cache):
    """(stage files, their bytes on disk) in a cache directory: the data waiting for its upload."""
    files = size = 0
    try:
        with os.scandir(cache) as it:
            for e in it:
                if e.name.startswith("stage-") and "." not in e.name:
                    try:
                        size += e.stat().st_blocks * 512
                        files += 1
                    except OSError:
                        pass
    except OSError:
        pass
    return files, size


def proc_state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class Stress:
    def __init__(self, args):
        self.a = args
        self.bin = args.bin
        self.tmp = tempfile.mkdtemp(prefix="bucketfs-stress-", dir=args.tmp)
        self.mnt1 = os.path.join(self.tmp, "mnt1")
        self.mnt2 = os.path.join(self.tmp, "mnt2")
        self.errors = []
        self.hangs = []
        self.dstate = set()
        self.rows = []

    def gs_opts(self):
        return ["--endpoint", self.a.endpoint, "--anonymous"] if self.a.source.startswith("gs://") else []

    def mount(self, mnt, name):
        os.makedirs(mnt)
        p = subprocess.run([self.bin, "mount", self.a.source, mnt, "--cache-dir", os.path.join(self.tmp, name + ".cache"),
                            "--log-file", os.path.join(self.tmp, name + ".log"), "--log-level", "notice",
                            "--metadata-ttl", "1", *self.gs_opts(), *self.a.mount_opt,
                            *(["--write-back"] if self.a.write_back and name == "mnt1" else [])],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SystemExit(f"mount of {self.a.source} failed: {p.stderr}")
        return daemon_pid(mnt)

    def unmount(self, mnt, pid, bound=120):
        t0 = time.monotonic()
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True, timeout=bound)
        while pid and os.path.exists(f"/proc/{pid}") and proc_state(pid) != "Z" and time.monotonic() - t0 < bound:
            time.sleep(0.1)
        took = time.monotonic() - t0
        alive = pid and os.path.exists(f"/proc/{pid}") and proc_state(pid) != "Z"
        if alive or os.path.ismount(mnt):
            self.errors.append(("unmount", mnt, f"the mount process still runs {bound} s after fusermount3 -u"))
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True, timeout=30)
        return took

    def library(self, *args):
        return subprocess.run([self.bin, *args, *self.gs_opts()], capture_output=True, timeout=120)

    def run(self):
        a = self.a
        print(f"stress: {a.workers} workers on {self.mnt1}{' (--write-back)' if a.write_back else ''}, "
              f"{a.readers} readers on {self.mnt2}, {a.seconds} s, source {a.source}", flush=True)
        pid1 = self.mount(self.mnt1, "mnt1")
        pid2 = self.mount(self.mnt2, "mnt2")
        root1 = os.path.join(self.mnt1, a.subdir)
        root2 = os.path.join(self.mnt2, a.subdir)
        os.makedirs(root1, exist_ok=True)
        time.sleep(1.5)  # the first mount's listing TTL, so the second sees the directory
        rss_start = rss_kib(pid1)
        rss_peak = rss_start
        ctx = mp.get_context("fork")
        status = ctx.Array("d", 2 * (16 + a.readers + a.workers), lock=False)
        events = ctx.Queue()
        procs = [ctx.Process(target=worker_main, args=(i, root1, a.seconds, a.seed * 1000 + i, status, events))
                 for i in range(a.workers)]
        procs += [ctx.Process(target=reader_main, args=(i, root2, a.seconds, a.seed * 1000 + 100 + i, status, events))
                  for i in range(a.readers)]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        models, ops, readers = {}, {}, {}
        queue_peak = (0, 0)  # stage files in the first mount's cache directory, and their bytes
        while True:
            while not events.empty():
                self.event(events.get(), models, ops, readers)
            alive = [p for p in procs if p.is_alive()]
            now = time.time()
            slots = list(range(a.workers)) + [16 + r for r in range(a.readers)]
            for s in slots:
                if status[s * 2] and now - status[s * 2 + 1] > a.op_bound:
                    key = (s, status[s * 2 + 1])
                    if key not in self.hangs:
                        self.hangs.append(key)
            for p in alive + [type("P", (), {"pid": pid1})(), type("P", (), {"pid": pid2})()]:
                st = proc_state(p.pid)
                if st == "D":
                    self.dstate.add(p.pid)
            r = rss_kib(pid1)
            if r and (rss_peak is None or r > rss_peak):
                rss_peak = r
            files, size = queued(os.path.join(self.tmp, "mnt1.cache"))
            queue_peak = (max(queue_peak[0], files), max(queue_peak[1], size))
            if not alive:
                break
            if time.monotonic() - t0 > a.seconds + 4 * a.op_bound:
                for p in alive:
                    self.errors.append(("hang", p.pid, f"still running {a.op_bound * 4:.0f} s after the end; state {proc_state(p.pid)}"))
                    p.kill()
                break
            time.sleep(1)
        time.sleep(0.5)
        while not events.empty():
            self.event(events.get(), models, ops, readers)
        load_s = time.monotonic() - t0
        refused = self.refused_other_generation()
        # no process left in D state
        left_d = [pid for pid in (pid1, pid2) if proc_state(pid) == "D"]
        # memory after the load: the kernel forgets what it can, then the mount settles
        subprocess.run("sync; echo 2 > /proc/sys/vm/drop_caches", shell=True, capture_output=True)
        time.sleep(a.settle)
        rss_end = rss_kib(pid1)
        t_u2 = self.unmount(self.mnt2, pid2)
        t_u1 = self.unmount(self.mnt1, pid1)
        missing, wrong, extra, checked = self.check_bucket(models)
        staged = [n for n in os.listdir(os.path.join(self.tmp, "mnt1.cache")) if n.startswith("stage-")]
        lost = os.listdir(os.path.join(self.tmp, "mnt1.cache", "lost+found")) \
            if os.path.isdir(os.path.join(self.tmp, "mnt1.cache", "lost+found")) else []
        total_ops = sum(sum(o.values()) for o in ops.values())
        rr = {k: sum(r[k] for r in readers.values()) for k in ("list", "read", "stat", "enoent", "bytes")}
        slack = a.rss_slack_mb * 1024
        rss_ok = rss_end is not None and rss_start is not None and rss_end <= rss_start + slack
        checks = [
            ("operations by the workers", f"{total_ops} in {load_s:.0f} s ({total_ops / max(load_s, 1):.0f}/s): "
             + ", ".join(f"{k} {sum(o.get(k, 0) for o in ops.values())}" for k in Worker.OPS), True),
            ("second mount (readers)", f"{rr['list']} listings, {rr['stat']} stats, {rr['read']} reads "
             f"({rr['bytes'] / 2**20:.0f} MiB, every block checked), {rr['enoent']} ENOENT (renamed/unlinked meanwhile)", True),
            ("unexpected errno / wrong results", f"{len(self.errors)}", not self.errors),
            ("2nd mount: EIO for bytes of another generation (server ignores generation=)",
             f"{refused}" + ("" if a.server_ignores_generation else " (not expected from this server)"),
             True),
            ("operations over the bound (hang)", f"{len(self.hangs)} over {a.op_bound:.0f} s", not self.hangs),
            ("processes in D state (waiting on the mount) seen / left at the end", f"{len(self.dstate)} / {len(left_d)}",
             not left_d),
            ("files closed without error, in the bucket with exactly their bytes and xattrs",
             f"{checked - len(missing) - len(wrong)} of {checked}; missing {len(missing)}, wrong {len(wrong)}",
             not missing and not wrong),
            ("objects in the bucket that no worker kept", f"{len(extra)}", not extra),
            ("mount RSS (MiB): start / peak / after load", f"{rss_start / 1024:.0f} / {rss_peak / 1024:.0f} / "
             f"{(rss_end or 0) / 1024:.0f} (allowed: start + {a.rss_slack_mb})", rss_ok),
            ("stage files in the cache directory, peak: files / MiB on disk", f"{queue_peak[0]} / {queue_peak[1] / 2**20:.1f}"
             + (" (--write-back)" if a.write_back else ""), True),
            ("unmount (s): second / first mount", f"{t_u2:.1f} / {t_u1:.1f}", True),
            ("stage files left / lost+found entries", f"{len(staged)} / {len(lost)}", not staged and not lost),
        ]
        self.print_table(checks)
        for n in sorted(staged)[:20]:
            p = os.path.join(self.tmp, "mnt1.cache", n)
            body = open(p, errors="replace").read(400) if n.endswith(".json") else f"{os.path.getsize(p)} bytes"
            print(f"  left in the cache directory: {n}: {body}")
        for e in self.errors[:30]:
            print("  error:", *e)
        for s, started in self.hangs[:10]:
            print(f"  hang: slot {s} op started {time.time() - started:.0f} s ago")
        for x in (missing + wrong)[:20]:
            print("  bucket:", x)
        for x in extra[:10]:
            print("  extra object:", x)
        ok = all(c[2] for c in checks)
        print(f"stress: {'PASS' if ok else 'FAIL'} ({self.tmp})", flush=True)
        if ok and not a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return ok

    def refused_other_generation(self):
        """With --server-ignores-generation (gcp-storage-emulator serves the live object whatever
        `generation=` asks: curl `?alt=media&generation=1` → 200 and the live bytes, where Cloud
        Storage and fake-gcs-server answer 404): an EIO of the second mount's reader is expected
        when the mount's log shows it refused the answer (a file opened at generation G, replaced
        since, read back as the new bytes: 'download answer rejected', or 'checksum mismatch' when
        the new bytes fit the range asked). Those are taken out of the errors and counted; every
        other EIO stays an error."""
        if not self.a.server_ignores_generation:
            return 0
        try:
            log = open(os.path.join(self.tmp, "mnt2.log"), errors="replace").read().splitlines()
        except OSError:
            return 0
        # The new bytes are refused by their framing (another length: 'download answer
        # rejected') or, when the framing fits (a ranged GET inside a longer new version), by the
        # checksum of the generation opened ('checksum mismatch for NAME generation G').
        rejected = [l for l in log if "download answer rejected" in l or "checksum mismatch for " in l]
        keep, n = [], 0
        for e in self.errors:
            if len(e) != 4:
                keep.append(e)
                continue
            who, op, path, err = e
            rel = os.path.relpath(path, self.mnt2) if isinstance(path, str) and path.startswith(self.mnt2) else None
            if op == "read(2nd mount)" and err.startswith("EIO") and rel and any(f"'{rel}'" in l for l in rejected):
                n += 1
            else:
                keep.append(e)
        self.errors = keep
        return n

    def event(self, ev, models, ops, readers):
        kind = ev[0]
        if kind == "error":
            self.errors.append(ev[1:])
        elif kind == "model":
            models[ev[1]] = ev[2]
            ops[ev[1]] = ev[3]
        elif kind == "reader":
            readers[ev[1]] = ev[2]

    def check_bucket(self, models):
        """Every modelled file in the bucket with its bytes and xattrs; nothing else there. Read
        from the bucket, not through a mount: the library commands for the embedded bucket (4 at
        a time), the official client for gs://."""
        from concurrent.futures import ThreadPoolExecutor
        missing, wrong, extra = [], [], []
        base = self.a.source.rstrip("/") + "/" + self.a.subdir
        gs = self.gs_bucket()
        jobs = []
        for wid, files in sorted(models.items()):
            d = f"{base}/w{wid:02d}"
            if gs:
                pre = f"{self.gs_prefix()}w{wid:02d}/"
                there = {b.name[len(pre):] for b in gs.client.list_blobs(gs, prefix=pre) if b.name != pre}
            else:
                ls = self.library("ls", d)
                there = {l.strip().rsplit("/", 1)[-1] for l in ls.stdout.decode(errors="replace").splitlines() if l.strip()}
            extra += [f"w{wid:02d}/{n}" for n in sorted(there - set(files))]
            jobs += [(wid, d, name, m) for name, m in files.items()]

        def one(job):
            wid, d, name, m = job
            tag = f"w{wid:02d}/{name}"
            if gs:
                from google.api_core.exceptions import NotFound
                blob = gs.blob(f"{self.gs_prefix()}{tag}")
                try:
                    data = blob.download_as_bytes()
                    blob.reload()
                except NotFound as e:
                    return ("missing", f"{tag}: {e}")
                custom = blob.metadata or {}
            else:
                got = self.library("cat", f"{d}/{name}")
                if got.returncode != 0:
                    return ("missing", f"{tag}: {got.stderr.decode(errors='replace').strip()[:200]}")
                data = got.stdout
                st = self.library("stat", "--json", f"{d}/{name}")
                custom = json.loads(st.stdout).get("customMetadata", {}) if st.returncode == 0 else {}
            if hashlib.sha256(data).hexdigest() != m["sha"]:
                return ("wrong", f"{tag}: {len(data)} bytes, want {m['size']} ({check_content(data) or 'well-formed'})")
            have = {f"user.{k}": v for k, v in custom.items() if not k.startswith("goog-reserved-")
                    and v is not None and not (self.a.removed_key_is_empty and v == "")}
            if have != m["xattrs"]:
                return ("wrong", f"{tag}: xattrs {have}, want {m['xattrs']}")
            return None

        with ThreadPoolExecutor(4) as pool:
            for r in pool.map(one, jobs):
                if r:
                    (missing if r[0] == "missing" else wrong).append(r[1])
        return missing, wrong, extra, len(jobs)

    def gs_bucket(self):
        if not self.a.source.startswith("gs://"):
            return None
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        name = self.a.source[5:].split("/", 1)[0]
        return storage.Client(project="stress", client_options={"api_endpoint": self.a.endpoint},
                              credentials=AnonymousCredentials()).bucket(name)

    def gs_prefix(self):
        """The object-name prefix of the workers' directories: PREFIX/SUBDIR/."""
        rest = self.a.source[5:].split("/", 1)
        return (rest[1].strip("/") + "/" if len(rest) > 1 and rest[1].strip("/") else "") + self.a.subdir + "/"

    @staticmethod
    def print_table(checks):
        w = max(len(c[0]) for c in checks)
        print()
        print(f"| {'check'.ljust(w)} | result | ok |")
        print(f"|{'-' * (w + 2)}|---|---|")
        for name, value, ok in checks:
            print(f"| {name.ljust(w)} | {value} | {'yes' if ok else '**NO**'} |")
        print(flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True, help="an embedded bucket directory or gs://BUCKET[/PREFIX]")
    ap.add_argument("--endpoint", help="for gs://: the server (http://host:port)")
    ap.add_argument("--bin", default=os.environ.get("BUCKETFS_BIN", "bucketfs"))
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--op-bound", type=float, default=120, help="an operation slower than this is a hang")
    ap.add_argument("--rss-slack-mb", type=float, default=64)
    ap.add_argument("--settle", type=float, default=10, help="seconds after the load before RSS is read")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--subdir", default=f"stress-{os.getpid()}")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--mount-opt", action="append", default=[], help="an extra mount option (repeat)")
    ap.add_argument("--write-back", action="store_true", help="the first mount queues its uploads (--write-back)")
    ap.add_argument("--removed-key-is-empty", action="store_true",
                    help="the server stores a removed custom key as \"\" (fake-gcs-server): compare without them")
    ap.add_argument("--server-ignores-generation", action="store_true",
                    help="the server serves the live object whatever generation= asks (gcp-storage-emulator)")
    a = ap.parse_args(argv)
    a.mount_opt = [x for o in a.mount_opt for x in o.split()]
    print(f"stress: seed {a.seed}", flush=True)
    return 0 if Stress(a).run() else 1


if __name__ == "__main__":
    sys.exit(main())
