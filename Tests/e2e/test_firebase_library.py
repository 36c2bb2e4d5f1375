"""The library's own sign-in, for real: the `sign-in` sample of Examples/FirebaseSamples (built
beside bucketfs) signs in by itself against Tests/e2e/firebase_server.py — with an email and
password, with a custom token signed by a service account key this test makes (as the Admin SDK
mints one), and as a new anonymous user — then uploads, downloads, reads the metadata, lists and
deletes in the user's folder, with ID tokens so short that the session must refresh itself on the
way. What it prints is checked against what the server saw; no password or token is in its output
(docs/LIBRARY.md, "Signing in from a program")."""
import json
import subprocess
import time
import urllib.parse

from conftest import built
from firebase_http import BUCKET
from firebase_server import CUSTOM_TOKEN_AUD, b64url
from test_firebase import API_KEY, fb, fields  # noqa: F401  (fb is the fixture: server, user, environment)

SERVICE_ACCOUNT = "sample-server@demo-bucketfs.iam.gserviceaccount.com"


def sample():
    return built("firebase-samples")


def run_sample(*args):
    return subprocess.run([sample(), "sign-in", f"gs://{BUCKET}", "--api-key", API_KEY, *map(str, args)],
                          capture_output=True, timeout=120)


def service_account_key(tmp_path):
    """A new RSA key (as in a service account's JSON key file) and its modulus."""
    key = tmp_path / "service-account.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    out = subprocess.run(["openssl", "rsa", "-in", str(key), "-noout", "-modulus"], check=True, capture_output=True).stdout
    return key, int(out.decode().strip().split("=", 1)[1], 16)


def custom_token(key, uid):
    """What the Admin SDK's createCustomToken makes: RS256, iss = sub = the service account, the
    identitytoolkit audience, the uid, one hour."""
    now = int(time.time())
    head = b64url(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"iss": SERVICE_ACCOUNT, "sub": SERVICE_ACCOUNT, "aud": CUSTOM_TOKEN_AUD, "uid": uid,
                              "iat": now, "exp": now + 3600}).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(key)], input=f"{head}.{body}".encode(),
                         check=True, capture_output=True).stdout
    return f"{head}.{body}.{b64url(sig)}"


def test_library_sample_signs_in_by_itself_each_way_and_refreshes(fb, tmp_path):
    key, modulus = service_account_key(tmp_path)
    fb.server.trust_service_account(SERVICE_ACCOUNT, modulus)
    token_file = tmp_path / "custom-token"
    token_file.write_text(custom_token(key, "gina") + "\n")
    assert not fb.login_file.exists(), "no bucketfs login: the sample signs in by itself"
    # ID tokens of 3 s; the sample waits 3.5 s between its upload and its download, so its
    # session must refresh itself on the way (ahead of the expiry, or after a 401 if the machine
    # was slow to send a request it began in time).
    fb.server.token_lifetime = 3
    ways = {"password": ["--email", fb.email, "--password-file", fb.password_file],
            "custom": ["--custom-token-file", token_file],
            "anonymous": ["--anonymous"]}
    uids = {}
    for provider, args in ways.items():
        fb.server.reset_stats()
        p = run_sample(*args, "--pause", "3.5")
        out, err = p.stdout.decode(), p.stderr.decode(errors="replace")
        assert p.returncode == 0, (provider, err)
        got = fields(p.stdout)
        uid = got["uid"]
        uids[provider] = uid
        assert got["provider"] == provider, got
        name = f"users/{uid}/library-sample/hello.txt"
        body = f"hello from {uid}"
        assert got["uploaded"] == f"{name} ({len(body) + 1} bytes)", got
        assert got["downloaded"] == body, got
        assert got["metadata"] == f"hello.txt, {len(body) + 1} bytes, text/plain", got
        assert [l for l in out.splitlines() if l.startswith("listed: ")] == [f"listed: {name}"], out
        assert got["deleted"] == name and got["left"] == "0", got
        assert int(got["token refreshes"]) >= 1, got
        # What the server saw: the delete as this user, and at least one refresh.
        assert fb.server.get_object(BUCKET, name) is None
        stats = fb.server.snapshot_stats()
        assert stats["refresh"] >= 1 and stats["refresh"] == int(got["token refreshes"]), (provider, stats, got)
        with fb.server.lock:
            seen = list(fb.server.requests)
        encoded = f"/v0/b/{BUCKET}/o/" + urllib.parse.quote(name, safe="")
        assert any(m == "DELETE" and path.lower() == encoded.lower() and 200 <= st < 300 for m, path, st in seen), seen
        # Never a secret in what it printed.
        for s in fb.secrets() + [token_file.read_text().strip()]:
            assert s.encode() not in p.stdout + p.stderr, f"a token or the password is in the sample's output ({provider})"
    assert uids["password"] == fb.uid and uids["custom"] == "gina"
    assert uids["anonymous"] not in (fb.uid, "gina")
    assert not fb.login_file.exists()


def test_library_sample_refused_sign_in_says_why_and_never_the_secret(fb, tmp_path):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not the password at all\n")
    p = run_sample("--email", fb.email, "--password-file", wrong)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "INVALID_LOGIN_CREDENTIALS" in err, err
    assert "not the password at all" not in err and fb.password not in err
    # A custom token signed by a key the server does not trust.
    key, _ = service_account_key(tmp_path)
    forged = tmp_path / "forged"
    forged.write_text(custom_token(key, "mallory"))
    p = run_sample("--custom-token-file", forged)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "INVALID_CUSTOM_TOKEN" in err, err
    assert forged.read_text() not in err
    # Two ways at once is a usage error.
    p = run_sample("--anonymous", "--custom-token-file", forged)
    assert p.returncode == 2 and "usage:" in p.stderr.decode(), p.stderr
