"""The limit under a write benchmark: a plain client uploading files straight to the server, one
request a file (`uploadType=media`), CONCURRENCY at a time, as fast as it can:
   upload_many.py ENDPOINT BUCKET PREFIX DIR CONCURRENCY
-> uploads every file of DIR as PREFIX/NAME; prints the seconds from the first request to the
   last answer; exit status 1 if any upload is not answered 200."""
import concurrent.futures
import http.client
import os
import sys
import time
import urllib.parse

endpoint, bucket, prefix, folder, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
url = urllib.parse.urlsplit(endpoint)
files = sorted(os.listdir(folder))
bodies = {name: open(os.path.join(folder, name), "rb").read() for name in files}


def upload(name):
    q = urllib.parse.urlencode({"uploadType": "media", "name": f"{prefix}/{name}"})
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        c.request("POST", f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{q}", body=bodies[name],
                  headers={"Content-Type": "application/octet-stream"})
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
