"""A Firebase Storage v0 + Firebase Auth REST test server on 127.0.0.1, for the real-mount tests
(Tests/e2e/test_firebase.py), the pyrebase cross-check (test_firebase_pyrebase.py) and
Scripts/bench-firebase.sh. It serves the protocol of Tests/FirebaseProtocol/cases.json (played
against it by test_firebase_protocol_cases.py, and against the Swift FirebaseTestServer by swift
test; the §N below are sections of the v0 protocol description those cases were written from)
and never behaves better than the real service:

- Storage (§0-§8), under /v0/b/BUCKET/o[/ENCODED-NAME]: list (prefix must be "" or end in "/",
  delimiter "/", maxResults 1-1000, items carry only name and bucket, `//` and trailing-`/` names
  hidden), get metadata (numbers as strings, RFC 3339 times with milliseconds, a download token
  minted by an upload, or by the first GET, metadata or media, of an object written behind the
  API, which bumps metageneration and `updated`), PATCH (only the writable
  fields; custom metadata merges, null deletes a key, `"metadata": null` clears; also PUT with
  X-HTTP-Method-Override: PATCH), download (alt=media; one Range as 206, a range past the end the
  whole object in the emulator flavour and 416 in production; `token=` skips the rules
  only when it is one of the object's download tokens), uploads (multipart; resumable with
  start / upload / finalize / query / cancel, the offset of every chunk checked against what the
  session holds, chunks other than the last a multiple of 256 KiB, the declared length checked at
  finalize, a repeated finalize replaying its answer; media upload with no protocol header),
  delete (204). No copy, no preconditions: `ifGenerationMatch` and friends are ignored (§3, §10).
  `generation=` on a download is ignored too (v0 has no such parameter), so a client must check
  the `x-goog-generation` header itself.
- Rules (§1, §10.4): a small model of Security Rules. A ruleset is
  `{"version": 2, "rules": [{"match": "users/{uid}/{rest=**}", "allow": {"read,write": "owner"}}]}`.
  Methods: get, list, create, update, delete; `read` = get + list, `write` = create + update +
  delete. `{x}` matches one segment, `{x=**}` the rest (zero or more segments under version 2, one
  or more under version 1). A request is allowed when any matching rule allows its method.
  Conditions are terms joined by `&&`: `true`, `false`, `auth` (signed in), `owner` (auth.uid equals
  the `{uid}` of the match), `uid==X`, `provider==X` / `provider!=X` (password, custom, anonymous),
  `claim:NAME` (a custom claim that is true), `size<N` (request.resource.size; false on reads, as
  rules that read a null request.resource deny). Under version 1 every list is denied. With no
  ruleset loaded everything is denied. Rules are evaluated before existence, so a denied request on
  a missing name is 403, never 404 (§6, §10.4); a list is evaluated at its prefix without the
  trailing slash.
- Auth (§9): accounts:signInWithPassword, accounts:signInWithCustomToken, accounts:signUp
  (anonymous, or email + password), securetoken v1/token (form or JSON body), both under
  /v1/... and under the emulator form /identitytoolkit.googleapis.com/v1/... and
  /securetoken.googleapis.com/v1/token. The API key (`?key=` or x-goog-api-key) is required and,
  when the server was given one, must be it. ID tokens are JWTs signed by this server (HS256; the
  client only decodes them) with the production claims (iss, aud, user_id, sub, iat, exp,
  auth_time, email, firebase.sign_in_provider) and `token_lifetime` seconds of life (default 3600,
  settable down to 1 s so refresh is exercised); an expired, unknown or forged ID token is 401 on
  storage (the server does not accept unsigned tokens, unlike the emulator). Custom tokens must be
  signed: HS256 by this server (admin hook /__admin/customToken) or RS256 by a service account the
  test registered (what the Admin SDK and pyrebase mint). Refresh tokens are revocable
  (TOKEN_EXPIRED) and stop working for a disabled user (USER_DISABLED); revoking does not end ID
  tokens already issued (as in production), `expire` does.
- Flavors: "emulator" (default) has the quirks §1, §2, §8 and §10.9 name: 404 bodies are plain
  text `Not Found`, crc32c is a decimal string, list
  pages always carry both arrays, names sort as JavaScript sorts them (UTF-16 code units),
  `maxResults` counts items only and every page repeats all prefixes, `nextPageToken` is the name
  of the next item, the create/update rule of a resumable upload is evaluated at finalize, the
  error messages are the emulator's. "production": JSON 404s ("Not Found."), base64 crc32c, empty arrays left out of list pages, pages
  counting prefixes and items together with opaque page tokens, "Permission denied." and resumable
  uploads also checked at start. Both show an object's missing contentEncoding as "identity" and
  give an upload without a contentType `application/octet-stream`; a v0 upload without a
  contentDisposition stores `inline` (emulator) or `inline; filename*=utf-8''NAME` (production),
  as firebase-tools' storage emulator and recorded production answers do. The emulator's leniencies that would make a client look better
  than it is (unsigned tokens, `owner` tokens, ignored upload offsets) are not reproduced.

Tokens never reach this server's log. The server records what a client must never do (a request
carrying an object's download token, an upload or PATCH that tries to set download tokens) in
`violations`, for tests to assert on.

In-process:  srv = FirebaseServer(port=0).start(); srv.create_user("a@x", "pw"); srv.stop()
As a program: python firebase_server.py --port 9221 --bucket b --rules rules.json --user a@x:pw
Admin hook (JSON, for tests and scripts): POST /__admin/users {email,password,uid?},
POST /__admin/customToken {uid, claims?}, PUT /__admin/rules {version, rules} (null: none loaded),
POST /__admin/revoke {uid}, POST /__admin/disable {uid}, POST /__admin/expire {uid?},
PUT /__admin/config {token_lifetime?, flavor?}, POST /__admin/buckets {name},
POST /__admin/objects [{bucket,name,data|data_b64,contentType?,metadata?}...],
GET /__admin/object?bucket=B&name=N, GET /__admin/stats, GET /__admin/violations,
GET /__admin/requests, POST /__admin/reset.
"""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import re
import secrets
import signal
import socketserver
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timezone

try:
    import google_crc32c  # installed with google-cloud-storage (Scripts/setup.sh)

    def crc32c(data):
        return google_crc32c.value(bytes(data))
except ImportError:  # pragma: no cover - pure Python fallback
    _CRC_TABLE = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
        _CRC_TABLE.append(_c)

    def crc32c(data):
        c = 0xFFFFFFFF
        for b in data:
            c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


