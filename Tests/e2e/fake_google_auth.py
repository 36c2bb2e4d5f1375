"""Google's token endpoints as one local HTTP server, in front of a Cloud Storage test server
(docs/CREDENTIALS.md; docs/TESTING.md): the OAuth token endpoint (`/token`: the refresh_token and
JWT-bearer grants), STS (`/sts`: token exchange, and the refresh_token grant of workforce
sign-ins), IAM Credentials (`/v1/projects/-/serviceAccounts/EMAIL:generateAccessToken`), a
subject-token URL (`/subject`), a token URL (`/token-url`) and the metadata server
(`/computeMetadata/v1/...`). Every other request is the auth-checking proxy's: forwarded to
`backend` when its bearer token is live (minted here, not expired), else answered 401 as Cloud
Storage answers it. With `requester_pays`, a request without `userProject=` is answered 400 as a
requester-pays bucket answers it.

Every request is recorded (method, path, headers, body), so a test can compare what bucketfs
sends with what google-auth sends. `python fake_google_auth.py --backend URL` runs it as a process."""
import base64
import http.client
import json
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AUTH_PATHS = ("/token", "/sts", "/subject", "/token-url", "/computeMetadata/", "/v1/projects/")


class FakeGoogleAuth:
    def __init__(self, backend=None, lifetime=3600, port=0):
        self.backend = urllib.parse.urlsplit(backend) if backend else None
        self.lifetime = lifetime
        self.lock = threading.Lock()
        self.records = []
        self.minted = {}          # token -> expiry (time.time())
        self.counter = 0
        self.mints = {}           # kind -> count
        self.stated_lifetimes = []  # of IAM tokens, as their expireTime states them
        self.refresh_tokens = {"refresh-1"}
        self.client_secret = "secret-1"
        self.wf_client = "wf-client"
        self.subject_tokens = {"subject-1"}
        self.subject_body = "subject-1"
        self.sts_status = None
        self.requester_pays = False
        self.unauthorized = 0     # storage requests answered 401
        self.proxied = 0          # storage requests forwarded
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _body(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self):
                body = self._body()
                fake._serve(self, body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # --- state
    def reset(self):
        """Forgets the records and restarts the token numbers (so two clients' runs mint the same tokens)."""
        with self.lock:
            self.records = []
            self.counter = 0
            self.mints = {}
            self.stated_lifetimes = []

    def auth_records(self):
        with self.lock:
            return [r for r in self.records if r["path"].startswith(AUTH_PATHS)]

    def storage_records(self):
        with self.lock:
            return [r for r in self.records if not r["path"].startswith(AUTH_PATHS)]

    def live(self, token):
        with self.lock:
            return self.minted.get(token, 0) > time.time()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _mint(self, kind):
        with self.lock:
            self.counter += 1
            self.mints[kind] = self.mints.get(kind, 0) + 1
            t = f"{kind}-token-{self.counter}"
            self.minted[t] = time.time() + self.lifetime
            return t

    # --- answers
    @staticmethod
    def _send(h, status, body, content_type="application/json", headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _serve(self, h, body):
        split = urllib.parse.urlsplit(h.path)
        path = split.path
        rec = {"method": h.command, "path": path, "query": split.query, "headers": [(k, v) for k, v in h.headers.items()], "body": body,
               "time": time.monotonic()}
        with self.lock:
            self.records.append(rec)
        if path.startswith(AUTH_PATHS):
            status, answer, ctype = self._auth(h, path, body)
            return self._send(h, status, answer, ctype)
        return self._proxy(h, split, body)

    def _auth(self, h, path, body):
        form = dict(urllib.parse.parse_qsl(body.decode(errors="replace"))) if body else {}
        ctype = (h.headers.get("Content-Type") or "").split(";")[0]
        life = self.lifetime
        if h.command == "POST" and path == "/token":
            if ctype != "application/x-www-form-urlencoded":
                return 400, {"error": "invalid_request"}, "application/json"
            grant = form.get("grant_type")
            if grant == "refresh_token":
                if form.get("client_secret") != self.client_secret or not form.get("client_id"):
                    return 401, {"error": "invalid_client"}, "application/json"
                if form.get("refresh_token") not in self.refresh_tokens:
                    return 400, {"error": "invalid_grant", "error_description": "Token has been expired or revoked."}, "application/json"
                return 200, {"access_token": self._mint("user"), "expires_in": life, "token_type": "Bearer"}, "application/json"
            if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
                if len(form.get("assertion", "").split(".")) != 3:
                    return 400, {"error": "invalid_grant"}, "application/json"
                return 200, {"access_token": self._mint("sa"), "expires_in": life, "token_type": "Bearer"}, "application/json"
            return 400, {"error": "unsupported_grant_type"}, "application/json"
        if h.command == "POST" and path == "/sts":
            if self.sts_status:
                return self.sts_status, {"error": "invalid_request", "error_description": "The audience in the subject token does not match"}, "application/json"
            if form.get("grant_type") == "refresh_token":
                basic = "Basic " + base64.b64encode(f"{self.wf_client}:{self.client_secret}".encode()).decode()
                if h.headers.get("Authorization") != basic:
                    return 401, {"error": "invalid_client"}, "application/json"
                if form.get("refresh_token") not in self.refresh_tokens:
                    return 400, {"error": "invalid_grant"}, "application/json"
                return 200, {"access_token": self._mint("wf"), "expires_in": life}, "application/json"
            if (form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" or not form.get("audience")
                    or form.get("subject_token") not in self.subject_tokens):
                return 400, {"error": "invalid_grant", "error_description": "subject token refused"}, "application/json"
            return 200, {"access_token": self._mint("sts"), "expires_in": life, "token_type": "Bearer",
                         "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}, "application/json"
        if h.command == "POST" and path.endswith(":generateAccessToken"):
            auth = h.headers.get("Authorization", "")
            if not auth.startswith("Bearer ") or not self.live(auth[7:]):
                return 401, {"error": {"code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"}}, "application/json"
            # expireTime has whole seconds (as Google's and as google-auth parses it): the token
            # lives until the next whole second after `lifetime`, exactly as stated.
            now = time.time()
            expires = float(int(now + life) + 1)
            token = self._mint("iam")
            with self.lock:
                self.minted[token] = expires
                self.stated_lifetimes.append(expires - now)
            stamp = datetime.fromtimestamp(expires, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            return 200, {"accessToken": token, "expireTime": stamp}, "application/json"
        if h.command == "POST" and path == "/tokeninfo":
            # Google's tokeninfo: expires_in and exp as strings; a token it does not know, a 400.
            token = form.get("access_token", "")
            with self.lock:
                expiry = self.minted.get(token, 0)
            now = time.time()
            if expiry <= now:
                return 400, {"error": "invalid_token", "error_description": "Invalid Value"}, "application/json"
            return 200, {"azp": "fake", "aud": "fake", "scope": "https://www.googleapis.com/auth/devstorage.full_control",
                         "exp": str(int(expiry)), "expires_in": str(int(expiry - now)), "email": "holder@p.iam.gserviceaccount.com",
                         "email_verified": "true", "access_type": "online"}, "application/json"
        if h.command == "GET" and path == "/subject":
            return 200, self.subject_body.encode(), "text/plain"
        if h.command == "GET" and path == "/token-url":
            return 200, {"access_token": self._mint("url"), "expires_in": life}, "application/json"
        if h.command == "GET" and path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if h.headers.get("Metadata-Flavor") != "Google":
                return 403, {"error": "Missing Metadata-Flavor:Google header."}, "application/json"
            return 200, {"access_token": self._mint("gce"), "expires_in": life, "token_type": "Bearer"}, "application/json"
        if h.command == "GET" and path == "/computeMetadata/v1/instance/service-accounts/default/email":
            return 200, b"gce-default@p.iam.gserviceaccount.com", "text/plain"
        return 404, {"error": "not_found"}, "application/json"

    def _proxy(self, h, split, body):
        auth = h.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not self.live(auth[7:]):
            with self.lock:
                self.unauthorized += 1
            return self._send(h, 401, {"error": {"code": 401, "message": "Invalid Credentials",
                                                 "errors": [{"message": "Invalid Credentials", "domain": "global", "reason": "authError",
                                                             "locationType": "header", "location": "Authorization"}]}},
                              headers=[("WWW-Authenticate", 'Bearer realm="https://accounts.google.com/"')])
        if self.requester_pays and "userProject=" not in split.query:
            return self._send(h, 400, {"error": {"code": 400, "message": "Bucket is a requester pays bucket but no user project provided.",
                                                 "errors": [{"message": "Bucket is a requester pays bucket but no user project provided.",
                                                             "domain": "global", "reason": "required"}]}})
        if not self.backend:
            return self._send(h, 200, {"kind": "storage#objects"})
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "transfer-encoding", "connection", "authorization")}
        headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(self.backend.hostname, self.backend.port, timeout=60)
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            keep = [(k, v) for k, v in resp.getheaders()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-type", "date", "server")]
            with self.lock:
                self.proxied += 1
            # The backend's Location (a resumable session) points at it: through us instead.
            keep = [(k, v.replace(f"{self.backend.scheme}://{self.backend.netloc}", self.url)) for k, v in keep]
            h.send_response(resp.status)
            h.send_header("Content-Type", resp.getheader("Content-Type") or "application/octet-stream")
            h.send_header("Content-Length", str(len(data)))
            for k, v in keep:
                h.send_header(k, v)
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(data)
        finally:
            conn.close()


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--backend")
    p.add_argument("--lifetime", type=int, default=3600)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    f = FakeGoogleAuth(a.backend, a.lifetime, a.port)
    print(f"fake-google-auth listening on 127.0.0.1:{f.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        f.stop()
        sys.exit(0)
