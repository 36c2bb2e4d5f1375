"""Code written for the Firebase Apple SDK, run here: `sdk-samples` (Examples/SDKSamples, the
guides' Storage samples for Apple platforms, built unchanged against bucketfs's FirebaseCore,
FirebaseAuth and FirebaseStorage) configures the app from a GoogleService-Info.plist, signs in
with Auth and runs each sample against Tests/e2e/firebase_server.py, reached through
FIREBASE_AUTH_EMULATOR_HOST and FIREBASE_STORAGE_EMULATOR_HOST. What each sample prints is
checked against what the server holds and saw (docs/LIBRARY.md, "The Apple SDK's API")."""
import hashlib
import json
import os
import plistlib
import subprocess
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, built
from faultproxy import FaultProxy
from firebase_http import BUCKET
from test_firebase import RULES, fields
from test_firebase_library import SERVICE_ACCOUNT, custom_token, service_account_key

API_KEY = "sdk-test-api-key"
EMAIL = "sdk@example.com"
PASSWORD = "a password for the SDK samples"


def sample_binary():
    return built("sdk-samples")


class SDK:
    """The server with a user and rules, an app directory with its GoogleService-Info.plist."""

    def __init__(self, server, tmp_path):
        self.server = server
        self.app_dir = tmp_path / "app"
        self.app_dir.mkdir()
        with open(self.app_dir / "GoogleService-Info.plist", "wb") as f:
            plistlib.dump({"API_KEY": API_KEY, "GOOGLE_APP_ID": "1:1234:ios:abcd", "GCM_SENDER_ID": "1234",
                           "PROJECT_ID": "demo-bucketfs", "STORAGE_BUCKET": BUCKET, "BUNDLE_ID": "dev.bucketfs.samples"}, f)
        self.uid = server.create_user(EMAIL, PASSWORD)
        self.password_file = tmp_path / "password"
        self.password_file.write_text(PASSWORD + "\n")
        server.set_rules(RULES)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FIREBASE_")}
        self.env["FIREBASE_AUTH_EMULATOR_HOST"] = server.hostport
        self.env["FIREBASE_STORAGE_EMULATOR_HOST"] = server.hostport

    def home(self, name=""):
        return f"users/{self.uid}/sdk" + ("/" + name if name else "")

    def run(self, sample, folder=None, storage_host=None, sign_in=None):
        """Runs a sample signed in with the email and password (or `sign_in`'s arguments);
        `storage_host`: Storage's requests go there instead (a slow link)."""
        env = dict(self.env, FIREBASE_STORAGE_EMULATOR_HOST=storage_host or self.server.hostport)
        how = sign_in if sign_in is not None else ["--email", EMAIL, "--password-file", str(self.password_file)]
        p = subprocess.run([sample_binary(), sample, folder or self.home(), *how],
                           cwd=self.app_dir, env=env, capture_output=True, timeout=120)
        out = p.stdout.decode(errors="replace")
        assert p.returncode == 0, (out, p.stderr.decode(errors="replace"))
        got = fields(p.stdout)
        assert got.get("uid") and got.get("currentUser") == got["uid"], out
        if sign_in is None:
            assert got["uid"] == self.uid and got["isAnonymous"] == "false", out
        assert PASSWORD.encode() not in p.stdout + p.stderr
        # the library never sends a download token (downloadURL only hands one to the program)
        assert self.server.violations == [], self.server.violations
        return got, out

    def object(self, name):
        return self.server.get_object(BUCKET, name)


@pytest.fixture
def sdk(firebase_server, tmp_path):
    return SDK(firebase_server, tmp_path)


@pytest.fixture
def slow_link(firebase_server):
    """Storage through a link of 1 MiB/s each way, so that a task's pause falls in the middle of it
    whatever the machine's speed (tasks of 2 MiB)."""
    proxy = FaultProxy(firebase_server.hostport, rate=1 << 20).start()
    yield f"127.0.0.1:{proxy.port}"
    proxy.stop()


