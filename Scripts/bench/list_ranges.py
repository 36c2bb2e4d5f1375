"""The plain client of Scripts/bench-listing.sh: the listing `ls -l DIR` of a gs:// mount needs,
fetched as fast as a client that already knows where to cut can fetch it:
   list_ranges.py ENDPOINT BUCKET PREFIX COUNT CONCURRENCY
lists PREFIX (delimiter "/", 1,000 a page) of the formula server's family PREFIX:COUNT
(Tests/e2e/formula_server.py: names PREFIXf0000000, PREFIXf0000001...) as COUNT/1,000 name
ranges [PREFIXf{k*1000}, PREFIXf{(k+1)*1000}), at most CONCURRENCY at once, each thread over its
own HTTP/1.1 keep-alive connection; a range that comes back with a page token is followed. The
cuts come from the formula, so no request is spent finding them: no lister that has to learn
the names from the pages does better. Every page is parsed (json) and every name counted once.
It asks for the partial response bucketfs asks for (`plain_http.LIST_FIELDS`).
Prints "SECONDS NAMES REQUESTS CPU": the time from the first request to the last page parsed, and
the client's own CPU seconds (user + system) in it."""
import os
import json
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from plain_http import LIST_FIELDS, Getter

endpoint, bucket, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
count, concurrency = int(sys.argv[4]), int(sys.argv[5])
http = Getter(endpoint, "list_ranges")
get = http.get


def name(i):
    return f"{prefix}f{i:07d}"


def list_range(k):
    q = {"prefix": prefix, "delimiter": "/", "maxResults": "1000", "startOffset": name(k * 1000), "fields": LIST_FIELDS}
    if (k + 1) * 1000 < count:
        q["endOffset"] = name((k + 1) * 1000)
    names = []
    while True:
        page = json.loads(get(f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?" + urllib.parse.urlencode(q)))
        names += [o["name"] for o in page.get("items", [])] + page.get("prefixes", [])
        if not page.get("nextPageToken"):
            return names
        q["pageToken"] = page["nextPageToken"]


t0, c0 = time.monotonic(), os.times()
with ThreadPoolExecutor(concurrency) as pool:
    ranges = list(pool.map(list_range, range((count + 999) // 1000)))
t1, c1 = time.monotonic(), os.times()
names = [n for r in ranges for n in r]
assert len(set(names)) == len(names), "a name came twice"
print(f"{t1 - t0:.3f} {len(names)} {http.requests} {c1.user + c1.system - c0.user - c0.system:.2f}")