CHUNK_GRANULARITY = 256 * 1024
WRITABLE = ("contentType", "cacheControl", "contentDisposition", "contentEncoding", "contentLanguage")
CUSTOM_TOKEN_AUD = "https://identitytoolkit.googleapis.com/google.identity.identitytoolkit.v1.IdentityToolkit"
TOKEN_KEY = "firebaseStorageDownloadTokens"
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def rfc3339(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class AuthError(Exception):
    """A Firebase Auth REST error: HTTP status and the reason code in `message`."""

    def __init__(self, message, status=400, extra=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra or {}


class HTTPError(Exception):
    def __init__(self, status, message, headers=None, text=False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []
        self.text = text


# --- rules --------------------------------------------------------------------------------------

class Rules:
    METHODS = ("get", "list", "create", "update", "delete")
    GROUPS = {"read": ("get", "list"), "write": ("create", "update", "delete")}

    def __init__(self, spec):
        self.version = int(spec.get("version", 2))
        self.rules = []
        for r in spec.get("rules", []):
            pattern = [s for s in r["match"].strip("/").split("/") if s != ""]
            allow = {}
            for methods, cond in r.get("allow", {}).items():
                for m in methods.replace(" ", "").split(","):
                    for mm in self.GROUPS.get(m, (m,)):
                        if mm not in self.METHODS:
                            raise ValueError(f"unknown rules method {m!r}")
                        allow.setdefault(mm, []).append(self._parse(cond))
            self.rules.append((pattern, allow))

    @staticmethod
    def _parse(cond):
        terms = [t.strip() for t in str(cond).split("&&")]
        for t in terms:
            if not re.fullmatch(r"true|false|auth|owner|uid==\S+|provider(==|!=)\S+|claim:\S+|size<\d+", t):
                raise ValueError(f"unknown rules condition {t!r}")
        return terms

    def _match(self, pattern, segs, captures):
        if not pattern:
            return captures if not segs else None
        head = pattern[0]
        m = re.fullmatch(r"\{(\w+)=\*\*\}|\*\*", head)
        if m:
            least = 0 if self.version >= 2 else 1
            if len(segs) < least:
                return None
            if m.group(1):
                captures = {**captures, m.group(1): "/".join(segs)}
            return captures if len(pattern) == 1 else None
        if not segs:
            return None
        v = re.fullmatch(r"\{(\w+)\}", head)
        if v:
            return self._match(pattern[1:], segs[1:], {**captures, v.group(1): segs[0]})
        if head != segs[0]:
            return None
        return self._match(pattern[1:], segs[1:], captures)

    def allows(self, method, path, auth, resource=None):
        if method == "list" and self.version < 2:
            return False
        segs = [s for s in path.split("/")] if path else []
        for pattern, allow in self.rules:
            caps = self._match(pattern, segs, {})
            if caps is None:
                continue
            for terms in allow.get(method, []):
                if all(self._term(t, caps, auth, resource) for t in terms):
                    return True
        return False

    @staticmethod
    def _term(t, caps, auth, resource):
        if t == "true":
            return True
        if t == "false":
            return False
        if t == "auth":
            return auth is not None
        if auth is None:
            return False
        if t == "owner":
            return "uid" in caps and caps["uid"] == auth["uid"]
        if t.startswith("uid=="):
            return auth["uid"] == t[5:]
        if t.startswith("provider=="):
            return auth["provider"] == t[10:]
        if t.startswith("provider!="):
            return auth["provider"] != t[10:]
        if t.startswith("claim:"):
            return auth["claims"].get(t[6:]) is True
        if t.startswith("size<"):
            return resource is not None and resource["size"] < int(t[5:])
        return False


def _disposition_header(obj):
    """A download's Content-Disposition: the stored one, with the file name when it has none."""
    d = obj.props.get("contentDisposition", "inline")
    if "filename" in d:
        return d
    return d + "; filename*=utf-8''" + urllib.parse.quote(obj.name.rsplit("/", 1)[-1], safe="")


# --- state --------------------------------------------------------------------------------------

class StoredObject:
    def __init__(self, bucket, name, data, generation, meta, now):
        self.bucket = bucket
        self.name = name
        self.data = bytes(data)
        self.generation = generation
        self.metageneration = 1
        self.time_created = now
        self.updated = now
        self.md5 = base64.b64encode(hashlib.md5(self.data).digest()).decode()
        self.crc = crc32c(self.data)
        self.props = {k: meta.get(k) for k in WRITABLE if meta.get(k) is not None}
        self.props.setdefault("contentType", "application/octet-stream")
        self.custom = {str(k): str(v) for k, v in (meta.get("metadata") or {}).items() if v is not None}
        self.tokens = []


class FirebaseServer:
    def __init__(self, host="127.0.0.1", port=0, buckets=("bucketfs-test.appspot.com",), project="demo-bucketfs",
                 flavor="emulator", token_lifetime=3600, api_key=None, rules=None, log=None):
        self.host = host
        self.port = port
        self.project = project
        self.flavor = flavor
        self.token_lifetime = token_lifetime
        self.api_key = api_key
        self.secret = secrets.token_bytes(32)
        self.lock = threading.RLock()
        self.buckets = {b: {} for b in buckets}
        self.rules = Rules(rules) if rules is not None else None
        self.users = {}          # uid -> {"uid","email","password","disabled","provider","claims"}
        self.by_email = {}
        self.refresh_tokens = {}  # token -> {"uid","provider","revoked"}
        self.id_tokens = {}       # token -> {"uid","exp"} (issued here; expire() shortens exp)
        self.service_accounts = {}  # email -> (n, e)
        self.uploads = {}         # upload_id -> session dict
        self.last_generation = 0
        self.violations = []
        self.requests = []        # (method, path, status, auth kind) — never a token
        self.finalized = {}       # (bucket, name) -> objects stored under that name (finalized uploads)
        self.stats = {"requests": 0, "list": 0, "get": 0, "media": 0, "upload": 0, "patch": 0, "delete": 0,
                      "auth": 0, "refresh": 0, "401": 0, "403": 0, "most_at_once": 0}
        self.in_flight = 0         # storage requests being answered now ("most_at_once": the peak)
        self.log = log
        self.httpd = None
        # Seconds each storage request waits before it is answered (a test's latency; 0: none).
        self.latency = 0.0

    # --- lifecycle ---

    def start(self):
        server = self

        class Handler(_Handler):
            srv = server

        class HTTPD(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 256

        self.httpd = HTTPD((self.host, self.port), Handler)
        self.port = self.httpd.server_address[1]
        # A short poll: stop() waits for it, and the case runner starts and stops a server per case.
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True, name="firebase-server").start()
        return self

    def stop(self):
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    @property
    def hostport(self):
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self):
        return f"http://{self.hostport}"

    # --- admin (also reached through /__admin/...) ---

    def set_rules(self, spec):
        with self.lock:
            self.rules = Rules(spec) if spec is not None else None

    def add_bucket(self, name):
        with self.lock:
            self.buckets.setdefault(name, {})

    def create_user(self, email=None, password=None, uid=None, provider="password", claims=None):
        with self.lock:
            if email and email.lower() in self.by_email:
                raise AuthError("EMAIL_EXISTS")
            uid = uid or b64url(secrets.token_bytes(21))[:28]
            u = {"uid": uid, "email": email, "password": password, "disabled": False, "provider": provider,
                 "claims": dict(claims or {})}
            self.users[uid] = u
            if email:
                self.by_email[email.lower()] = uid
            return uid

    def set_password(self, uid, password):
        with self.lock:
            self.users[uid]["password"] = password

    def disable_user(self, uid, disabled=True):
        with self.lock:
            self.users[uid]["disabled"] = disabled

    def revoke(self, uid):
        """Revokes the user's refresh tokens (ID tokens already issued stay valid until they expire)."""
        with self.lock:
            for t in self.refresh_tokens.values():
                if t["uid"] == uid:
                    t["revoked"] = True

    def expire(self, uid=None):
        """Ends the ID tokens issued so far (of one user, or all): the next storage request with one is 401."""
        with self.lock:
            now = time.time()
            for t in self.id_tokens.values():
                if uid is None or t["uid"] == uid:
                    t["exp"] = min(t["exp"], now - 1)

    def custom_token(self, uid, claims=None, lifetime=3600):
        now = int(time.time())
        payload = {"iss": "test-server", "sub": "test-server", "aud": CUSTOM_TOKEN_AUD, "uid": uid,
                   "iat": now, "exp": now + lifetime}
        if claims:
            payload["claims"] = claims
        return self._sign_hs256(payload)

    def trust_service_account(self, email, n, e=65537):
        """Custom tokens signed (RS256) by this key, with iss = email, are accepted."""
        with self.lock:
            self.service_accounts[email] = (int(n), int(e))

    def put_object(self, bucket, name, data, content_type=None, metadata=None, **props):
        with self.lock:
            meta = dict(props)
            if content_type:
                meta["contentType"] = content_type
            if metadata:
                meta["metadata"] = metadata
            return self._store(bucket, name, data if isinstance(data, bytes) else data.encode(), meta)

    def get_object(self, bucket, name):
        with self.lock:
            return self.buckets.get(bucket, {}).get(name)

    def object_names(self, bucket):
        with self.lock:
            return sorted(self.buckets.get(bucket, {}))

    def reset_stats(self):
        with self.lock:
            for k in self.stats:
                self.stats[k] = 0
            self.requests = []

    def snapshot_stats(self):
        with self.lock:
            return dict(self.stats)

    # --- tokens ---

    def _sign_hs256(self, payload):
        head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "bucketfs-test"}).encode())
        body = b64url(json.dumps(payload, separators=(",", ":")).encode())
        sig = hmac.new(self.secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{b64url(sig)}"

    def _verify_jwt(self, token):
        """The payload of a JWT signed by this server (HS256) or by a registered service account
        (RS256); None otherwise."""
        try:
            h, b, s = token.split(".")
            head = json.loads(b64url_decode(h))
            payload = json.loads(b64url_decode(b))
            sig = b64url_decode(s)
        except Exception:
            return None
        signed = f"{h}.{b}".encode()
        if head.get("alg") == "HS256":
            ok = hmac.compare_digest(hmac.new(self.secret, signed, hashlib.sha256).digest(), sig)
        elif head.get("alg") == "RS256":
            key = self.service_accounts.get(payload.get("iss"))
            ok = key is not None and _rs256_verify(signed, sig, *key)
        else:
            ok = False
        return payload if ok else None

    def _issue(self, uid, provider):
        """A fresh ID token and refresh token for `uid` (caller holds the lock)."""
        u = self.users[uid]
        now = int(time.time())
        payload = {"iss": f"https://securetoken.google.com/{self.project}", "aud": self.project,
                   "auth_time": now, "user_id": uid, "sub": uid, "iat": now, "exp": now + int(self.token_lifetime),
                   "firebase": {"identities": {"email": [u["email"]]} if u["email"] else {},
                                "sign_in_provider": provider}}
        if u["email"]:
            payload["email"] = u["email"]
            payload["email_verified"] = False
        for k, v in u["claims"].items():
            payload.setdefault(k, v)
        payload["_n"] = secrets.token_hex(4)  # two tokens issued in the same second differ
        token = self._sign_hs256(payload)
        self.id_tokens[token] = {"uid": uid, "exp": now + int(self.token_lifetime), "provider": provider}
        return token

    def _new_refresh(self, uid, provider):
        rt = "AMf-" + b64url(secrets.token_bytes(48))
        self.refresh_tokens[rt] = {"uid": uid, "provider": provider, "revoked": False}
        return rt

    def storage_auth(self, header):
        """None for no Authorization header; the auth dict for a valid ID token; raises 401."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "firebase" or not token:
            raise HTTPError(401, "Invalid authentication credentials: expected Authorization: Firebase <ID token>.")
        with self.lock:
            # Only tokens this server signed and issued are in the registry (a forged or altered
            # one is not), so a registry hit needs no second signature check.
            known = self.id_tokens.get(token.strip())
        if known is None:
            raise HTTPError(401, "Invalid authentication credentials.")
        if known["exp"] <= time.time():
            raise HTTPError(401, "Firebase ID token has expired.")
        u = self.users.get(known["uid"])
        return {"uid": known["uid"], "provider": known["provider"], "claims": dict(u["claims"]) if u else {}}

    # --- auth REST ---

    def auth_request(self, op, body, key):
        if self.api_key is not None and key != self.api_key:
            raise AuthError("API key not valid. Please pass a valid API key.", extra={"status": "INVALID_ARGUMENT"})
        with self.lock:
            self.stats["auth" if op != "token" else "refresh"] += 1
            if op == "accounts:signInWithPassword":
                email, password = body.get("email"), body.get("password")
                if not email:
                    raise AuthError("INVALID_EMAIL")
                if not password:
                    raise AuthError("MISSING_PASSWORD")
                uid = self.by_email.get(email.lower())
                if uid is None or self.users[uid]["password"] != password:
                    raise AuthError("INVALID_LOGIN_CREDENTIALS")
                if self.users[uid]["disabled"]:
                    raise AuthError("USER_DISABLED")
                return {"kind": "identitytoolkit#VerifyPasswordResponse", "localId": uid,
                        "email": self.users[uid]["email"], "displayName": "", "registered": True,
                        "idToken": self._issue(uid, "password"), "refreshToken": self._new_refresh(uid, "password"),
                        "expiresIn": str(int(self.token_lifetime))}
            if op == "accounts:signInWithCustomToken":
                payload = self._verify_jwt(body.get("token") or "")
                if (payload is None or payload.get("aud") != CUSTOM_TOKEN_AUD or not payload.get("uid")
                        or payload.get("exp", 0) <= time.time()):
                    raise AuthError("INVALID_CUSTOM_TOKEN")
                uid = str(payload["uid"])
                new = uid not in self.users
                if new:
                    self.create_user(uid=uid, provider="custom", claims=payload.get("claims"))
                elif payload.get("claims"):
                    self.users[uid]["claims"] = dict(payload["claims"])
                if self.users[uid]["disabled"]:
                    raise AuthError("USER_DISABLED")
                return {"kind": "identitytoolkit#VerifyCustomTokenResponse", "idToken": self._issue(uid, "custom"),
                        "refreshToken": self._new_refresh(uid, "custom"), "expiresIn": str(int(self.token_lifetime)),
                        "isNewUser": new}
            if op == "accounts:signUp":
                email, password = body.get("email"), body.get("password")
                if email or password:
                    if not email:
                        raise AuthError("MISSING_EMAIL")
                    if not password or len(password) < 6:
                        raise AuthError("WEAK_PASSWORD : Password should be at least 6 characters")
                    uid = self.create_user(email=email, password=password)
                    provider = "password"
                else:
                    uid = self.create_user(provider="anonymous")
                    provider = "anonymous"
                return {"kind": "identitytoolkit#SignupNewUserResponse", "idToken": self._issue(uid, provider),
                        "email": email or "", "refreshToken": self._new_refresh(uid, provider),
                        "expiresIn": str(int(self.token_lifetime)), "localId": uid}
            if op == "token":
                grant = body.get("grant_type") or body.get("grantType")
                rt = body.get("refresh_token") or body.get("refreshToken")
                if grant != "refresh_token":
                    raise AuthError("INVALID_GRANT_TYPE")
                if not rt:
                    raise AuthError("MISSING_REFRESH_TOKEN")
                t = self.refresh_tokens.get(rt)
                if t is None:
                    raise AuthError("INVALID_REFRESH_TOKEN")
                if t["revoked"]:
                    raise AuthError("TOKEN_EXPIRED")
                u = self.users.get(t["uid"])
                if u is None:
                    raise AuthError("USER_NOT_FOUND")
                if u["disabled"]:
                    raise AuthError("USER_DISABLED")
                tok = self._issue(t["uid"], t["provider"])
                return {"access_token": tok, "expires_in": str(int(self.token_lifetime)), "token_type": "Bearer",
                        "refresh_token": rt, "id_token": tok, "user_id": t["uid"], "project_id": self.project}
        raise AuthError("NOT_FOUND", status=404)

    # --- storage ---

    def _next_generation(self):
        g = max(self.last_generation + 1, int(time.time() * 1_000_000))
        self.last_generation = g
        return g

    def _store(self, bucket, name, data, meta):
        """Creates a new generation of `name` (caller holds the lock)."""
        meta = dict(meta)
        custom = dict(meta.get("metadata") or {})
        tokens = custom.pop(TOKEN_KEY, None)
        meta["metadata"] = custom
        obj = StoredObject(bucket, name, data, self._next_generation(), meta, time.time())
        self.finalized[(bucket, name)] = self.finalized.get((bucket, name), 0) + 1
        if tokens:
            # The custom key is moved into downloadTokens (§2, E-md): this is how a client that
            # copies custom metadata would copy a bearer secret to another object.
            obj.tokens = [t for t in str(tokens).split(",") if t]
        self.buckets[bucket][name] = obj
        return obj

    def metadata_json(self, obj):
        m = {"name": obj.name, "bucket": obj.bucket, "generation": str(obj.generation),
             "metageneration": str(obj.metageneration), "contentType": obj.props.get("contentType"),
             "timeCreated": rfc3339(obj.time_created), "updated": rfc3339(obj.updated),
             "storageClass": "STANDARD", "size": str(len(obj.data)), "md5Hash": obj.md5,
             "etag": b64url(hashlib.sha256(f"{obj.generation}/{obj.metageneration}".encode()).digest()[:12])}
        if obj.tokens:
            m["downloadTokens"] = ",".join(obj.tokens)
        if self.flavor == "emulator":
            m["crc32c"] = str(obj.crc)
        else:
            m["crc32c"] = base64.b64encode(obj.crc.to_bytes(4, "big")).decode()
        # Both show an object with no contentEncoding as `identity` (the emulator's
        # OutgoingFirebaseMetadata; production's recorded answers, also for objects written
        # through the JSON API, which stores none).
        m["contentEncoding"] = obj.props.get("contentEncoding", "identity")
        for k in ("contentDisposition", "contentLanguage", "cacheControl"):
            if k in obj.props:
                m[k] = obj.props[k]
        if m["contentType"] is None:
            del m["contentType"]
        if obj.custom:
            m["metadata"] = dict(obj.custom)
        return m

    def denied(self, what):
        if self.flavor == "emulator":
            if self.rules is None:
                return HTTPError(403, "Permission denied. Storage Emulator has no loaded ruleset.")
            return HTTPError(403, f"Permission denied. No {what} permission.")
        return HTTPError(403, "Permission denied.")

    def not_found(self):
        if self.flavor == "emulator":
            return HTTPError(404, "Not Found", text=True)
        return HTTPError(404, "Not Found.")

    def check(self, method, path, auth, resource=None):
        what = {"get": "READ", "list": "LIST"}.get(method, "WRITE")
        if self.rules is None or not self.rules.allows(method, path, auth, resource):
            self.stats["403"] += 1
            raise self.denied(what)

    def bucket_objects(self, bucket):
        objs = self.buckets.get(bucket)
        if objs is None:
            raise self.not_found()
        return objs

    def list(self, bucket, q, auth):
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter", "")
        if prefix and (not prefix.endswith("/") or prefix.endswith("//")):
            raise HTTPError(400, "The prefix parameter is required to be empty or ends with a single / character.")
        if delimiter not in ("", "/"):
            raise HTTPError(400, "Only / is supported as a delimiter.")
        try:
            max_results = int(q.get("maxResults", "1000"))
        except ValueError:
            raise HTTPError(400, "Invalid maxResults.")
        if max_results < 1:
            raise HTTPError(400, "maxResults must be positive.")
        max_results = min(max_results, 1000)
        with self.lock:
            objs = self.bucket_objects(bucket)
            self.check("list", prefix[:-1] if prefix else "", auth)
            names = sorted(n for n in objs if n.startswith(prefix))
        items, prefixes = [], set()
        for n in names:
            rest = n[len(prefix):]
            if delimiter and "/" in rest:
                p = prefix + rest[:rest.index("/") + 1]
                if "//" not in p:
                    prefixes.add(p)
            elif "//" not in n and not n.endswith("/"):
                items.append(n)
        token = q.get("pageToken")
        out = {}
        if self.flavor == "emulator":
            # §1: the token is the next item's name, resuming includes it; maxResults counts items
            # only and every page repeats all prefixes. Names are in JavaScript's order: UTF-16
            # code units (big-endian UTF-16 bytes sort the same way).
            def utf16(n):
                return n.encode("utf-16-be")
            items.sort(key=utf16)
            if token:
                items = [n for n in items if utf16(n) >= utf16(token)]
            page, rest = items[:max_results], items[max_results:]
            out["prefixes"] = sorted(prefixes, key=utf16)
            out["items"] = [{"name": n, "bucket": bucket} for n in page]
            if rest:
                out["nextPageToken"] = rest[0]
        else:
            entries = sorted([(p, True) for p in prefixes] + [(n, False) for n in items])
            if token:
                try:
                    after = b64url_decode(token).decode()
                except Exception:
                    raise HTTPError(400, "Invalid page token.")
                entries = [e for e in entries if e[0] > after]
            page, rest = entries[:max_results], entries[max_results:]
            out["prefixes"] = [n for n, isp in page if isp]
            out["items"] = [{"name": n, "bucket": bucket} for n, isp in page if not isp]
            if rest:
                out["nextPageToken"] = b64url(page[-1][0].encode())
        if self.flavor != "emulator":
            # Production leaves empty repeated fields out; the emulator always answers both arrays.
            for k in ("prefixes", "items"):
                if not out[k]:
                    del out[k]
        return out

    def get_metadata(self, bucket, name, auth):
        with self.lock:
            objs = self.bucket_objects(bucket)
            self.check("get", name, auth)
            obj = objs.get(name)
            if obj is None:
                raise self.not_found()
            self._mint_if_needed(obj)
            return self.metadata_json(obj)

    @staticmethod
    def _mint_if_needed(obj):
        """§2: a GET (metadata or media) of an object without a download token mints one, a
        metadata write: metageneration and `updated` move on (caller holds the lock)."""
        if not obj.tokens:
            obj.tokens.append(str(uuid.uuid4()))
            obj.metageneration += 1
            obj.updated = time.time()

    def download(self, bucket, name, auth, download_token):
        with self.lock:
            objs = self.bucket_objects(bucket)
            obj = objs.get(name)
            if not (download_token and obj is not None and download_token in obj.tokens):
                self.check("get", name, auth)
            if obj is None:
                raise self.not_found()
            self._mint_if_needed(obj)
            return obj

    def patch(self, bucket, name, body, auth):
        if not isinstance(body, dict):
            raise HTTPError(400, "Invalid metadata: expected a JSON object.")
        with self.lock:
            objs = self.bucket_objects(bucket)
            obj = objs.get(name)
            props = dict(obj.props) if obj else {}
            custom = dict(obj.custom) if obj else {}
            for k in WRITABLE:
                if k in body:
                    if body[k] is None:
                        props.pop(k, None)
                    else:
                        props[k] = str(body[k])
            if "metadata" in body:
                if body["metadata"] is None:
                    custom = {}
                elif isinstance(body["metadata"], dict):
                    for k, v in body["metadata"].items():
                        if v is None:
                            custom.pop(k, None)
                        else:
                            custom[str(k)] = v if isinstance(v, str) else json.dumps(v)
                else:
                    raise HTTPError(400, "Invalid metadata: 'metadata' must be an object.")
            if TOKEN_KEY in custom:
                self.violations.append(f"PATCH {name} sets {TOKEN_KEY}")
                custom.pop(TOKEN_KEY)
            if "downloadTokens" in body:
                self.violations.append(f"PATCH {name} sends downloadTokens")
            _check_custom_size(custom)
            resource = {"size": len(obj.data) if obj else 0, "contentType": props.get("contentType"), "metadata": custom}
            self.check("update", name, auth, resource)
            if obj is None:
                raise self.not_found()
            obj.props, obj.custom = props, custom
            obj.metageneration += 1
            obj.updated = time.time()
            return self.metadata_json(obj)

    def delete(self, bucket, name, auth):
        with self.lock:
            objs = self.bucket_objects(bucket)
            self.check("delete", name, auth)  # §6: rules before existence
            if name not in objs:
                raise self.not_found()
            del objs[name]

    def create(self, bucket, name, data, meta, auth):
        """An upload's end: rules (create or update) on what it will be, then a new generation."""
        _check_name(name)
        custom = meta.get("metadata") or {}
        if not isinstance(custom, dict):
            raise HTTPError(400, "Invalid metadata: 'metadata' must be an object.")
        custom = {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in custom.items() if v is not None}
        if TOKEN_KEY in custom:
            self.violations.append(f"upload of {name} sets {TOKEN_KEY}")
        if meta.get("downloadTokens"):
            self.violations.append(f"upload of {name} sends downloadTokens")
        _check_custom_size({k: v for k, v in custom.items() if k != TOKEN_KEY})
        meta = {**{k: meta[k] for k in WRITABLE if meta.get(k) is not None}, "metadata": custom}
        # A v0 upload with no contentDisposition stores one: the emulator `inline` (its
        # finalizeOneShotUpload), production `inline; filename*=utf-8''LEAF` (recorded answers).
        if "contentDisposition" not in meta:
            meta["contentDisposition"] = "inline" if self.flavor == "emulator" else \
                "inline; filename*=utf-8''" + urllib.parse.quote(name.rsplit("/", 1)[-1], safe="!#$&+-.^_`|~")
        with self.lock:
            objs = self.bucket_objects(bucket)
            resource = {"size": len(data), "contentType": meta.get("contentType"), "metadata": custom}
            self.check("update" if name in objs else "create", name, auth, resource)
            self.stats["upload"] += 1
            obj = self._store(bucket, name, data, meta)
            # An upload answers with a download token already minted (added to any moved in from
            # the reserved custom key), so the next GET is no metadata write.
            obj.tokens.append(str(uuid.uuid4()))
            return self.metadata_json(obj)

    def note_tokens_in(self, what, blob):
        """Records a request that carries any object's download token (bucketfs never should).
        Tokens are minted as UUIDs; one copied in through custom metadata is one of those too."""
        found = _UUID.findall(blob)
        if not found:
            return
        with self.lock:
            for objs in self.buckets.values():
                for o in objs.values():
                    for t in o.tokens:
                        if t.encode() in found:
                            self.violations.append(f"{what} carries the download token of {o.name}")
                            return


def _check_name(name):
    b = name.encode()
    if not name or len(b) > 1024 or "\r" in name or "\n" in name:
        raise HTTPError(400, "Invalid object name.")


def _check_custom_size(custom):
    for k, v in custom.items():
        if len(k.encode()) > 1024 or len(v.encode()) > 4096:
            raise HTTPError(400, "Metadata part is too large.")
    if sum(len(k.encode()) + len(v.encode()) for k, v in custom.items()) > 8192:
        raise HTTPError(400, "Metadata part is too large.")


def _rs256_verify(signed, sig, n, e):
    k = (n.bit_length() + 7) // 8
    if len(sig) != k:
        return False
    em = pow(int.from_bytes(sig, "big"), e, n).to_bytes(k, "big")
    digest_info = bytes.fromhex("3031300d060960864801650304020105000420") + hashlib.sha256(signed).digest()
    expected = b"\x00\x01" + b"\xff" * (k - 3 - len(digest_info)) + b"\x00" + digest_info
    return hmac.compare_digest(em, expected)


def _parse_multipart(body, content_type):
    m = re.search(r'boundary="?([^";]+)"?', content_type or "")
    if not m:
        raise HTTPError(400, "Multipart upload without a boundary.")
    b = m.group(1).encode()
    parts = []
    pos = body.find(b"--" + b)
    if pos < 0:
        raise HTTPError(400, "Malformed multipart body.")
    pos += len(b) + 2
    while True:
        if body[pos:pos + 2] == b"--":
            break
        if body[pos:pos + 2] != b"\r\n":
            raise HTTPError(400, "Malformed multipart body.")
        pos += 2
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise HTTPError(400, "Malformed multipart body.")
        headers = {}
        for line in body[pos:head_end].decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        nxt = body.find(b"\r\n--" + b, head_end + 4)
        if nxt < 0:
            raise HTTPError(400, "Malformed multipart body.")
        parts.append((headers, body[head_end + 4:nxt]))
        pos = nxt + 4 + len(b)
    if len(parts) != 2:
        raise HTTPError(400, f"A multipart upload has 2 parts, not {len(parts)}.")
    return parts


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY the body waits for the client's
    # delayed ACK (40 ms a request), which no real service adds.
    disable_nagle_algorithm = True
    srv = None  # set by FirebaseServer.start

    def log_message(self, fmt, *args):  # the path never holds a token; the query may (token=)
        if self.srv.log:
            self.srv.log.write(f"{self.command} {self.path.split('?')[0]} {args[1] if len(args) > 1 else ''}\n")

    # --- plumbing ---

    def _body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, body=b"", headers=(), content_type="application/json; charset=utf-8"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        # end_headers() without its own write: the head and the body leave in one write
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        # recorded before the answer leaves: a client that has its answer finds it recorded
        with self.srv.lock:
            if status in (401,):
                self.srv.stats["401"] += 1
            self.srv.requests.append((self.command, self.path.split("?")[0], status))
            if len(self.srv.requests) > 100000:
                del self.srv.requests[:50000]
        self.flush_headers()

    def _error(self, e):
        if isinstance(e, HTTPError):
            if e.text:
                return self._send(e.status, e.message, e.headers, content_type="text/plain; charset=utf-8")
            return self._send(e.status, {"error": {"code": e.status, "message": e.message}}, e.headers)
        if isinstance(e, AuthError):
            err = {"code": e.status, "message": e.message,
                   "errors": [{"message": e.message, "domain": "global", "reason": "invalid"}]}
            err.update(e.extra)
            return self._send(e.status, {"error": err})
        raise e

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def _dispatch(self):
        body = self._body()
        raw_path, _, raw_query = self.path.partition("?")
        q = dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True))  # '+' reads as a space (§0)
        with self.srv.lock:
            self.srv.stats["requests"] += 1
        try:
            if raw_path.startswith("/__admin/"):
                return self._admin(raw_path[len("/__admin/"):], q, body)
            m = re.fullmatch(r"(?:/identitytoolkit\.googleapis\.com)?/v1/(accounts:\w+)", raw_path)
            if m and self.command == "POST":
                return self._auth(m.group(1), q, body)
            if re.fullmatch(r"(?:/securetoken\.googleapis\.com)?/v1/token", raw_path) and self.command == "POST":
                return self._auth("token", q, body)
            m = re.fullmatch(r"/v0/b/([^/]+)/o(?:/([^/]*))?", raw_path)
            if m:
                head = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
                self.srv.note_tokens_in(f"{self.command} {raw_path}", self.path.encode() + head.encode() + body)
                return self._storage(urllib.parse.unquote(m.group(1)),
                                     None if m.group(2) is None else urllib.parse.unquote(m.group(2)), q, body)
            raise HTTPError(404, "Not Found", text=True)
        except (HTTPError, AuthError) as e:
            return self._error(e)
        except Exception as e:  # a bug here: answer 500 (and say so) rather than hang the client
            import traceback
            traceback.print_exc()
            return self._send(500, {"error": {"code": 500, "message": f"test server error: {type(e).__name__}"}})

    # --- auth ---

    def _auth(self, op, q, body):
        key = q.get("key") or self.headers.get("x-goog-api-key")
        if not key:
            raise AuthError("Method doesn't allow unregistered callers (callers without established identity). "
                            "Please use API Key or other form of API consumer identity to call this API.",
                            status=403, extra={"status": "PERMISSION_DENIED"})
        ctype = (self.headers.get("Content-Type") or "").lower()
        try:
            if "x-www-form-urlencoded" in ctype:
                data = dict(urllib.parse.parse_qsl(body.decode()))
            else:
                data = json.loads(body or b"{}")
        except Exception:
            raise AuthError("INVALID_ARGUMENT")
        if not isinstance(data, dict):
            raise AuthError("INVALID_ARGUMENT")
        return self._send(200, self.srv.auth_request(op, data, key))

    # --- storage ---

    def _storage(self, bucket, name, q, body):
        srv = self.srv
        with srv.lock:
            srv.in_flight += 1
            srv.stats["most_at_once"] = max(srv.stats["most_at_once"], srv.in_flight)
        try:
            if srv.latency:
                time.sleep(srv.latency)
            return self._storage_answer(bucket, name, q, body)
        finally:
            with srv.lock:
                srv.in_flight -= 1

    def _storage_answer(self, bucket, name, q, body):
        srv = self.srv
        method = self.command
        if method == "PUT" and (self.headers.get("X-HTTP-Method-Override") or "").upper() == "PATCH":
            method = "PATCH"
        auth = srv.storage_auth(self.headers.get("Authorization"))
        if name is None:
            if method == "GET":
                with srv.lock:
                    srv.stats["list"] += 1
                return self._send(200, srv.list(bucket, q, auth))
            if method == "POST":
                return self._upload(bucket, q, body, auth)
            raise HTTPError(404, "Not Found", text=True)
        if name == "":
            raise srv.not_found()
        if method == "GET":
            if q.get("alt") == "media":
                with srv.lock:
                    srv.stats["media"] += 1
                return self._download(srv.download(bucket, name, auth, q.get("token")))
            with srv.lock:
                srv.stats["get"] += 1
            return self._send(200, srv.get_metadata(bucket, name, auth))
        if method == "PATCH":
            with srv.lock:
                srv.stats["patch"] += 1
            try:
                patch = json.loads(body or b"{}")
            except ValueError:
                raise HTTPError(400, "Invalid JSON in the request body.")
            return self._send(200, srv.patch(bucket, name, patch, auth))
        if method == "DELETE":
            with srv.lock:
                srv.stats["delete"] += 1
            srv.delete(bucket, name, auth)
            return self._send(204)
        raise HTTPError(404, "Not Found", text=True)

    def _download(self, obj):
        size = len(obj.data)
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (m.group(1) == "" and m.group(2) == ""):
                raise HTTPError(400, "Invalid Range header.")
            if m.group(1) == "":
                start, end = max(0, size - int(m.group(2))), size - 1
            else:
                start = int(m.group(1))
                end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
            if (start >= size and size > 0 or start > end + 1) and self.srv.flavor == "emulator":
                # The emulator ignores a range it cannot satisfy: the whole object, 200.
                start, end, status = 0, size - 1, 200
            elif start >= size and size > 0 or start > end + 1:
                raise HTTPError(416, "Requested range not satisfiable.",
                                headers=[("Content-Range", f"bytes */{size}")])
            else:
                status = 206
        data = obj.data[start:end + 1]
        crc = base64.b64encode(obj.crc.to_bytes(4, "big")).decode()
        headers = [("Accept-Ranges", "bytes"), ("ETag", f'"{obj.md5}"'),
                   ("Cache-Control", obj.props.get("cacheControl", "private, max-age=0")),
                   ("Content-Disposition", _disposition_header(obj)),
                   ("x-goog-generation", str(obj.generation)), ("x-goog-metadatageneration", str(obj.metageneration)),
                   ("x-goog-storage-class", "STANDARD"), ("x-goog-hash", f"crc32c={crc},md5={obj.md5}")]
        if status == 206:
            headers.append(("Content-Range", f"bytes {start}-{end}/{size}"))
        if obj.props.get("contentEncoding") not in (None, "identity"):
            headers.append(("Content-Encoding", obj.props["contentEncoding"]))
        return self._send(status, data, headers, content_type=obj.props.get("contentType") or "application/octet-stream")

    def _upload(self, bucket, q, body, auth):
        srv = self.srv
        protocol = (self.headers.get("X-Goog-Upload-Protocol") or "").lower()
        upload_id = q.get("upload_id")
        if upload_id:
            return self._resumable_step(upload_id, body)
        name = q.get("name")
        if protocol == "multipart":
            (h1, meta_raw), (h2, data) = _parse_multipart(body, self.headers.get("Content-Type"))
            try:
                meta = json.loads(meta_raw)
            except ValueError:
                raise HTTPError(400, "The metadata part is not JSON.")
            if not isinstance(meta, dict):
                raise HTTPError(400, "The metadata part is not a JSON object.")
            name = name or meta.get("name")
            if not name:
                raise HTTPError(400, "No object name (?name=).")
            meta.setdefault("contentType", h2.get("content-type"))
            return self._send(200, srv.create(bucket, name, data, meta, auth))
        if protocol == "resumable":
            command = (self.headers.get("X-Goog-Upload-Command") or "").lower()
            if command != "start":
                raise HTTPError(400, "A resumable upload starts with X-Goog-Upload-Command: start.")
            try:
                meta = json.loads(body or b"{}")
            except ValueError:
                raise HTTPError(400, "The metadata is not JSON.")
            if not isinstance(meta, dict):
                raise HTTPError(400, "The metadata is not a JSON object.")
            name = name or meta.get("name")
            if not name:
                raise HTTPError(400, "No object name (?name=).")
            _check_name(name)
            total = self.headers.get("X-Goog-Upload-Header-Content-Length")
            if self.headers.get("X-Goog-Upload-Header-Content-Type"):
                meta.setdefault("contentType", self.headers.get("X-Goog-Upload-Header-Content-Type"))
            with srv.lock:
                srv.bucket_objects(bucket)
                if srv.flavor != "emulator":
                    srv.check("update" if name in srv.buckets[bucket] else "create", name, auth,
                              {"size": int(total or 0), "contentType": meta.get("contentType"),
                               "metadata": meta.get("metadata") or {}})
                uid = uuid.uuid4().hex
                srv.uploads[uid] = {"bucket": bucket, "name": name, "meta": meta, "auth": auth, "data": bytearray(),
                                    "total": int(total) if total else None, "final": None}
            host = self.headers.get("Host") or srv.hostport
            scheme = self.headers.get("X-Forwarded-Proto") or "http"  # behind a TLS front
            url = (f"{scheme}://{host}/v0/b/{urllib.parse.quote(bucket, safe='')}/o?name="
                   f"{urllib.parse.quote(name, safe='')}&upload_id={uid}&upload_protocol=resumable")
            return self._send(200, b"", [("X-Goog-Upload-Status", "active"), ("X-Goog-Upload-URL", url),
                                         ("X-Goog-Upload-Chunk-Granularity", str(CHUNK_GRANULARITY))])
        if protocol:
            raise HTTPError(400, f"Unknown upload protocol {protocol!r}.")
        # §5: no protocol header is a media upload, the raw body with its Content-Type.
        if not name:
            raise HTTPError(400, "No object name (?name=).")
        meta = {"contentType": self.headers.get("Content-Type") or "application/octet-stream"}
        return self._send(200, srv.create(bucket, name, body, meta, auth))

    def _resumable_step(self, upload_id, body):
        srv = self.srv
        commands = [c.strip() for c in (self.headers.get("X-Goog-Upload-Command") or "").lower().split(",") if c.strip()]
        with srv.lock:
            s = srv.uploads.get(upload_id)
        if s is None:
            raise HTTPError(404, "Upload session not found.", text=srv.flavor == "emulator")
        if s["final"] is not None:  # a repeated finalize (or anything after it) replays the answer
            status, payload = s["final"]
            return self._send(status, payload, [("X-Goog-Upload-Status", "final")])
        if commands == ["query"]:
            return self._send(200, b"", [("X-Goog-Upload-Status", "active"),
                                         ("X-Goog-Upload-Size-Received", str(len(s["data"])))])
        if commands == ["cancel"]:
            with srv.lock:
                srv.uploads.pop(upload_id, None)
            return self._send(200, b"", [("X-Goog-Upload-Status", "cancelled")])
        if not commands or any(c not in ("upload", "finalize") for c in commands):
            raise HTTPError(400, f"Unknown X-Goog-Upload-Command {self.headers.get('X-Goog-Upload-Command')!r}.")
        finalize = "finalize" in commands
        if "upload" in commands:
            offset = self.headers.get("X-Goog-Upload-Offset")
            if offset is None or not offset.isdigit():
                raise HTTPError(400, "X-Goog-Upload-Offset is required.", headers=[("X-Goog-Upload-Status", "active")])
            with srv.lock:
                if int(offset) != len(s["data"]):
                    raise HTTPError(400, f"The offset {offset} does not match the {len(s['data'])} bytes received.",
                                    headers=[("X-Goog-Upload-Status", "active"),
                                             ("X-Goog-Upload-Size-Received", str(len(s["data"])))])
                if not finalize and len(body) % CHUNK_GRANULARITY:
                    raise HTTPError(400, "A chunk that does not finalize must be a multiple of 262144 bytes.",
                                    headers=[("X-Goog-Upload-Status", "active")])
                s["data"] += body
        elif body:
            raise HTTPError(400, "finalize without upload takes no body.")
        if not finalize:
            return self._send(200, b"", [("X-Goog-Upload-Status", "active"),
                                         ("X-Goog-Upload-Size-Received", str(len(s["data"])))])
        if s["total"] is not None and len(s["data"]) != s["total"]:
            raise HTTPError(400, f"The upload declared {s['total']} bytes and sent {len(s['data'])}.",
                            headers=[("X-Goog-Upload-Status", "active")])
        try:
            result = (200, srv.create(s["bucket"], s["name"], bytes(s["data"]), s["meta"], s["auth"]))
        except HTTPError as e:
            result = (e.status, {"error": {"code": e.status, "message": e.message}})
        with srv.lock:
            s["final"] = result
            s["data"] = bytearray()
        return self._send(result[0], result[1], [("X-Goog-Upload-Status", "final")])

    # --- admin ---

    def _admin(self, what, q, body):
        srv = self.srv
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            raise HTTPError(400, "admin: body is not JSON")
        try:
            if what == "users" and self.command == "POST":
                uid = srv.create_user(data.get("email"), data.get("password"), data.get("uid"),
                                      claims=data.get("claims"))
                return self._send(200, {"uid": uid})
            if what == "customToken":
                return self._send(200, {"token": srv.custom_token(data["uid"], data.get("claims"),
                                                                  int(data.get("lifetime", 3600)))})
            if what == "rules":
                srv.set_rules(data or None)
                return self._send(200, {})
            if what == "revoke":
                srv.revoke(data["uid"])
                return self._send(200, {})
            if what == "disable":
                srv.disable_user(data["uid"], data.get("disabled", True))
                return self._send(200, {})
            if what == "expire":
                srv.expire(data.get("uid"))
                return self._send(200, {})
            if what == "config":
                with srv.lock:
                    if "token_lifetime" in data:
                        srv.token_lifetime = float(data["token_lifetime"])
                    if "flavor" in data:
                        srv.flavor = data["flavor"]
                return self._send(200, {})
            if what == "buckets":
                srv.add_bucket(data["name"])
                return self._send(200, {})
            if what == "objects" and self.command == "POST":
                made = []
                for o in (data if isinstance(data, list) else [data]):
                    raw = base64.b64decode(o["data_b64"]) if "data_b64" in o else o.get("data", "").encode()
                    obj = srv.put_object(o.get("bucket") or next(iter(srv.buckets)), o["name"], raw,
                                         o.get("contentType"), o.get("metadata"))
                    made.append(obj.name)
                return self._send(200, {"created": len(made)})
            if what == "object":
                obj = srv.get_object(q["bucket"], q["name"])
                if obj is None:
                    raise HTTPError(404, "admin: no such object")
                with srv.lock:
                    m = srv.metadata_json(obj)
                m["data_b64"] = base64.b64encode(obj.data).decode()
                return self._send(200, m)
            if what == "stats":
                return self._send(200, srv.snapshot_stats())
            if what == "violations":
                with srv.lock:
                    return self._send(200, list(srv.violations))
            if what == "requests":
                with srv.lock:
                    return self._send(200, [list(r) for r in srv.requests])
            if what == "reset":
                srv.reset_stats()
                return self._send(200, {})
        except (KeyError, ValueError) as e:
            raise HTTPError(400, f"admin {what}: {e}")
        raise HTTPError(404, f"admin: unknown {what}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bucket", action="append", help="a bucket (repeatable; default bucketfs-test.appspot.com)")
    ap.add_argument("--project", default="demo-bucketfs")
    ap.add_argument("--flavor", choices=("emulator", "production"), default="emulator")
    ap.add_argument("--token-lifetime", type=float, default=3600, help="seconds an ID token lives")
    ap.add_argument("--api-key", help="the only API key accepted (default: any non-empty key)")
    ap.add_argument("--rules", help="a JSON ruleset file (default: none loaded, everything denied)")
    ap.add_argument("--user", action="append", default=[], help="EMAIL:PASSWORD[:UID] (repeatable)")
    ap.add_argument("--log", help="append one line per request (method, path, status) to this file")
    a = ap.parse_args(argv)
    rules = json.load(open(a.rules)) if a.rules else None
    srv = FirebaseServer(a.host, a.port, tuple(a.bucket or ["bucketfs-test.appspot.com"]), a.project, a.flavor,
                         a.token_lifetime, a.api_key, rules, open(a.log, "a", buffering=1) if a.log else None)
    for u in a.user:
        parts = u.split(":")
        srv.create_user(parts[0], parts[1], parts[2] if len(parts) > 2 else None)
    srv.start()
    print(f"firebase_server: {srv.endpoint} buckets {', '.join(srv.buckets)} ({a.flavor})", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
