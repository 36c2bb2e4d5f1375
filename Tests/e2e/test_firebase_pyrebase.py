"""Cross-check of the v0 + Auth test server (firebase_server.py) against pyrebase4, a Firebase
client written elsewhere: its requests are pointed at the server, it signs in (password,
anonymous, custom token, refresh), uploads and downloads, and what it sees must agree with what
the server holds. Later tests (test_firebase.py) check that bucketfs reads what pyrebase wrote
and the other way round.

pyrebase reaches the services at their production addresses, some through the legacy
`www.googleapis.com/identitytoolkit/v3/relyingparty/*` names of the Auth methods (verifyPassword,
signupNewUser, verifyCustomToken: the v1 `accounts:*` methods under their older names, same
bodies). The adapter below sends every such request to the test server, in the emulator's URL
form (`http://HOST:PORT/identitytoolkit.googleapis.com/v1/accounts:…`)."""
import datetime
import hashlib
import os
import warnings

import pytest

from firebase_http import BUCKET, obj_path, request

pyrebase = pytest.importorskip("pyrebase", reason="pyrebase4 is not installed (Scripts/setup.sh installs it)")
requests = pytest.importorskip("requests")

V3_TO_V1 = {"verifyPassword": "accounts:signInWithPassword", "signupNewUser": "accounts:signUp",
            "verifyCustomToken": "accounts:signInWithCustomToken"}

RULES = {"version": 2, "rules": [{"match": "users/{uid}/{rest=**}", "allow": {"read,write": "owner"}}]}


def rewrite(url, base):
    for v3, v1 in V3_TO_V1.items():
        old = f"https://www.googleapis.com/identitytoolkit/v3/relyingparty/{v3}"
        if url.startswith(old):
            return base + "/identitytoolkit.googleapis.com/v1/" + v1 + url[len(old):]
    for host in ("securetoken.googleapis.com", "identitytoolkit.googleapis.com"):
        if url.startswith(f"https://{host}/"):
            return f"{base}/{host}/" + url[len(f"https://{host}/"):]
    if url.startswith("https://firebasestorage.googleapis.com/"):
        return base + "/" + url[len("https://firebasestorage.googleapis.com/"):]
    raise AssertionError(f"pyrebase tried to reach {url.split('?')[0]}, which this test does not redirect")


@pytest.fixture
def pyre(firebase_server, monkeypatch):
    """A pyrebase app whose every request (its session's and the module-level ones its Auth uses)
    goes to the test server."""
    firebase_server.set_rules(RULES)
    send = requests.adapters.HTTPAdapter.send

    def redirected(self, req, *a, **kw):
        req.url = rewrite(req.url, firebase_server.endpoint)
        return send(self, req, *a, **kw)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", redirected)
    app = pyrebase.initialize_app({"apiKey": "test-key", "authDomain": "demo-bucketfs.firebaseapp.com",
                                   "databaseURL": "https://demo-bucketfs.firebaseio.com", "storageBucket": BUCKET})
    return app


