"""The plain client of Scripts/bench-ls.sh for a tree: what `ls -R DIR` of a gs:// mount needs
from the JSON API, fetched by a client with nothing to do but fetch it:
   list_tree.py ENDPOINT BUCKET PREFIX CONCURRENCY
lists PREFIX with delimiter "/" (1,000 a page, each directory's pages one after the other, as its
page tokens demand) and every prefix (subdirectory) it finds, at most CONCURRENCY directories at
once, each thread over its own HTTP/1.1 keep-alive connection. Every page is parsed (json) and
every name counted once; it asks for bucketfs's partial response (`plain_http.LIST_FIELDS`). A
directory of one level is a single chain of pages: for a flat directory the faster limit is Scripts/bench/list_ranges.py, which knows where to cut it.
Prints "SECONDS NAMES REQUESTS CPU": the time from the first request to the last page parsed, and
the client's own CPU seconds (user + system) in it."""
import json
import os
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from plain_http import LIST_FIELDS, Getter

endpoint, bucket, root = sys.argv[1], sys.argv[2], sys.argv[3]
concurrency = int(sys.argv[4])
http = Getter(endpoint, "list_tree")
get = http.get


def list_dir(prefix):
    """(names of the objects, prefixes) directly in `prefix`."""
    q = {"prefix": prefix, "delimiter": "/", "maxResults": "1000", "fields": LIST_FIELDS}
    names, prefixes = [], []
    while True:
        page = json.loads(get(f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?" + urllib.parse.urlencode(q)))
        names += [o["name"] for o in page.get("items", []) if o["name"] != prefix]
        prefixes += page.get("prefixes", [])
        if not page.get("nextPageToken"):
            return names, prefixes
        q["pageToken"] = page["nextPageToken"]


t0, c0 = time.monotonic(), os.times()
seen = []
with ThreadPoolExecutor(concurrency) as pool:
    pending = {pool.submit(list_dir, root)}
    while pending:
        done = next(iter(pending))
        pending.remove(done)
        names, prefixes = done.result()
        seen += names + prefixes
        pending |= {pool.submit(list_dir, p) for p in prefixes}
t1, c1 = time.monotonic(), os.times()
assert len(set(seen)) == len(seen), "a name came twice"
print(f"{t1 - t0:.3f} {len(seen)} {http.requests} {c1.user + c1.system - c0.user - c0.system:.2f}")