def token_url_of(sdk, name, url):
    """The download URL's parts: the object's v0 media URL at the server, and one of its tokens."""
    u = urllib.parse.urlsplit(url)
    assert f"{u.scheme}://{u.netloc}" == sdk.server.endpoint, url
    assert u.path == f"/v0/b/{BUCKET}/o/" + urllib.parse.quote(name, safe=""), url
    q = urllib.parse.parse_qs(u.query)
    assert q["alt"] == ["media"] and q["token"][0] in sdk.object(name).tokens, url


def test_upload_guide_samples(sdk):
    got, out = sdk.run("upload")
    rivers = sdk.home("images/rivers.jpg")
    # putData with no metadata: the bytes, typed as data (no file name to infer from, as in the SDK)
    assert got["putData size"] == "20" and got["putData contentType"] == "application/octet-stream", out
    assert sdk.object(rivers).data == b"rivers, 20 bytes...."
    # the download URL reads the object without signing in
    token_url_of(sdk, rivers, got["downloadURL"])
    with urllib.request.urlopen(got["downloadURL"], timeout=10) as r:
        assert r.read() == b"rivers, 20 bytes...."
    # putFile with metadata
    mountains = sdk.home("images/mountains.jpg")
    assert got["putFile"] == f"{mountains}, 1000 bytes, image/jpeg, location=Yosemite, CA, USA", out
    o = sdk.object(mountains)
    assert o.data == bytes([7]) * 1000 and o.props.get("contentType") == "image/jpeg", o.props
    assert o.custom == {"location": "Yosemite, CA, USA"}, o.custom
    # putDataAsync, its progress observed to the end
    assert got["putDataAsync"] == "async.txt, 26 bytes, text/plain", out
    assert float(got["putDataAsync last progress"]) == 1.0, out
    assert sdk.object(sdk.home("images/async.txt")).data == b"uploaded with putDataAsync"


def test_download_guide_samples(sdk):
    island = sdk.home("images/island.jpg")
    body = "an island, in text"
    sdk.server.put_object(BUCKET, island, body, content_type="image/jpeg")
    sdk.server.reset_stats()
    got, out = sdk.run("download")
    assert got["getData"] == body and got["write"] == body, out
    assert got["write progress"] == f"{len(body)}/{len(body)}", out
    assert got["data(maxSize:)"] == str(len(body)), out
    token_url_of(sdk, island, got["downloadURL"])
    # three reads of the bytes (getData, write, data), each one media GET
    assert sdk.server.snapshot_stats()["media"] == 3
    # write(toFile:) left nothing beside its destination
    assert not [n for n in os.listdir("/tmp") if n.startswith(".sdk-samples-island-")]


def test_metadata_guide_samples(sdk):
    got, out = sdk.run("metadata")
    forest = sdk.home("images/forest.jpg")
    assert (got["metadata.name"], got["metadata.size"], got["metadata.contentType"]) == ("forest.jpg", "3000", "image/png"), out
    assert got["metadata.isFile"] == "true", out
    assert got["updated.cacheControl"] == "public,max-age=300" and got["updated.contentType"] == "image/jpeg", out
    # contentType = nil on a new StorageMetadata deletes the type and leaves the rest
    assert got["deleted.contentType"] == "nil" and got["deleted.cacheControl"] == "public,max-age=300", out
    assert got["customMetadata"] == "activity=Hiking,location=Yosemite, CA, USA", out
    o = sdk.object(forest)
    assert "contentType" not in o.props and o.props.get("cacheControl") == "public,max-age=300", o.props
    assert o.custom == {"location": "Yosemite, CA, USA", "activity": "Hiking"}, o.custom