def test_firebase_pyrebase_password_upload_download(pyre, firebase_server, tmp_path):
    uid = firebase_server.create_user("erin@example.com", "erin-pw")
    user = pyre.auth().sign_in_with_email_and_password("erin@example.com", "erin-pw")
    assert user["localId"] == uid and user["email"] == "erin@example.com" and user["registered"] is True
    data = os.urandom(300_000)
    meta = pyre.storage().child(f"users/{uid}/blob.bin").put(data, user["idToken"])
    # what pyrebase was told is what the server holds: numbers as strings, md5 of the bytes
    assert meta["name"] == f"users/{uid}/blob.bin" and meta["size"] == str(len(data))
    import base64
    assert meta["md5Hash"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert firebase_server.get_object(BUCKET, f"users/{uid}/blob.bin").data == data
    out = tmp_path / "down.bin"
    pyre.storage().child(f"users/{uid}/blob.bin").download("", str(out), user["idToken"])
    assert out.read_bytes() == data
    # another user's name: pyrebase's upload is refused with the server's 403
    with pytest.raises(requests.exceptions.HTTPError, match="Permission denied"):
        pyre.storage().child("users/someone-else/x").put(b"x", user["idToken"])
    with pytest.raises(requests.exceptions.HTTPError, match="INVALID_LOGIN_CREDENTIALS"):
        pyre.auth().sign_in_with_email_and_password("erin@example.com", "wrong")


def test_firebase_pyrebase_refresh_expiry_and_revoke(pyre, firebase_server):
    firebase_server.token_lifetime = 1
    uid = firebase_server.create_user("finn@example.com", "finn-pw")
    auth = pyre.auth()
    user = auth.sign_in_with_email_and_password("finn@example.com", "finn-pw")
    assert user["expiresIn"] == "1"
    import time
    time.sleep(1.5)
    with pytest.raises(requests.exceptions.HTTPError, match="401"):
        pyre.storage().child(f"users/{uid}/late").put(b"x", user["idToken"])
    fresh = auth.refresh(user["refreshToken"])  # pyrebase sends JSON camelCase to securetoken
    assert fresh["userId"] == uid and fresh["idToken"] != user["idToken"]
    assert pyre.storage().child(f"users/{uid}/late").put(b"x", fresh["idToken"])["size"] == "1"
    firebase_server.revoke(uid)
    with pytest.raises(requests.exceptions.HTTPError, match="TOKEN_EXPIRED"):
        auth.refresh(user["refreshToken"])


def test_firebase_pyrebase_anonymous(pyre, firebase_server):
    anon = pyre.auth().sign_in_anonymous()
    uid = anon["localId"]
    assert pyre.storage().child(f"users/{uid}/a.txt").put(b"anon", anon["idToken"])["size"] == "4"
    r = request(firebase_server.endpoint, "GET", obj_path(f"users/{uid}/a.txt") + "?alt=media", token=anon["idToken"])
    assert r.body == b"anon"


def test_firebase_pyrebase_custom_token_signed_by_a_service_account(pyre, firebase_server):
    """An RS256 custom token as the Admin SDK mints it (iss = sub = the service account, aud = the
    identitytoolkit audience, uid, one hour), made with the JWT library pyrebase uses (its own
    create_custom_token passes it a key of the wrong type), signed in through pyrebase."""
    Crypto = pytest.importorskip("Crypto.PublicKey.RSA")
    jwk = pytest.importorskip("jwcrypto.jwk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import python_jwt
    email = "sdk@demo-bucketfs.iam.gserviceaccount.com"
    key = Crypto.generate(2048)
    firebase_server.trust_service_account(email, key.n, key.e)
    claims = {"iss": email, "sub": email, "uid": "gina",
              "aud": "https://identitytoolkit.googleapis.com/google.identity.identitytoolkit.v1.IdentityToolkit"}
    token = python_jwt.generate_jwt(claims, jwk.JWK.from_pem(key.export_key()), "RS256", datetime.timedelta(minutes=60))
    user = pyre.auth().sign_in_with_custom_token(token)
    assert user["isNewUser"] is True
    assert pyre.storage().child("users/gina/c.txt").put(b"custom", user["idToken"])["name"] == "users/gina/c.txt"
    # the same claims signed by a key the server does not trust are refused
    other = Crypto.generate(2048)
    forged = python_jwt.generate_jwt(claims, jwk.JWK.from_pem(other.export_key()), "RS256", datetime.timedelta(minutes=60))
    with pytest.raises(requests.exceptions.HTTPError, match="INVALID_CUSTOM_TOKEN"):
        pyre.auth().sign_in_with_custom_token(forged)


def test_firebase_pyrebase_and_bucketfs_read_what_the_other_wrote(pyre, firebase_server, tmp_path, monkeypatch, mounts):
    """What pyrebase uploads, bucketfs (library commands and a mount) reads with the same bytes
    and metadata; what bucketfs uploads, pyrebase downloads and describes the same way."""
    import json
    import urllib.parse
    from conftest import run
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", firebase_server.hostport)
    monkeypatch.setenv("FIREBASE_STORAGE_EMULATOR_HOST", firebase_server.hostport)
    monkeypatch.delenv("FIREBASE_ID_TOKEN", raising=False)
    uid = firebase_server.create_user("hana@example.com", "hana-password")
    user = pyre.auth().sign_in_with_email_and_password("hana@example.com", "hana-password")
    src = f"firebase://{BUCKET}/users/{uid}"
    run("login", f"firebase://{BUCKET}", "--api-key", "test-key", "--email", "hana@example.com",
        input=b"hana-password\n")

    data = os.urandom(300_000)
    up = pyre.storage().child(f"users/{uid}/from-pyrebase.bin").put(data, user["idToken"])
    st = json.loads(run("stat", "--json", f"{src}/from-pyrebase.bin").stdout)
    for k in ("size", "md5Hash", "generation", "contentType", "bucket"):
        assert str(st[k]) == str(up[k]), k
    assert st["fullPath"] == up["name"]
    assert run("cat", f"{src}/from-pyrebase.bin").stdout == data
    mnt = mounts.mount(src)
    with open(os.path.join(mnt, "from-pyrebase.bin"), "rb") as f:
        assert f.read() == data
    assert os.stat(os.path.join(mnt, "from-pyrebase.bin")).st_size == len(data)

    text = b"written by bucketfs\n" * 1000
    run("put", "-", f"{src}/from-bucketfs.txt", "--content-type", "text/plain", "--metadata", "origin=bucketfs",
        input=text)
    out = tmp_path / "from-bucketfs.txt"
    pyre.storage().child(f"users/{uid}/from-bucketfs.txt").download("", str(out), user["idToken"])
    assert out.read_bytes() == text
    name = urllib.parse.quote(f"users/{uid}/from-bucketfs.txt", safe="")
    m = pyre.requests.get(f"https://firebasestorage.googleapis.com/v0/b/{BUCKET}/o/{name}",
                          headers={"Authorization": "Firebase " + user["idToken"]}).json()
    import base64
    assert m["size"] == str(len(text)) and m["contentType"] == "text/plain" and m["metadata"] == {"origin": "bucketfs"}
    assert m["md5Hash"] == base64.b64encode(hashlib.md5(text).digest()).decode()
    # a file written through the mount, read by pyrebase
    with open(os.path.join(mnt, "via-mount.bin"), "wb") as f:
        f.write(data[:1000])
    out2 = tmp_path / "via-mount.bin"
    pyre.storage().child(f"users/{uid}/via-mount.bin").download("", str(out2), user["idToken"])
    assert out2.read_bytes() == data[:1000]
    assert firebase_server.violations == []
