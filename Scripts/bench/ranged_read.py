"""The plain client of Scripts/bench-epochs.sh: the link's limit for readers of large objects, the
simplest client that keeps CONCURRENCY ranged requests in flight:
   ranged_read.py ENDPOINT BUCKET CONCURRENCY PART_MIB NAME...
splits each named object (its size from a metadata GET) into PART_MIB ranges and downloads all
of them, at most CONCURRENCY at once, each thread over its own HTTP/1.1 keep-alive connection.
Checks that every range answers 206 with exactly its bytes. Prints "SECONDS REQUESTS BYTES", the
time from the first ranged GET to the last byte (the metadata GETs and the interpreter's start
left out)."""
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

endpoint, bucket, concurrency, part = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(float(sys.argv[4]) * 1048576)
names = sys.argv[5:]
host = urllib.parse.urlsplit(endpoint).netloc
local = threading.local()
b = urllib.parse.quote(bucket, safe="")


def get(path, headers=None):
    if getattr(local, "c", None) is None:
        local.c = http.client.HTTPConnection(host, timeout=120)
    local.c.request("GET", path, headers=headers or {})
    r = local.c.getresponse()
    return r.status, r.read()


def size(name):
    status, body = get(f"/storage/v1/b/{b}/o/{urllib.parse.quote(name, safe='')}")
    if status != 200:
        raise SystemExit(f"ranged_read: metadata of {name}: {status} {body[:200]!r}")
    return name, int(json.loads(body)["size"])


def fetch(job):
    name, lo, hi = job
    status, body = get(f"/download/storage/v1/b/{b}/o/{urllib.parse.quote(name, safe='')}?alt=media",
                       {"Range": f"bytes={lo}-{hi - 1}"})
    if status not in (200, 206) or len(body) != hi - lo:
        raise SystemExit(f"ranged_read: {name} [{lo}, {hi}): {status}, {len(body)} bytes")
    return len(body)


with ThreadPoolExecutor(concurrency) as pool:
    sizes = list(pool.map(size, names))
jobs = [(n, lo, min(s, lo + part)) for n, s in sizes for lo in range(0, s, part)]
t0 = time.monotonic()
with ThreadPoolExecutor(concurrency) as pool:
    total = sum(pool.map(fetch, jobs))
print(f"{time.monotonic() - t0:.3f} {len(jobs)} {total}")
