"""Fills an emulator bucket fast, with plain HTTP (one multipart upload per object, a few threads):
   fill.py ENDPOINT BUCKET PREFIX N SIZE [--metadata k=v]
-> N objects PREFIX/fNNNNNN of SIZE random bytes (custom metadata k=v), uploaded as any client would.
   fill.py ENDPOINT BUCKET PREFIX --from DIR [--metadata k=v]
-> every file under DIR as PREFIX/its path relative to DIR."""
import json
import os
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

endpoint, bucket, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
if sys.argv[4] == "--from":
    src = sys.argv[5]
    files = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    jobs = [(f"{prefix}/{rel}", os.path.join(src, rel)) for rel in files]
else:
    n, size = int(sys.argv[4]), int(sys.argv[5])
    jobs = [(f"{prefix}/f{i:06d}", size) for i in range(n)]
meta = {}
if "--metadata" in sys.argv:
    k, _, v = sys.argv[sys.argv.index("--metadata") + 1].partition("=")
    meta[k] = v
url = f"{endpoint}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?uploadType=multipart"


def put(job):
    name, what = job
    if isinstance(what, str):
        with open(what, "rb") as f:
            body = f.read()
    else:
        body = os.urandom(what) if what else b""
    resource = json.dumps({"name": name, "metadata": meta, "contentType": "application/octet-stream"}).encode()
    b = b"bucketfs-fill"
    data = (b"--" + b + b"\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" + resource
            + b"\r\n--" + b + b"\r\nContent-Type: application/octet-stream\r\n\r\n" + body + b"\r\n--" + b + b"--\r\n")
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "multipart/related; boundary=bucketfs-fill"})
    urllib.request.urlopen(req, timeout=60).read()


with ThreadPoolExecutor(4) as pool:  # the emulator serves one at a time; threads hide client latency
    list(pool.map(put, jobs))
