"""Waits until objects are in a bucket at their full size (for write benchmarks that time a
write "until every object is in the bucket", whatever a mount's close returned):
   await_objects.py ENDPOINT BUCKET PREFIX COUNT SIZE [TIMEOUT_S]
-> polls the JSON API listing of PREFIX (every 50 ms) until COUNT objects of SIZE bytes are
   there; prints the seconds waited; exit status 1 after TIMEOUT_S (default 600)."""
import json
import sys
import time
import urllib.parse
import urllib.request

endpoint, bucket, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
count, size = int(sys.argv[4]), int(sys.argv[5])
timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 600.0
base = f"{endpoint}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o"


def complete():
    n, token = 0, None
    while True:
        q = {"prefix": prefix, "maxResults": "1000", "fields": "items(name,size),nextPageToken"}
        if token:
            q["pageToken"] = token
        with urllib.request.urlopen(base + "?" + urllib.parse.urlencode(q), timeout=30) as r:
            page = json.load(r)
        n += sum(1 for o in page.get("items", []) if int(o.get("size", -1)) == size)
        token = page.get("nextPageToken")
        if not token:
            return n >= count


t0 = time.monotonic()
while not complete():
    if time.monotonic() - t0 > timeout:
        print(f"await_objects: {prefix}: not {count} objects of {size} bytes after {timeout} s", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.05)
print(f"{time.monotonic() - t0:.3f}")