def test_list_guide_samples(sdk):
    got, out = sdk.run("list")
    top = sdk.home("files/uid")
    lines = out.splitlines()
    assert [l for l in lines if l.startswith("listAll prefix: ")] == [f"listAll prefix: {top}/sub"], out
    assert sorted(l for l in lines if l.startswith("listAll item: ")) == [f"listAll item: {top}/file{i}" for i in range(5)], out
    pages = [l.split(": ", 1)[1] for l in lines if l.startswith("page ")]
    assert len(pages) == int(got["pages"]) >= 3, pages
    names = [n for page in pages for n in page.split(",") if n]
    assert sorted(set(names)) == sorted(["sub"] + [f"file{i}" for i in range(5)]), pages


def test_delete_guide_sample(sdk):
    got, out = sdk.run("delete")
    desert = sdk.home("images/desert.jpg")
    assert got["deleted"] == desert, out
    assert sdk.object(desert) is None
    assert got["after delete code"] == "objectNotFound", out
    encoded = f"/v0/b/{BUCKET}/o/" + urllib.parse.quote(desert, safe="")
    with sdk.server.lock:
        seen = list(sdk.server.requests)
    assert any(m == "DELETE" and p.lower() == encoded.lower() and 200 <= st < 300 for m, p, st, *_ in seen), seen


def test_upload_task_observed_paused_resumed_and_cancelled(sdk, slow_link):
    got, out = sdk.run("task", storage_host=slow_link)
    data = bytes((i * 31) & 0xFF for i in range(2 * 1024 * 1024))
    space = sdk.home("images/space.bin")
    # paused after its second progress event, resumed from the pause's observer, then completed
    assert got["paused"] == "true" and got["resumed"] == "true", out
    paused_at = int(got["paused at"])
    assert 0 < paused_at < len(data), out
    # a progress event per 256 KiB chunk the server holds (8), and more as each chunk goes out
    # (every 100 ms: 2 MiB at 1 MiB/s takes 2 s)
    assert int(got["progress events"]) > 8, out
    md5 = __import__("base64").b64encode(hashlib.md5(data).digest()).decode()
    assert got["uploaded"] == f"{space}, {len(data)} bytes, md5 {md5}", out
    assert sdk.object(space).data == data
    # the cancelled one: StorageErrorCode.cancelled to the failure observer, and no object
    assert got["cancelled upload"] == "cancelled", out
    assert sdk.object(sdk.home("images/cancelled.bin")) is None


def test_download_task_observed_paused_and_resumed_from_where_it_stopped(sdk, slow_link):
    data = bytes((i * 7) & 0xFF for i in range(2 * 1024 * 1024))
    sdk.server.put_object(BUCKET, sdk.home("images/large.bin"), data)
    sdk.server.reset_stats()
    got, out = sdk.run("download-task", storage_host=slow_link)
    paused_at = int(got["download paused at"])
    assert 0 < paused_at < len(data), out
    assert got["download resumed"] == "true", out
    assert got["downloaded"] == f"{len(data)} bytes, sum {sum(data) & 0xFFFFFFFF}", out
    assert int(got["download progress events"]) >= 2, out
    # two reads of the bytes: the one the pause stopped, and the resume's, for the rest
    assert sdk.server.snapshot_stats()["media"] == 2, sdk.server.snapshot_stats()


def test_data_max_size_refuses_a_larger_object_before_reading_it(sdk):
    sdk.server.put_object(BUCKET, sdk.home("images/big.bin"), b"x" * 4096)
    sdk.server.reset_stats()
    got, out = sdk.run("max-size")
    assert got["downloadSizeExceeded"] == "total=4096 maxSize=1024", out
    assert got["domain"] == "FIRStorageErrorDomain" and got["code"] == "downloadSizeExceeded", out
    assert sdk.server.snapshot_stats()["media"] == 0


def test_refusal_of_the_rules_is_unauthorized_with_its_bucket_and_object(sdk):
    name = "shared/not-mine.txt"   # the rules let users read shared/, not write it
    got, out = sdk.run("refused", name)
    assert got["unauthorized bucket"] == BUCKET and got["unauthorized object"] == name, out
    assert "Permission denied" in got["server said"], out
    assert got["domain"] == "FIRStorageErrorDomain" and got["code"] == "-13021", out
    assert got["description"] == f"User does not have permission to access gs://{BUCKET}/{name}.", out
    assert sdk.object(name) is None


