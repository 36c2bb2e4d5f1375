"""A few lines of plain HTTP against Tests/e2e/firebase_server.py (urllib only), for the tests
that check the server itself and for seeding what the mount tests read."""
import json
import urllib.error
import urllib.parse
import urllib.request

BUCKET = "bucketfs-test.appspot.com"


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return f"Resp({self.status}, {self.body[:200]!r})"


def request(base, method, path, body=None, headers=None, token=None):
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Firebase " + token
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json; charset=utf-8")
    url = path if path.startswith("http") else base + path
    r = urllib.request.Request(url, data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return Resp(resp.status, dict(resp.headers), resp.read())
    except urllib.error.HTTPError as e:
        return Resp(e.code, dict(e.headers), e.read())


def enc(name):
    return urllib.parse.quote(name, safe="")


def obj_path(name, bucket=BUCKET):
    return f"/v0/b/{enc(bucket)}/o/{enc(name)}"


def sign_in(base, email, password, key="test-key"):
    return request(base, "POST", f"/identitytoolkit.googleapis.com/v1/accounts:signInWithPassword?key={key}",
                   {"email": email, "password": password, "returnSecureToken": True})


def upload(base, name, data, token=None, content_type="application/octet-stream", metadata=None, bucket=BUCKET):
    """A multipart upload as the JS SDK sends it (§5)."""
    b = "bucketfs-test-boundary"
    meta = {"name": name, "contentType": content_type}
    if metadata is not None:
        meta["metadata"] = metadata
    body = (f"--{b}\r\nContent-Type: application/json; charset=utf-8\r\n\r\n{json.dumps(meta)}\r\n"
            f"--{b}\r\nContent-Type: {content_type}\r\n\r\n").encode() + data + f"\r\n--{b}--".encode()
    return request(base, "POST", f"/v0/b/{enc(bucket)}/o?name={enc(name)}", body,
                   {"X-Goog-Upload-Protocol": "multipart", "Content-Type": f"multipart/related; boundary={b}"}, token)
