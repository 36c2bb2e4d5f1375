"""The plain client of Scripts/bench-firebase.sh: what `ls -l` of a firebase:// directory asks for,
made by the simplest client that reaches the same concurrency. It signs in with the Auth REST API
(email + password, the Auth emulator URL form, as `bucketfs login --auth-endpoint` does), then
lists the directory page by page (v0, delimiter /, 1,000 names a page) and GETs each object's
metadata, CONCURRENCY requests at once: one thread and one keep-alive HTTP/1.1 connection each
(http.client), fed from the pages as they arrive. Untimed: the sign-in and the connections' setup
(as the mount's); timed: from the first list request to the last metadata answer.

   firebase_client.py BASE BUCKET PREFIX EMAIL PASSWORD_FILE CONCURRENCY [--ca-file PEM]
-> one line of JSON: {"seconds", "list", "metadata", "items"}; exits 1 on any failed request."""
import http.client
import json
import queue
import ssl
import sys
import threading
import time
import urllib.parse

base, bucket, prefix, email, password_file, concurrency = sys.argv[1:7]
concurrency = int(concurrency)
ca = sys.argv[sys.argv.index("--ca-file") + 1] if "--ca-file" in sys.argv else None
url = urllib.parse.urlsplit(base)
context = ssl.create_default_context(cafile=ca) if url.scheme == "https" else None


def connect():
    if context is not None:
        return http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=120)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=120)


def request(conn, method, path, body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"firebase_client: {method} {path.split('?')[0]} -> {resp.status} {data[:200]!r}")
    return json.loads(data)


password = open(password_file).read().strip()
signin = request(connect(), "POST", "/identitytoolkit.googleapis.com/v1/accounts:signInWithPassword?key=bench-key",
                 json.dumps({"email": email, "password": password, "returnSecureToken": True}),
                 {"Content-Type": "application/json"})
auth = {"Authorization": "Firebase " + signin["idToken"]}
objects = "/v0/b/" + urllib.parse.quote(bucket, safe="") + "/o"

names = queue.Queue()
counts = {"list": 0, "metadata": 0, "items": 0}
lock = threading.Lock()
failures = []
conns = [connect() for _ in range(concurrency + 1)]
for c in conns:
    c.connect()  # the handshakes (TLS) before the clock, as a mount's pool is warm by its first stat


def worker(conn):
    while True:
        name = names.get()
        if name is None:
            return
        try:
            meta = request(conn, "GET", objects + "/" + urllib.parse.quote(name, safe=""), headers=auth)
            assert meta.get("name") == name, meta
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))
            return
        with lock:
            counts["metadata"] += 1


threads = [threading.Thread(target=worker, args=(c,)) for c in conns[1:]]
t0 = time.monotonic()
for t in threads:
    t.start()
token = None
while True:
    q = {"prefix": prefix, "delimiter": "/", "maxResults": "1000"}
    if token:
        q["pageToken"] = token
    page = request(conns[0], "GET", objects + "?" + urllib.parse.urlencode(q), headers=auth)
    counts["list"] += 1
    for item in page.get("items", []):
        counts["items"] += 1
        names.put(item["name"])
    token = page.get("nextPageToken")
    if not token:
        break
for _ in threads:
    names.put(None)
for t in threads:
    t.join()
seconds = time.monotonic() - t0
if failures or counts["metadata"] != counts["items"]:
    raise SystemExit(f"firebase_client: {len(failures)} failed, first: {failures[:1]}")
print(json.dumps({"seconds": round(seconds, 3), **counts}))
