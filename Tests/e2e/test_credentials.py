"""Google credentials against fakes of Google's token endpoints (Tests/e2e/fake_google_auth.py)
in front of the project's Cloud Storage test server (docs/CREDENTIALS.md):
- each credential type's requests (URL, grant and body fields, Authorization, Content-Type, order)
  and final token match google-auth's, the reference client, against the same fakes;
- refusals (a revoked refresh token, an STS 400, an executable not allowed or timing out, a
  malformed file, an unknown type) fail within 10 s, by name;
- quota project and --billing-project reach the server; a requester-pays refusal names the option;
- a mount behind the auth-checking proxy lives through many 2-second tokens with no failed
  operation and as many refreshes as the rule says;
- no secret reaches an output, a log line or a process title."""
import base64
import json
import os
import re
import socket
import stat
import subprocess
import time
import urllib.request

import pytest

from conftest import BIN, run
from daemons import daemon_pid
from fake_google_auth import FakeGoogleAuth
from own_gcs import OwnServer

google_auth = pytest.importorskip("google.auth", reason="google-auth is not installed in this Python")
import google.auth.iam  # noqa: E402
import google.auth.transport.requests  # noqa: E402
import google.oauth2.credentials  # noqa: E402
from google.auth import impersonated_credentials  # noqa: E402

# google-auth warns that load_credentials_from_file loads any type: here that is the point.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
BUCKET = "cred-test"
SECRETS = ["refresh-1", "secret-1", "subject-1", "PRIVATE KEY"]


@pytest.fixture
def fake():
    srv = OwnServer(BUCKET)
    f = FakeGoogleAuth(backend=srv.endpoint)
    yield f
    f.stop()
    srv.stop()


def rsa_pem():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


PEM = rsa_pem()


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return str(p)


def service_account(fake):
    return {"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key_id": "k1",
            "private_key": PEM, "token_uri": fake.url + "/token", "project_id": "p", "client_id": "1"}


def user(fake, quota=None):
    o = {"type": "authorized_user", "client_id": "cid.apps", "client_secret": "secret-1", "refresh_token": "refresh-1",
         "token_uri": "http://127.0.0.1:1/never"}
    if quota:
        o["quota_project_id"] = quota
    return o


AUDIENCE = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"


def external(fake, source, impersonate=False):
    o = {"type": "external_account", "audience": AUDIENCE, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
         "token_url": fake.url + "/sts", "credential_source": source}
    if impersonate:
        o["service_account_impersonation_url"] = fake.url + "/v1/projects/-/serviceAccounts/wif@p.iam.gserviceaccount.com:generateAccessToken"
    return o


