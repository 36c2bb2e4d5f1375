#!/usr/bin/env python3
"""mountpoint-s3's fio jobs, as Scripts/bench-fio.sh runs them, and what a row reports.

The jobs are the ones mountpoint-s3 runs on every commit: github.com/awslabs/mountpoint-s3,
`mountpoint-s3/scripts/fio/{read,read_latency,write,write_latency,create,mix}/*.fio` (described in
its `doc/BENCHMARKING.md`). Each is a few parameters; they are written out here, under their own
names, with two scalings for this machine, which the bench prints in its header: `size=100G`
becomes SIZE, `runtime=30s` becomes RUNTIME. Everything else is as published, but for one thing:
the jobs that write (sequential writes and the mix) write SIZE once, without `time_based`. As
published (100G in at most 10 s) they never reach the end of their file; at SIZE, `time_based`
would wrap around and write the same open file over and over, uploaded once at the end, so the
number would be the local disk's. Their number is the bytes over fio's wall time, the upload at
the close included.

  fio_jobs.py names                       the job names, in the bench's order
  fio_jobs.py file NAME SIZE RUNTIME OUT [local]
                                          writes NAME's job file (fio syntax) to OUT (local:
                                          without direct=1, which local disk refuses for 1 byte)
  fio_jobs.py files NAME SIZE             the files the job reads, one per line (name size)
  fio_jobs.py kind NAME                   read | write | latency | create | mix
  fio_jobs.py result NAME JSON [SECONDS]  the row's number from fio's JSON output: MiB/s (read,
                                          write, mix), ms (latency), files/s (create)
  fio_jobs.py clean ENDPOINT BUCKET PREFIX  deletes every object whose name begins with PREFIX (the test servers keep
                                          them in memory: a job's files go once its targets ran)
  fio_jobs.py plain NAME ENDPOINT BUCKET PREFIX SIZE RUNTIME
                                          the same bytes through a plain client (the limit a
                                          mount is held to): MiB/s, ms or files/s
"""
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

G = "[global]\nname=fs_bench\nbs=256k\nruntime={runtime}\ntime_based\ngroup_reporting\n"
READ = "rw={rw}\nioengine=sync\nfallocate=none\n"


def job(section, size, rw, numjobs=1, direct=False, extra=""):
    body = f"[{section}]\nsize={size}\n" + READ.format(rw=rw)
    if direct:
        body += "direct=1\n"
    if numjobs > 1:
        body += f"numjobs={numjobs}\n"
    return body + extra


WRITE_EXTRA = "create_on_open=1\nfsync_on_close=1\nunlink=1\n"

