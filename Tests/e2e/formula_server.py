"""A Cloud Storage JSON API server whose objects are made from a formula, so that directories of
100,000 or 1,000,000 objects can be listed without uploading them (Scripts/bench-listing.sh,
Tests/e2e/test_listing.py). Read-only; written from the JSON API's documentation of
objects.list, objects.get and media downloads:

- objects.list: `prefix`, `delimiter` (prefixes rolled up, each once), `maxResults` (items and
  prefixes together, at most 1,000), `pageToken` (a token only when more remain),
  `startOffset` (inclusive) and `endOffset` (exclusive) on full names, applied to the objects
  before they roll up into prefixes, and a prefix before `startOffset` left out even when some of
  its objects are in range (as fake-gcs-server does; the documentation does not say);
  `includeTrailingDelimiter` (no object here is named like a
  prefix, so it adds nothing). Names in UTF-8 byte order. `fields` (a partial response, as
  Cloud Storage answers one): `a,b(c,d),e/f` selects top-level keys and the keys of the
  resources under them (`items(name,size)`, `items/name`); without it, whole resources.
- objects.get: the resource; `alt=media` (and `/download/storage/v1/...`): the bytes, with
  `Range: bytes=a-b` answered 206.
- buckets.get: a bucket resource.

A family of objects is `PREFIX:COUNT[:EVERY:PER]`: COUNT entries `PREFIXf0000000`,
`PREFIXf0000001`…; with EVERY and PER, every EVERY-th entry (0, EVERY, 2·EVERY…) is a
subdirectory of PER objects `PREFIXf0000000/x000`… instead of an object. Every object's size
(its bytes are the first SIZE bytes of one fixed pattern), md5Hash, crc32c, generation, times and custom metadata (`i`, `j`) come from its place in
the formula (`Formula.resource`, `Formula.content`); a page costs the same at any COUNT (entries
are found by binary search, never by walking).

    python formula_server.py --port 9150 --bucket bench --family big/:100000 --family mix/:3000:3:40
    Formula(["mix/:3000:3:40"]).objects()   # (name, bytes, metadata) of every object, to upload elsewhere
"""
import argparse
import base64
import ctypes
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import google_crc32c
except ImportError:  # pragma: no cover - the venv has it (google-cloud-storage depends on it)
    google_crc32c = None

EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z


def upper_bound(s):
    """The least string after every string that starts with `s` (code point order = UTF-8 byte order)."""
    while s:
        c = ord(s[-1]) + 1
        if c == 0xD800:
            c = 0xE000
        if c <= 0x10FFFF:
            return s[:-1] + chr(c)
        s = s[:-1]
    return None