def test_the_sdk_products_bring_nothing_else_of_bucketfs():
    """FirebaseStorage, FirebaseCore and FirebaseAuth, with every target they need: no FUSE, no
    SQLite (GRDB), no embedded bucket, no filesystem core; and the sample, built from them alone,
    links neither libfuse3 nor libsqlite3."""
    described = subprocess.run(["swift", "package", "describe", "--type", "json"], cwd=ROOT,
                               capture_output=True, text=True, check=True, timeout=300).stdout
    d = json.loads(described[described.index("{"):])
    targets = {t["name"]: t for t in d["targets"]}
    products = {p["name"]: p["targets"] for p in d["products"]}
    need, seen, external = [t for p in ("FirebaseStorage", "FirebaseCore", "FirebaseAuth") for t in products[p]], set(), set()
    while need:
        t = need.pop()
        if t in seen:
            continue
        seen.add(t)
        need += targets[t].get("target_dependencies", [])
        external |= set(targets[t].get("product_dependencies", []))
    assert {"FirebaseStorage", "FirebaseStore", "StorageModel", "CloudHTTP"} <= seen, seen
    assert not seen & {"CFuse", "FuseKit", "ObjectStores", "BucketFS", "GCSStore", "KernelFiles", "bucketfs"}, seen
    assert "GRDB" not in external and "ArgumentParser" not in external, external
    libs = subprocess.run(["ldd", sample_binary()], capture_output=True, text=True, check=True).stdout
    assert "libfuse3" not in libs and "libsqlite3" not in libs, libs


def test_signed_out_requests_go_without_a_user_and_the_rules_decide(sdk):
    sdk.server.set_rules({"version": 2, "rules": RULES["rules"] + [{"match": "public/{rest=**}", "allow": {"read": "true"}}]})
    sdk.server.put_object(BUCKET, "public/hello.txt", b"hello, anyone")
    mine = sdk.home("private.txt")
    sdk.server.put_object(BUCKET, mine, b"only mine")
    got, out = sdk.run("signed-out", mine)
    assert got["signed out"] == "true", out
    assert got["public read"] == "hello, anyone", out
    assert got["private read refused"] == mine, out


def test_signed_in_with_a_custom_token_or_anonymously(sdk, tmp_path):
    key, modulus = service_account_key(tmp_path)
    sdk.server.trust_service_account(SERVICE_ACCOUNT, modulus)
    token_file = tmp_path / "custom-token"
    token_file.write_text(custom_token(key, "gina"))
    got, out = sdk.run("delete", "users/{uid}/sdk", sign_in=["--custom-token-file", str(token_file)])
    assert got["uid"] == "gina" and got["isAnonymous"] == "false", out
    assert got["deleted"] == "users/gina/sdk/images/desert.jpg", out
    got, out = sdk.run("delete", "users/{uid}/sdk", sign_in=[])
    uid = got["uid"]
    assert uid not in ("gina", sdk.uid) and got["isAnonymous"] == "true", out
    assert got["deleted"] == f"users/{uid}/sdk/images/desert.jpg", out
    assert token_file.read_text().encode() not in out.encode()


def test_a_refused_sign_in_is_an_auth_error_with_the_sdks_code(sdk, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("not the password\n")
    p = subprocess.run([sample_binary(), "list", sdk.home(), "--email", EMAIL, "--password-file", str(wrong)],
                       cwd=sdk.app_dir, env=sdk.env, capture_output=True, timeout=120)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "(FIRAuthErrorDomain 17004)" in err and "INVALID_LOGIN_CREDENTIALS" in err, err
    assert b"not the password" not in p.stdout + p.stderr
