"""The plain client of Scripts/bench-backup.sh: what `tar -cf - DIR` of a gs:// mount has to fetch,
fetched by the simplest client that reaches a given concurrency:
   fetch_many.py ENDPOINT BUCKET PREFIX CONCURRENCY
lists PREFIX/ (JSON API, 1,000 a page), then downloads every object whole (alt=media), at most
CONCURRENCY at once, each thread over its own HTTP/1.1 keep-alive connection (opened by its first
request: bucketfs opens its connections at its first requests too). Checks each body's length
against the listing. Prints "SECONDS OBJECTS BYTES", the time from the first request to the last
byte (the interpreter's start left out)."""
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

endpoint, bucket, prefix, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
host = urllib.parse.urlsplit(endpoint).netloc
local = threading.local()


def conn():
    if getattr(local, "c", None) is None:
        local.c = http.client.HTTPConnection(host, timeout=120)
    return local.c


def get(path):
    c = conn()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        raise SystemExit(f"fetch_many: GET {path}: {r.status} {body[:200]!r}")
    return body


t0 = time.monotonic()
b = urllib.parse.quote(bucket, safe="")
items, token = [], None
while True:
    q = {"prefix": prefix.rstrip("/") + "/", "maxResults": "1000"}
    if token:
        q["pageToken"] = token
    page = json.loads(get(f"/storage/v1/b/{b}/o?{urllib.parse.urlencode(q)}"))
    items += [(o["name"], int(o["size"])) for o in page.get("items", [])]
    token = page.get("nextPageToken")
    if not token:
        break


def fetch(item):
    name, size = item
    body = get(f"/download/storage/v1/b/{b}/o/{urllib.parse.quote(name, safe='')}?alt=media")
    if len(body) != size:
        raise SystemExit(f"fetch_many: {name}: {len(body)} bytes, listed {size}")
    return len(body)


with ThreadPoolExecutor(concurrency) as pool:
    total = sum(pool.map(fetch, items))
print(f"{time.monotonic() - t0:.3f} {len(items)} {total}")