def executable(tmp_path, name="exe.sh", body=None):
    later = int(time.time()) + 3600
    p = tmp_path / name
    p.write_text(body or "#!/bin/sh\necho '" + json.dumps({"version": 1, "success": True,
                 "token_type": "urn:ietf:params:oauth:token-type:jwt", "id_token": "subject-1", "expiration_time": later}) + "'\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def cases(fake, tmp_path):
    """{name: credential file object} for every type and source."""
    subject = write(tmp_path, "subject.txt", "subject-1")
    subject_json = write(tmp_path, "subject.json", {"id_token": "subject-1"})
    return {
        "service_account": service_account(fake),
        "authorized_user": user(fake),
        "impersonated_user": {"type": "impersonated_service_account", "source_credentials": user(fake),
                              "delegates": ["projects/-/serviceAccounts/mid@p.iam.gserviceaccount.com"],
                              "service_account_impersonation_url": fake.url + "/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken"},
        "impersonated_sa": {"type": "impersonated_service_account", "source_credentials": service_account(fake), "delegates": [],
                            "service_account_impersonation_url": fake.url + "/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken"},
        "external_file": external(fake, {"file": subject}),
        "external_file_json": external(fake, {"file": subject_json, "format": {"type": "json", "subject_token_field_name": "id_token"}}),
        "external_file_impersonated": external(fake, {"file": subject}, impersonate=True),
        "external_url": external(fake, {"url": fake.url + "/subject", "headers": {"Metadata": "True"}}),
        "external_executable": external(fake, {"executable": {"command": executable(tmp_path), "timeout_millis": 5000}}),
        "external_executable_impersonated": external(fake, {"executable": {"command": executable(tmp_path)}}, impersonate=True),
        "external_account_authorized_user": {"type": "external_account_authorized_user",
                                             "audience": "//iam.googleapis.com/locations/global/workforcePools/wf/providers/p",
                                             "refresh_token": "refresh-1", "token_url": fake.url + "/sts",
                                             "client_id": "wf-client", "client_secret": "secret-1"},
    }


def normalized(records):
    """What both clients must send alike: method, path, Content-Type, the Authorization's kind and
    value, the body's fields in order (a JWT assertion as its header and claims, times left out),
    and the headers a subject-token URL or the metadata server needs."""
    out = []
    for r in records:
        h = {k.lower(): v for k, v in r["headers"]}
        item = {"method": r["method"], "path": r["path"], "content-type": (h.get("content-type") or "").split(";")[0] or None,
                "authorization": h.get("authorization"), "metadata": h.get("metadata"), "metadata-flavor": h.get("metadata-flavor")}
        body = r["body"].decode() if r["body"] else ""
        if item["content-type"] == "application/x-www-form-urlencoded":
            fields = []
            for k, v in __import__("urllib.parse").parse.parse_qsl(body):
                if k == "assertion":
                    head, claims, _ = v.split(".")
                    dec = lambda s: json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
                    c = dec(claims)
                    c.pop("iat", None), c.pop("exp", None)
                    v = {"header": dec(head), "claims": c}
                fields.append((k, v))
            item["body"] = fields
        elif item["content-type"] == "application/json":
            item["body"] = json.loads(body)
        else:
            item["body"] = body or None
        out.append(item)
    return out


def google_auth_token(path, monkeypatch, fake):
    # The endpoints no file may choose, as bucketfs's variables move them.
    monkeypatch.setattr(google.oauth2.credentials, "_GOOGLE_OAUTH2_TOKEN_ENDPOINT", fake.url + "/token")
    monkeypatch.setattr(google.auth.iam, "_IAM_ENDPOINT", fake.url + "/v1/projects/-/serviceAccounts/{}:generateAccessToken")
    info = json.load(open(path))
    if info.get("type") == "external_account":
        # Loaded by type: load_credentials_from_file would also look the project up at Cloud
        # Resource Manager, a request that is not the credential's.
        from google.auth import identity_pool, pluggable
        kind = pluggable if "executable" in info["credential_source"] else identity_pool
        creds = kind.Credentials.from_info(info, scopes=[SCOPE])
    else:
        creds, _ = google.auth.load_credentials_from_file(path, scopes=[SCOPE])
    creds.refresh(google.auth.transport.requests.Request())
    return creds.token


def env_for(fake, **extra):
    e = dict(os.environ)
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST"):
        e.pop(k, None)
    e["BUCKETFS_OAUTH_TOKEN_URL"] = fake.url + "/token"
    e["BUCKETFS_IAM_CREDENTIALS_URL"] = fake.url + "/v1"
    e.update(extra)
    return e


def whoami(fake, *options, env=None, check=True):
    p = subprocess.run([BIN, "whoami", f"gs://{BUCKET}", "--endpoint", fake.url, *options], capture_output=True,
                       env=env or env_for(fake), timeout=60)
    out, err = p.stdout.decode(), p.stderr.decode()
    if check:
        assert p.returncode == 0, err
    return p.returncode, out, err


def bearer_sent_to_storage(fake):
    for r in fake.storage_records():
        for k, v in r["headers"]:
            if k.lower() == "authorization":
                return v[len("Bearer "):]
    return None


WIF = "external identity of " + AUDIENCE
PRINCIPALS = {
    "service_account": "sa@p.iam.gserviceaccount.com", "authorized_user": "a user signed in with gcloud",
    "impersonated_user": "t@p.iam.gserviceaccount.com", "impersonated_sa": "t@p.iam.gserviceaccount.com",
    "external_file": WIF, "external_file_json": WIF, "external_url": WIF, "external_executable": WIF,
    "external_file_impersonated": "wif@p.iam.gserviceaccount.com", "external_executable_impersonated": "wif@p.iam.gserviceaccount.com",
    "external_account_authorized_user": "external identity of //iam.googleapis.com/locations/global/workforcePools/wf/providers/p",
}


@pytest.mark.parametrize("name", ["service_account", "authorized_user", "impersonated_user", "impersonated_sa",
                                  "external_file", "external_file_json", "external_file_impersonated", "external_url",
                                  "external_executable", "external_executable_impersonated", "external_account_authorized_user"])
def test_requests_match_google_auth(fake, tmp_path, monkeypatch, name):
    obj = cases(fake, tmp_path)[name]
    if name == "external_url":
        fake.subject_body = "subject-1"
    path = write(tmp_path, f"{name}.json", obj)
    monkeypatch.setenv("GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES", "1")
    fake.reset()
    reference_token = google_auth_token(path, monkeypatch, fake)
    reference = normalized(fake.auth_records())
    fake.reset()
    _, out, err = whoami(fake, "--key-file", path, env=env_for(fake, GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES="1"))
    ours = normalized(fake.auth_records())
    assert ours == reference, f"bucketfs:\n{json.dumps(ours, indent=1)}\ngoogle-auth:\n{json.dumps(reference, indent=1)}"
    assert bearer_sent_to_storage(fake) == reference_token
    assert "bucket: answered" in out, out
    # whoami names the principal, the source and the type.
    assert f"principal: {PRINCIPALS[name]}" in out and f"source: --key-file {path}" in out, out
    assert f"type: {obj['type'] if name not in ('impersonated_user', 'impersonated_sa') else obj['source_credentials']['type'] + ' → impersonated_service_account'}" in out, out
    for s in SECRETS + [reference_token]:
        assert s not in out and s not in err, f"{s} in whoami's output"


def test_command_line_impersonation_matches_google_auth(fake, tmp_path, monkeypatch):
    path = write(tmp_path, "sa.json", service_account(fake))
    fake.reset()
    from google.oauth2 import service_account as sa
    source = sa.Credentials.from_service_account_file(path, scopes=[SCOPE])
    target = impersonated_credentials.Credentials(
        source_credentials=source, target_principal="t@p.iam.gserviceaccount.com", target_scopes=[SCOPE],
        delegates=["projects/-/serviceAccounts/d@p.iam.gserviceaccount.com"],
        iam_endpoint_override=fake.url + "/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken")
    target.refresh(google.auth.transport.requests.Request())
    reference = normalized(fake.auth_records())
    fake.reset()
    _, out, _ = whoami(fake, "--key-file", path, "--impersonate-service-account", "d@p.iam.gserviceaccount.com,t@p.iam.gserviceaccount.com")
    assert normalized(fake.auth_records()) == reference
    assert bearer_sent_to_storage(fake) == target.token
    assert "principal: t@p.iam.gserviceaccount.com" in out and "impersonation: d@p.iam.gserviceaccount.com → t@p.iam.gserviceaccount.com" in out, out


def test_whoami_names_principal_and_source(fake, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "gcloud").mkdir(parents=True)
    adc = home / ".config" / "gcloud" / "application_default_credentials.json"
    adc.write_text(json.dumps(user(fake, quota="quota-p")))
    _, out, _ = whoami(fake, env=env_for(fake, HOME=str(home)))
    assert "type: authorized_user" in out and f"source: {adc} (gcloud application default credentials)" in out, out
    assert "quota project: quota-p" in out and "bucket: answered" in out, out
    rec = fake.storage_records()[-1]
    assert ("x-goog-user-project", "quota-p") in [(k.lower(), v) for k, v in rec["headers"]]
    assert "userProject=" not in rec["query"], "a quota project is the header only"
    # The metadata server, named as such.
    _, out, _ = whoami(fake, env=env_for(fake, GCE_METADATA_HOST=f"127.0.0.1:{fake.port}"))
    assert "type: metadata server" in out and "bucket: answered" in out, out
    assert "principal: gce-default@p.iam.gserviceaccount.com" in out, out
    # --token-url.
    _, out, _ = whoami(fake, "--token-url", fake.url + "/token-url")
    assert f"source: --token-url {fake.url}/token-url" in out and "bucket: answered" in out, out


def test_a_static_token_says_how_long_it_has_left(fake, tmp_path, mounts, monkeypatch):
    """--token is never refreshed: whoami and the mount say how long it has left, as the tokeninfo
    endpoint says (the token in a POST body, never in the URL), or that it is no longer valid.
    Nothing is asked when the requests go elsewhere than Google and BUCKETFS_TOKENINFO_URL is unset."""
    token = fake._mint("user")
    info = fake.url + "/tokeninfo"
    _, out, _ = whoami(fake, "--token", token)
    assert "access token: static, never refreshed" in out and "expires in" not in out, out
    assert not [r for r in fake.auth_records() if r["path"] == "/tokeninfo"], "asked with no tokeninfo URL and a non-Google endpoint"
    _, out, _ = whoami(fake, "--token", token, env=env_for(fake, BUCKETFS_TOKENINFO_URL=info))
    assert re.search(r"access token: static, never refreshed; expires in (59|60) min \(at 20\d\d-", out), out
    assert "for holder@p.iam.gserviceaccount.com" in out, out
    assert token not in out, "the token in whoami's output"
    asked = [r for r in fake.auth_records() if r["path"] == "/tokeninfo"]
    assert len(asked) == 1 and asked[0]["method"] == "POST" and asked[0]["query"] == "", asked
    assert asked[0]["body"] == f"access_token={token}".encode(), "the token goes in the body"
    _, out, _ = whoami(fake, "--token", "not-a-token", env=env_for(fake, BUCKETFS_TOKENINFO_URL=info), check=False)
    assert "not valid now" in out and "Invalid Value" in out, out
    # The mount says it in its log, once, without the token.
    monkeypatch.setenv("BUCKETFS_TOKENINFO_URL", info)
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(k, raising=False)
    mnt = mounts.mount(f"gs://{BUCKET}", "--endpoint", fake.url, "--token", token)
    log = open(mounts.log_path(mnt)).read()
    mounts.unmount(mnt)
    assert re.search(r"--token / GOOGLE_OAUTH_ACCESS_TOKEN: expires in (59|60) min", log), log[:3000]
    assert token not in log, "the token in the mount's log"


def test_billing_project_and_requester_pays(fake, tmp_path):
    path = write(tmp_path, "sa.json", service_account(fake))
    fake.requester_pays = True
    code, out, err = whoami(fake, "--key-file", path, check=False)
    assert "requester-pays" in out + err and "--billing-project" in out + err, out + err
    fake.reset()
    _, out, _ = whoami(fake, "--key-file", path, "--billing-project", "bill-p")
    assert "bucket: answered" in out, out
    rec = fake.storage_records()[-1]
    assert "userProject=bill-p" in rec["query"]
    assert ("x-goog-user-project", "bill-p") in [(k.lower(), v) for k, v in rec["headers"]]


def refusal_cases(fake, tmp_path):
    slow = executable(tmp_path, "slow.sh", "#!/bin/sh\nsleep 60\n")
    return {
        "revoked": (user(fake), {}, "gcloud auth application-default login", lambda f: setattr(f, "refresh_tokens", set())),
        "sts-400": (external(fake, {"file": write(tmp_path, "s.txt", "subject-1")}), {}, "token exchange (STS)", lambda f: setattr(f, "sts_status", 400)),
        "exe-not-allowed": (external(fake, {"executable": {"command": executable(tmp_path)}}), {}, "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1", None),
        "exe-timeout": (external(fake, {"executable": {"command": slow, "timeout_millis": 5000}}), {"GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"},
                        "gave no answer within", None),
        "malformed": ('{"type": "authorized_user", ', {}, "not a JSON object", None),
        "unknown-type": ({"type": "gdch_service_account"}, {}, '"gdch_service_account", which bucketfs does not know', None),
    }


@pytest.mark.parametrize("case", ["revoked", "sts-400", "exe-not-allowed", "exe-timeout", "malformed", "unknown-type"])
def test_refusals_fail_within_10s_by_name(fake, tmp_path, case):
    obj, extra, words, arrange = refusal_cases(fake, tmp_path)[case]
    if arrange:
        arrange(fake)
    path = write(tmp_path, "c.json", obj)
    start = time.monotonic()
    p = subprocess.run([BIN, "ls", f"gs://{BUCKET}", "--endpoint", fake.url, "--key-file", path], capture_output=True,
                       env=env_for(fake, **extra), timeout=60)
    took = time.monotonic() - start
    err = p.stderr.decode()
    assert p.returncode != 0 and words in err, err
    assert took < 10, f"took {took:.1f} s"
    for s in SECRETS:
        assert s not in err


def ops_loop(mnt, seconds, failures, counts):
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        i += 1
        name = os.path.join(mnt, f"f{i % 7}.txt")
        data = f"round {i}\n".encode() * 50
        for what, op in (("write", lambda: open(name, "wb").write(data)),
                         ("read", lambda: open(name, "rb").read()),
                         ("list", lambda: os.listdir(mnt)),
                         ("setxattr", lambda: os.setxattr(name, "user.round", str(i).encode())),
                         ("getxattr", lambda: os.getxattr(name, "user.round")),
                         ("fsync", lambda: (lambda fd: (os.fsync(fd), os.close(fd)))(os.open(name, os.O_RDONLY)))):
            try:
                op()
                counts[what] = counts.get(what, 0) + 1
            except OSError as e:
                failures.append(f"{what} {name}: {e}")
        time.sleep(0.05)


def predicted_refreshes(fake, kind, lifetime):
    """The refreshes the rule predicts for the requests that came: a token is refreshed by the
    first request at or after lifetime − min(300 s, lifetime/4) from its arrival (a mount that
    sends nothing refreshes nothing). IAM's expireTime has whole seconds: each of its tokens
    lives what it states."""
    mints = [r["time"] for r in fake.auth_records() if r["path"] in ("/token", "/sts") or r["path"].endswith(":generateAccessToken")]
    if not mints:
        return 0
    lifetimes = list(fake.stated_lifetimes) if kind == "iam" else []
    def due(i):
        life = lifetimes[i] if i < len(lifetimes) else lifetime
        return life - min(300, life / 4)
    count, arrived = 1, mints[0]
    next_due = arrived + due(0)
    for t in sorted(r["time"] for r in fake.storage_records()):
        if t >= next_due:
            next_due = t + due(count)
            count += 1
    return count


SOAKS = {
    # name: (what the refreshes mint, seconds)
    "gcloud_user": ("user", int(os.environ.get("BUCKETFS_CREDENTIAL_SOAK", "60"))),
    "external_file": ("sts", 12),
    "external_url_impersonated": ("iam", 12),
    "external_executable": ("sts", 12),
    "impersonated_file": ("iam", 12),
    "cli_impersonation": ("iam", 12),
}


def soak_setup(name, fake, tmp_path, monkeypatch):
    """The environment and options of a mount for `name` (a key of SOAKS)."""
    if name == "gcloud_user":
        # Only gcloud's file and BUCKETFS_OAUTH_TOKEN_URL: no credential option at all.
        home = tmp_path / "home"
        (home / ".config" / "gcloud").mkdir(parents=True)
        (home / ".config" / "gcloud" / "application_default_credentials.json").write_text(json.dumps(user(fake)))
        monkeypatch.setenv("HOME", str(home))
        return []
    c = cases(fake, tmp_path)
    fake.subject_body = "subject-1"
    if name == "external_file":
        obj = c["external_file"]
    elif name == "external_url_impersonated":
        obj = external(fake, {"url": fake.url + "/subject", "headers": {"Metadata": "True"}}, impersonate=True)
    elif name == "external_executable":
        obj = c["external_executable"]
        monkeypatch.setenv("GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES", "1")
    elif name == "impersonated_file":
        obj = c["impersonated_user"]
    else:
        return ["--key-file", write(tmp_path, "sa.json", service_account(fake)),
                "--impersonate-service-account", "t@p.iam.gserviceaccount.com"]
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", write(tmp_path, f"{name}.json", obj))
    return []


@pytest.mark.parametrize("name", list(SOAKS))
def test_mount_lives_through_many_short_tokens(fake, tmp_path, mounts, monkeypatch, name):
    """Tokens live 2 s; reads, writes, listings and xattrs go on with 0 failed operations, behind
    the proxy that refuses any token not live; refreshes are what the rule says
    (lifetime − min(300 s, lifetime/4) = 1.5 s), within ±2. The mount's log, process title and
    metrics hold no secret and no token."""
    kind, seconds = SOAKS[name]
    lifetime = 2
    fake.lifetime = lifetime
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("BUCKETFS_OAUTH_TOKEN_URL", fake.url + "/token")
    monkeypatch.setenv("BUCKETFS_IAM_CREDENTIALS_URL", fake.url + "/v1")
    options = soak_setup(name, fake, tmp_path, monkeypatch)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    metrics_port = s.getsockname()[1]
    s.close()
    mnt = mounts.mount(f"gs://{BUCKET}", "--endpoint", fake.url, "--metrics-address", f"127.0.0.1:{metrics_port}", *options)
    pid = daemon_pid(mnt)
    fake.reset()
    start = time.monotonic()
    failures, counts = [], {}
    ops_loop(mnt, seconds, failures, counts)
    elapsed = time.monotonic() - start
    refreshes = fake.mints.get(kind, 0)
    log = open(mounts.log_path(mnt)).read()
    title = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    mounts.unmount(mnt)
    assert failures == [], failures[:5]
    assert counts.get("write", 0) > seconds / 3, counts
    expected = predicted_refreshes(fake, kind, lifetime)
    assert abs(refreshes - expected) <= 2, f"{refreshes} refreshes in {elapsed:.1f} s, the rule says {expected}"
    assert "credentials: " in log, log[:2000]
    for secret in SECRETS + list(fake.minted):
        assert secret not in log, f"{secret} in the mount's log"
        assert secret not in title, f"{secret} in the process title"
        assert secret not in metrics, f"{secret} in the metrics"
    print(f"{name}: {refreshes} refreshes in {elapsed:.1f} s (rule, for the requests that came: {expected}; "
          f"for requests without a pause: {elapsed / (lifetime - min(300, lifetime / 4)):.1f}); {fake.unauthorized} storage 401s; ops {counts}")


def test_a_revoked_sign_in_fails_writes_by_name_and_keeps_them(fake, tmp_path, mounts, monkeypatch):
    """The refresh token is revoked while a mount runs: a write fails within 10 s, the log names
    the refusal and `gcloud auth application-default login`, and the data goes to lost+found as
    any failed upload's does."""
    fake.lifetime = 2
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("BUCKETFS_OAUTH_TOKEN_URL", fake.url + "/token")
    path = write(tmp_path, "adc.json", user(fake))
    mnt = mounts.mount(f"gs://{BUCKET}", "--endpoint", fake.url, "--key-file", path, "--upload-retries", "1",
                       "--retry-backoff-max", "1")
    with open(os.path.join(mnt, "before.txt"), "w") as f:
        f.write("before")
    # Staged while the sign-in works; uploaded (at close) after it is revoked and the last token expired.
    data = b"kept after a revoked sign-in\n" * 100
    fd = os.open(os.path.join(mnt, "after.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    fake.refresh_tokens = set()
    time.sleep(fake.lifetime + 0.2)
    start = time.monotonic()
    failed = None
    try:
        os.close(fd)
    except OSError as e:
        failed = e
    took = time.monotonic() - start
    assert failed is not None, "the upload succeeded without a token"
    assert took < 10, f"the upload took {took:.1f} s to fail"
    cache = mounts.cache_dir(mnt)
    lost = os.path.join(cache, "lost+found")
    deadline = time.monotonic() + 60
    kept = []
    while time.monotonic() < deadline and not kept:
        kept = [n for n in (os.listdir(lost) if os.path.isdir(lost) else [])
                if not n.endswith(".json") and open(os.path.join(lost, n), "rb").read() == data]
        time.sleep(0.2)
    log = open(mounts.log_path(mnt)).read()
    mounts.unmount(mnt)
    assert kept, f"the data is not in lost+found: {os.listdir(cache)}"
    assert "invalid_grant" in log and "gcloud auth application-default login" in log, log[-3000:]
    for s in SECRETS:
        assert s not in log
