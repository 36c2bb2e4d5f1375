"""The limit under a write benchmark: a plain client uploading files straight to the server, one
request a file, CONCURRENCY at a time, as fast as it can. Each is the request bucketfs sends for
a small new file: `uploadType=multipart`, the object's metadata (name, contentType, the POSIX
keys gsutil uses) and its bytes, with `ifGenerationMatch=0`; the server's work per request is
then the same as for the mount's uploads:
   upload_many.py ENDPOINT BUCKET PREFIX DIR CONCURRENCY
-> uploads every file of DIR as PREFIX/NAME; prints the seconds from the first request to the
   last answer; exit status 1 if any upload is not answered 200."""
import concurrent.futures
import http.client
import json
import os
import sys
import time
import urllib.parse

endpoint, bucket, prefix, folder, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
url = urllib.parse.urlsplit(endpoint)
files = sorted(os.listdir(folder))
bodies = {name: open(os.path.join(folder, name), "rb").read() for name in files}


BOUNDARY = "bench-upload-many-boundary"


def multipart(name):
    meta = {"name": f"{prefix}/{name}", "contentType": "application/octet-stream",
            "metadata": {"goog-reserved-posix-mode": "644", "goog-reserved-posix-uid": "0",
                         "goog-reserved-posix-gid": "0", "goog-reserved-file-mtime": str(int(time.time()))}}
    return (f"--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(meta)}\r\n"
            f"--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + bodies[name] + \
        f"\r\n--{BOUNDARY}--\r\n".encode()


def upload(name):
    q = urllib.parse.urlencode({"uploadType": "multipart", "ifGenerationMatch": "0"})
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        c.request("POST", f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{q}", body=multipart(name),
                  headers={"Content-Type": f"multipart/related; boundary={BOUNDARY}"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


t0 = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
    statuses = list(pool.map(upload, files))
elapsed = time.monotonic() - t0
bad = [s for s in statuses if s != 200]
if bad:
    print(f"upload_many: {len(bad)} of {len(files)} uploads failed (statuses {sorted(set(bad))})", file=sys.stderr)
    sys.exit(1)
print(f"{elapsed:.3f}")