class Family:
    def __init__(self, spec):
        parts = spec.split(":")
        self.prefix = parts[0]
        self.count = int(parts[1])
        self.every = int(parts[2]) if len(parts) > 2 else 0
        self.per = int(parts[3]) if len(parts) > 3 else 0
        assert self.count <= 10_000_000 and self.per <= 1000

    def stem(self, i):
        return f"{self.prefix}f{i:07d}"

    def is_dir(self, i):
        return self.every > 0 and self.per > 0 and i % self.every == 0

    def name(self, i, j):
        return self.stem(i) if j is None else f"{self.stem(i)}/x{j:03d}"

    def first_j(self, i):
        return 0 if self.is_dir(i) else None

    def last_name(self, i):
        return self.name(i, self.per - 1 if self.is_dir(i) else None)

    def seek(self, key):
        """(i, j) of the first object whose name is >= key, or None."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.last_name(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == self.count:
            return None
        if not self.is_dir(lo):
            return (lo, None)
        a, b = 0, self.per
        while a < b:
            mid = (a + b) // 2
            if self.name(lo, mid) < key:
                a = mid + 1
            else:
                b = mid
        return (lo, a)

    def after(self, i, j):
        if j is not None and j + 1 < self.per:
            return (i, j + 1)
        if i + 1 < self.count:
            return (i + 1, self.first_j(i + 1))
        return None


class Formula:
    def __init__(self, specs, bucket="formula"):
        self.bucket = bucket
        self.families = sorted((Family(s) for s in specs), key=lambda f: f.prefix)
        for a, b in zip(self.families, self.families[1:]):
            assert not b.prefix.startswith(a.prefix), "family prefixes must not nest"

    # --- the formula ---------------------------------------------------------------------------
    @staticmethod
    def size(i, j):
        return 1 + (i * 7919 + (j or 0) * 104729) % 3000

    # Bytes depend on the size alone, so each size's hashes are computed once.
    PATTERN = bytes((k * 31 + k // 251) % 256 for k in range(4096))
    _hashes = {}

    def content(self, name, i, j):
        return self.PATTERN[:self.size(i, j)]

    def hashes(self, data):
        got = self._hashes.get(len(data))
        if got is None:
            md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
            crc = base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode() if google_crc32c else None
            got = self._hashes[len(data)] = (md5, crc)
        return got

    def resource(self, f, i, j, base=""):
        name = f.name(i, j)
        data = self.content(name, i, j)
        md5, crc = self.hashes(data)
        gen = 1_700_000_000_000_000 + i * 1000 + (j or 0)
        t = EPOCH + i + (j or 0)
        stamp = f"{_iso(t)}"
        r = {
            "kind": "storage#object",
            "id": f"{self.bucket}/{name}/{gen}",
            "name": name,
            "bucket": self.bucket,
            "generation": str(gen),
            "metageneration": "1",
            "contentType": "application/octet-stream",
            "storageClass": "STANDARD",
            "size": str(len(data)),
            "md5Hash": md5,
            "etag": base64.b64encode(gen.to_bytes(8, "big")).decode(),
            "timeCreated": stamp,
            "updated": stamp,
            "metadata": {"i": str(i)} if j is None else {"i": str(i), "j": str(j)},
        }
        if crc is not None:
            r["crc32c"] = crc
        quoted = urllib.parse.quote(name, safe="")
        r["selfLink"] = f"{base}/storage/v1/b/{self.bucket}/o/{quoted}"
        r["mediaLink"] = f"{base}/download/storage/v1/b/{self.bucket}/o/{quoted}?generation={gen}&alt=media"
        return r

    # A resource's keys in the order `render` writes them.
    KEYS = ("kind", "id", "name", "bucket", "generation", "metageneration", "contentType", "storageClass", "size",
            "md5Hash", "etag", "timeCreated", "updated", "metadata", "crc32c", "selfLink", "mediaLink")

    # Per key: its JSON text as a template over the values `render` makes.
    TEMPLATES = {
        "kind": '"storage#object"', "id": "{idq}", "name": "{qn}", "bucket": '"{bucket}"',
        "generation": '"{gen}"', "metageneration": '"1"', "contentType": '"application/octet-stream"',
        "storageClass": '"STANDARD"', "size": '"{size}"', "md5Hash": '"{md5}"', "etag": '"{etag}"',
        "timeCreated": '"{stamp}"', "updated": '"{stamp}"', "metadata": "{meta}", "crc32c": '"{crc}"',
        "selfLink": '"{base}/storage/v1/b/{bucket}/o/{quoted}"',
        "mediaLink": '"{base}/download/storage/v1/b/{bucket}/o/{quoted}?generation={gen}&alt=media"',
    }
    _templates = {}

    def render(self, f, i, j, base, keys=KEYS):
        """`resource` as JSON text of the keys `keys` (in `KEYS` order), made without building the
        dict, and without the values no key asks for (a page of 1,000 costs little, so the server
        is not what a listing waits for)."""
        t = self._templates.get(keys)
        if t is None:
            text = "{{" + ", ".join(f'"{k}": {self.TEMPLATES[k]}' for k in keys) + "}}"
            t = self._templates[keys] = (text, {w for k in keys for w in re.findall(r"{(\w+)}", self.TEMPLATES[k])})
        text, needs = t
        name = f.name(i, j)
        size = self.size(i, j)
        gen = 1_700_000_000_000_000 + i * 1000 + (j or 0)
        v = {"bucket": self.bucket, "gen": gen, "size": size, "base": base}
        if "qn" in needs:
            v["qn"] = json.dumps(name)
        if "idq" in needs:
            v["idq"] = json.dumps(f"{self.bucket}/{name}/{gen}")
        if "md5" in needs or "crc" in needs:
            v["md5"], v["crc"] = self.hashes(self.PATTERN[:size])
            if v["crc"] is None and "crc32c" in keys:  # not known: the key is left out
                return self.render(f, i, j, base, tuple(k for k in keys if k != "crc32c"))
        if "etag" in needs:
            v["etag"] = base64.b64encode(gen.to_bytes(8, "big")).decode()
        if "stamp" in needs:
            v["stamp"] = _iso(EPOCH + i + (j or 0))
        if "meta" in needs:
            v["meta"] = f'{{"i": "{i}"}}' if j is None else f'{{"i": "{i}", "j": "{j}"}}'
        if "quoted" in needs:
            v["quoted"] = urllib.parse.quote(name, safe="")
        return text.format(**v)

    def objects(self):
        """(name, bytes, custom metadata) of every object, in order (to upload them elsewhere)."""
        for f in self.families:
            pos = (0, f.first_j(0)) if f.count else None
            while pos:
                i, j = pos
                name = f.name(i, j)
                yield name, self.content(name, i, j), self.resource(f, i, j)["metadata"]
                pos = f.after(i, j)

    # --- lookups ---------------------------------------------------------------------------------
    def seek(self, key):
        """(family, i, j) of the first object whose name is >= key, or None."""
        for f in self.families:
            if f.count == 0 or f.last_name(f.count - 1) < key:
                continue
            got = f.seek(key)
            if got:
                return (f, *got)
        return None

    def after(self, pos):
        f, i, j = pos
        got = f.after(i, j)
        if got:
            return (f, *got)
        k = self.families.index(f) + 1
        while k < len(self.families):
            g = self.families[k]
            if g.count:
                return (g, 0, g.first_j(0))
            k += 1
        return None

    def find(self, name):
        pos = self.seek(name)
        if pos and pos[0].name(pos[1], pos[2]) == name:
            return pos
        return None

    def list(self, q, base=""):
        top, sub = parse_fields(q.get("fields"))
        item_keys = None  # whole resources (KEYS)
        if top is not None and "items" in top and sub.get("items"):
            item_keys = tuple(k for k in self.KEYS if k in sub["items"])

        def shown(key):
            return top is None or key in top
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter") or None
        max_results = max(1, min(int(q.get("maxResults", "1000")), 1000))
        start, end = q.get("startOffset"), q.get("endOffset")
        lower, exclusive = prefix, False
        if start is not None and start > lower:
            lower = start
        token = q.get("pageToken")
        if token:
            kind, key = _untoken(token)
            resume = key if kind == "i" else upper_bound(key)
            if resume is None:
                return b'{"kind": "storage#objects"}'
            if resume > lower or (resume == lower and kind == "i"):
                lower, exclusive = resume, kind == "i"
        pos = self.seek(lower)
        if pos and exclusive and pos[0].name(pos[1], pos[2]) == lower:
            pos = self.after(pos)
        items, prefixes, last = [], [], None

        def within(name):
            return name.startswith(prefix) and (end is None or name < end)

        while pos:
            f, i, j = pos
            name = f.name(i, j)
            if not within(name):
                pos = None
                break
            if len(items) + len(prefixes) == max_results:
                break
            if delimiter:
                k = name.find(delimiter, len(prefix))
                if k >= 0:
                    cp = name[:k + len(delimiter)]
                    if start is None or cp >= start:
                        prefixes.append(cp)
                    last = ("p", cp)
                    ub = upper_bound(cp)
                    pos = self.seek(ub) if ub else None
                    continue
            items.append(self.render(f, i, j, base, item_keys or self.KEYS))
            last = ("i", name)
            pos = self.after(pos)
        parts = ['"kind": "storage#objects"'] if shown("kind") else []
        if items and shown("items"):
            parts.append('"items": [' + ", ".join(items) + "]")
        if prefixes and shown("prefixes"):
            parts.append('"prefixes": ' + json.dumps(prefixes))
        if pos and last and shown("nextPageToken"):
            parts.append('"nextPageToken": ' + json.dumps(_token(*last)))
        return ("{" + ", ".join(parts) + "}").encode()


def parse_fields(text):
    """A `fields` selection: (top-level keys, {key: the keys selected under it}); (None, {}) for
    none. `items(name,size),prefixes` → ({items, prefixes}, {items: {name, size}}); `items/name`
    is `items(name)`; deeper selections select the whole key under the first level."""
    if not text:
        return None, {}
    top, sub, depth, word, parts = set(), {}, 0, "", []
    for c in text + ",":
        if c == "," and depth == 0:
            parts.append(word.strip())
            word = ""
            continue
        depth += (c == "(") - (c == ")")
        word += c
    for part in filter(None, parts):
        head, _, rest = part.partition("/")
        if "(" in head:
            head, _, inner = head.partition("(")
            rest = inner.rstrip(")")
        top.add(head)
        if rest:
            sub.setdefault(head, set()).update(r.split("/")[0].split("(")[0] for r in rest.split(","))
        else:
            sub[head] = None  # the whole key
    return top, sub


_DAYS = {}


def _iso(t):
    day, rest = divmod(t, 86400)
    date = _DAYS.get(day)
    if date is None:
        date = _DAYS[day] = time.strftime("%Y-%m-%d", time.gmtime(day * 86400))
    h, rest = divmod(rest, 3600)
    return f"{date}T{h:02d}:{rest // 60:02d}:{rest % 60:02d}.000Z"


def _token(kind, key):
    return base64.urlsafe_b64encode((kind + key).encode()).decode()


def _untoken(token):
    raw = base64.urlsafe_b64decode(token.encode()).decode()
    return raw[0], raw[1:]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    formula: Formula = None
    counts = None

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json; charset=UTF-8", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status, message):
        self._send(status, {"error": {"code": status, "message": message,
                                      "errors": [{"message": message, "reason": "notFound" if status == 404 else "invalid"}]}})

    def _count(self, kind):
        with self.server.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        host = self.headers.get("Host", "127.0.0.1")
        base = f"http://{host}"
        fm = self.formula
        if url.path == "/__stats":
            return self._send(200, dict(self.counts))
        # Also without /storage/v1 (a client given the endpoint as its base path: rclone).
        m = re.fullmatch(r"(/download)?(?:/storage/v1)?/b/([^/]+)(/o(?:/(.+))?)?", url.path)
        if not m or urllib.parse.unquote(m.group(2)) != fm.bucket:
            return self._error(404, "No such bucket or path")
        download, objects, enc_name = m.group(1), m.group(3), m.group(4)
        if not objects:
            self._count("bucket")
            return self._send(200, {"kind": "storage#bucket", "id": fm.bucket, "name": fm.bucket,
                                    "location": "US", "storageClass": "STANDARD",
                                    "timeCreated": _iso(EPOCH), "updated": _iso(EPOCH), "metageneration": "1"})
        if enc_name is None:
            self._count("list")
            try:
                return self._send(200, fm.list(q, base))  # JSON text already
            except (ValueError, UnicodeDecodeError) as e:
                return self._error(400, f"Invalid argument: {e}")
        name = urllib.parse.unquote(enc_name)
        pos = fm.find(name)
        if not pos:
            self._count("missing")
            return self._error(404, f"No such object: {fm.bucket}/{name}")
        f, i, j = pos
        if download or q.get("alt") == "media":
            self._count("media")
            data = fm.content(name, i, j)
            rng = self.headers.get("Range")
            if rng:
                mm = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                if mm:
                    a = int(mm.group(1))
                    b = int(mm.group(2)) if mm.group(2) else len(data) - 1
                    if a >= len(data):
                        return self._send(416, b"", "text/plain", [("Content-Range", f"bytes */{len(data)}")])
                    b = min(b, len(data) - 1)
                    return self._send(206, data[a:b + 1], "application/octet-stream",
                                      [("Content-Range", f"bytes {a}-{b}/{len(data)}")])
            r = fm.resource(f, i, j, base)
            return self._send(200, data, "application/octet-stream",
                              [("X-Goog-Generation", r["generation"]), ("X-Goog-Metageneration", "1"),
                               ("X-Goog-Hash", f"crc32c={r.get('crc32c', '')},md5={r['md5Hash']}"),
                               ("X-Goog-Stored-Content-Length", str(len(data)))])
        self._count("metadata")
        r = fm.resource(f, i, j, base)
        top, _ = parse_fields(q.get("fields"))
        return self._send(200, r if top is None else {k: v for k, v in r.items() if k in top})

    do_HEAD = do_GET

    def _refuse(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._error(403, "this server is read-only: its objects come from a formula")

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5; the latency proxy opens an upstream connection
    # per request, and a lister has 16 requests in flight: a full backlog drops a connection,
    # which the kernel retries a second later.
    request_queue_size = 128


def serve(formula, port, host="127.0.0.1"):
    handler = type("FormulaHandler", (Handler,), {"formula": formula, "counts": {}})
    server = _Server((host, port), handler)
    server.daemon_threads = True
    server.lock = threading.Lock()
    return server


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bucket", default="formula")
    ap.add_argument("--family", action="append", required=True, help="PREFIX:COUNT[:EVERY:PER]")
    ap.add_argument("--processes", type=int, default=1,
                    help="processes serving the one socket (a real server answers requests in parallel; "
                         "one Python process answers one at a time)")
    args = ap.parse_args(argv)
    server = serve(Formula(args.family, args.bucket), args.port)
    children = []
    for _ in range(max(1, args.processes) - 1):
        pid = os.fork()
        if pid == 0:
            # Dies with its parent.
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            server.serve_forever()
            os._exit(0)
        children.append(pid)

    def stop(*_):
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    print(f"formula server on 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        stop()


if __name__ == "__main__":
    sys.exit(main())