# name: (kind, job text with {size} and {runtime}, threads, size of each file read ("big" = SIZE))
JOBS = {
    # read/
    "seq_read": ("read", G + job("sequential_read", "{size}", "read"), 1, "big"),
    "seq_read_4t": ("read", G + job("sequential_read_four_threads", "{size}", "read", 4), 4, "big"),
    "seq_read_direct": ("read", G + job("sequential_read_direct_io", "{size}", "read", direct=True), 1, "big"),
    "seq_read_4t_direct": ("read", G + job("sequential_read_four_threads_direct_io", "{size}", "read", 4, True), 4, "big"),
    "seq_read_small": ("read", G + job("sequential_read_small_file", "5m", "read"), 1, "5m"),
    "seq_read_4t_small": ("read", G + job("sequential_read_four_threads_small_file", "5m", "read", 4), 4, "5m"),
    "seq_read_direct_small": ("read", G + job("sequential_read_direct_io_small_file", "5m", "read", direct=True), 1, "5m"),
    "seq_read_4t_direct_small": ("read", G + job("sequential_read_four_threads_direct_io_small_file", "5m", "read", 4, True), 4, "5m"),
    "rand_read": ("read", G + job("random_read", "{size}", "randread"), 1, "big"),
    "rand_read_4t": ("read", G + job("random_read_four_threads", "{size}", "randread", 4), 4, "big"),
    "rand_read_small": ("read", G + job("random_read_small_file", "5m", "randread"), 1, "5m"),
    "rand_read_4t_small": ("read", G + job("random_read_four_threads_small_file", "5m", "randread", 4), 4, "5m"),
    # read_latency/
    "ttfb": ("latency", "[global]\nname=fs_bench\nbs=1B,1M\n[time_to_first_byte_read]\nsize={size}\nio_limit=1B\n"
             "rw=read\nioengine=sync\nfallocate=none\ndirect=1\nloops=10\n", 1, "big"),
    "ttfb_small": ("latency", "[global]\nname=fs_bench\nbs=1B\n[time_to_first_byte_read_small_file]\nsize=1B\n"
                   "rw=read\nioengine=sync\nfallocate=none\ndirect=1\nloops=10\n", 1, "1"),
    # write/
    "seq_write": ("write", G + job("sequential_write", "{size}", "write", extra=WRITE_EXTRA), 1, None),
    "seq_write_direct": ("write", G + job("sequential_write_direct_io", "{size}", "write", direct=True, extra=WRITE_EXTRA), 1, None),
    # write_latency/
    "time_to_write_one_byte_file": ("latency", "[global]\nname=fs_bench\nbs=1B\n[time_to_write_one_byte_file]\nsize=1B\n"
                                    "rw=write\nioengine=sync\nfallocate=none\ncreate_on_open=1\nfsync_on_close=1\n"
                                    "unlink=1\nunlink_each_loop=1\nloops=10\n", 1, None),
    # create/ (10 jobs of N/10 files each, 4 KiB, one open at a time)
    **{f"create_files_{n}": ("create", "[global]\ncreate_on_open=1\nnrfiles=" + str(n // 10) +
                             "\nioengine=filecreate\nfallocate=none\nfilesize=4k\nopenfiles=1\n" +
                             "".join(f"[t{i}]\n" for i in range(10)), 10, None) for n in (100, 1000, 10000)},
    # mix/
    "mix_2r2w": ("mix", G + job("sequential_read_two_threads", "{size}", "read", 2) +
                 "[sequential_write_two_threads]\nnew_group\nnumjobs=2\nsize={size}\nrw=write\nioengine=sync\n"
                 "fallocate=none\n" + WRITE_EXTRA, 2, "big"),
}


def size_bytes(s):
    s = str(s).strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


# The jobs that write SIZE once (the module's docstring says why).
ONCE = {"seq_write", "seq_write_direct", "mix_2r2w"}


def job_text(name, size, runtime, local=False):
    text = JOBS[name][1].format(size=size, runtime=runtime)
    if name in ONCE:
        text = text.replace("time_based\n", "")
    # On local disk O_DIRECT wants aligned buffers (a 1-byte read fails): the page cache is
    # dropped before each run instead.
    return text.replace("direct=1\n", "") if local else text


def read_files(name, size):
    """The files fio reads for NAME (its own naming: SECTION.THREAD.0), with their sizes."""
    kind, text, threads, each = JOBS[name]
    if each is None:
        return []
    section = text.split("\n[")[1].split("]")[0]
    n = size_bytes(size) if each == "big" else size_bytes(each)
    return [(f"{section}.{t}.0", n) for t in range(threads)]


def result(name, path, wall=None):
    kind = JOBS[name][0]
    text = open(path, errors="replace").read()
    try:
        # fio may print a warning before its JSON.
        d = json.loads(text[text.index("{"):])
        jobs = d["jobs"]
    except (ValueError, KeyError):
        return "failed"
    if kind in ("write", "mix") and wall:
        # Bytes over the wall time: what the close's upload took is in it (fio's own bandwidth
        # leaves the fsync at close out).
        total = sum(j["read"]["io_bytes"] + j["write"]["io_bytes"] for j in jobs)
        return f"{total / wall / (1 << 20):.1f}"
    if kind in ("read", "write", "mix"):
        # As mountpoint-s3's fs_bench.sh: the read bandwidth of read jobs, the write bandwidth of
        # the others, summed (group_reporting gives one entry a group), KiB/s -> MiB/s.
        def reads(j):
            rw = j["job options"].get("rw", d.get("global options", {}).get("rw", ""))
            return rw.split(":")[0] in ("read", "randread")
        bw = sum(j["read"]["bw"] if reads(j) else j["write"]["bw"] for j in jobs)
        return f"{bw / 1024:.1f}"
    if kind == "latency":
        j = jobs[0]
        if j["job options"].get("rw") == "read":
            return f"{j['read']['lat_ns']['mean'] / 1e6:.2f}"
        # time_to_write_one_byte_file: the whole loop (create, write, fsync on close, unlink)
        # per file, from the job's runtime.
        return f"{j['job_runtime'] / int(j['job options'].get('loops', 1)):.2f}"
    if kind == "create":
        # fio's filecreate engine times no I/O: files over the run's wall time (fio's own start
        # included), which the bench measures around it.
        files = sum(int(j.get("job options", {}).get("nrfiles", d["global options"].get("nrfiles", 1))) for j in jobs)
        return f"{files / wall:.0f}" if wall else "n/a"
    raise SystemExit(f"unknown kind {kind}")


class Plain:
    """A plain JSON-API client, one connection a thread, as close to the wire as Python goes."""

    def __init__(self, endpoint, bucket, prefix):
        self.endpoint, self.bucket, self.prefix = endpoint.rstrip("/"), bucket, prefix

    def url(self, name, media=True):
        q = urllib.parse.quote(f"{self.prefix}/{name}", safe="")
        return f"{self.endpoint}/storage/v1/b/{self.bucket}/o/{q}" + ("?alt=media" if media else "")

    def get(self, name, start=None, end=None, first_byte=False):
        req = urllib.request.Request(self.url(name))
        if start is not None:
            req.add_header("Range", f"bytes={start}-{end}")
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=120) as r:
            if first_byte:
                r.read(1)
                return time.monotonic() - t0
            n = 0
            while True:
                b = r.read(1 << 20)
                if not b:
                    return n
                n += len(b)

    def put(self, name, data):
        q = urllib.parse.quote(f"{self.prefix}/{name}", safe="")
        req = urllib.request.Request(f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={q}",
                                     data=data, method="POST", headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=300).read()

    def put_streamed(self, name, size, piece):
        """One resumable upload of `size` bytes sent as one streamed PUT (`piece` repeated), as
        a client that streams a file it writes."""
        import http.client
        q = urllib.parse.quote(f"{self.prefix}/{name}", safe="")
        start = urllib.request.Request(f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?uploadType=resumable&name={q}",
                                       data=b"{}", method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(start, timeout=60) as r:
            session = urllib.parse.urlsplit(r.headers["Location"])
        conn = http.client.HTTPConnection(session.netloc, timeout=300)
        conn.putrequest("PUT", session.path + ("?" + session.query if session.query else ""))
        conn.putheader("Content-Length", str(size))
        conn.putheader("Content-Range", f"bytes 0-{size - 1}/{size}")
        conn.endheaders()
        sent = 0
        while sent < size:
            chunk = piece[:min(len(piece), size - sent)]
            conn.send(chunk)
            sent += len(chunk)
        resp = conn.getresponse()
        resp.read()
        conn.close()
        if resp.status not in (200, 201):
            raise SystemExit(f"plain upload: HTTP {resp.status}")

    def delete(self, name):
        urllib.request.urlopen(urllib.request.Request(self.url(name, media=False), method="DELETE"), timeout=60).read()


def plain(name, endpoint, bucket, prefix, size, runtime):
    kind, text, threads, each = JOBS[name]
    runtime = float(str(runtime).rstrip("s"))
    c = Plain(endpoint, bucket, prefix)
    files = read_files(name, size)
    done = [0] * threads
    stop = time.monotonic() + runtime

    def reader(t):
        fname, n = files[t]
        rnd = random.Random(t)
        while time.monotonic() < stop:
            if "rand" in name:
                off = rnd.randrange(0, max(1, n // (256 << 10))) * (256 << 10)
                done[t] += c.get(fname, off, min(n, off + (256 << 10)) - 1)
            else:
                done[t] += c.get(fname)

    def writer(t):
        # What fio writes between open and close, as one streamed upload of a file of SIZE
        # bytes, then deleted as fio's unlink deletes the file.
        n = size_bytes(size)
        c.put_streamed(f"plain-write.{t}", n, os.urandom(1 << 20))
        done[t] += n
        c.delete(f"plain-write.{t}")  # the server keeps objects in memory

    if kind == "latency" and name.startswith("ttfb"):
        fname = files[0][0]
        samples = [c.get(fname, 0, 0, first_byte=True) for _ in range(10)]
        return f"{sum(samples) / len(samples) * 1000:.2f}"
    if kind == "latency":
        t0 = time.monotonic()
        for i in range(10):
            c.put(f"plain-one-byte.{i}", b"x")
            c.delete(f"plain-one-byte.{i}")
        return f"{(time.monotonic() - t0) / 10 * 1000:.2f}"
    if kind == "create":
        total = int(name.rsplit("_", 1)[1])
        per = total // 10
        t0 = time.monotonic()
        ts = [threading.Thread(target=lambda t=t: [c.put(f"plain-create.{t}.{i}", b"\0" * 4096) for i in range(per)])
              for t in range(10)]
        [x.start() for x in ts]
        [x.join() for x in ts]
        return f"{total / (time.monotonic() - t0):.0f}"
    work = reader if kind == "read" else writer
    t0 = time.monotonic()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    [x.start() for x in ts]
    [x.join() for x in ts]
    return f"{sum(done) / (time.monotonic() - t0) / (1 << 20):.1f}"


def clean(endpoint, bucket, prefix):
    base = f"{endpoint.rstrip('/')}/storage/v1/b/{bucket}/o"
    token = None
    names = []
    while True:
        q = {"prefix": prefix, "fields": "items(name),nextPageToken"}
        if token:
            q["pageToken"] = token
        with urllib.request.urlopen(base + "?" + urllib.parse.urlencode(q), timeout=60) as r:
            page = json.load(r)
        names += [o["name"] for o in page.get("items", [])]
        token = page.get("nextPageToken")
        if not token:
            break
    for n in names:
        req = urllib.request.Request(f"{base}/{urllib.parse.quote(n, safe='')}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=60).read()
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def main(argv):
    cmd = argv[1]
    if cmd == "names":
        print("\n".join(JOBS))
    elif cmd == "file":
        open(argv[5], "w").write(job_text(argv[2], argv[3], argv[4], local=len(argv) > 6 and argv[6] == "local"))
    elif cmd == "files":
        for f, n in read_files(argv[2], argv[3]):
            print(f, n)
    elif cmd == "kind":
        print(JOBS[argv[2]][0])
    elif cmd == "result":
        print(result(argv[2], argv[3], float(argv[4]) if len(argv) > 4 else None))
    elif cmd == "clean":
        clean(*argv[2:5])
    elif cmd == "plain":
        print(plain(*argv[2:8]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
