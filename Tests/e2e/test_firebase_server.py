"""The v0 + Auth test server (firebase_server.py) itself: the behaviours of the v0 protocol that the
mount tests rely on it for (the protocol itself is checked case by case by
test_firebase_protocol_cases.py), so that a mount test passing means bucketfs coped with them."""
import time

import pytest

from firebase_http import BUCKET, enc, obj_path, request, sign_in, upload

OWNER_RULES = {"version": 2, "rules": [
    {"match": "users/{uid}/{rest=**}", "allow": {"read,write": "owner"}},
    {"match": "public/{rest=**}", "allow": {"read": "auth"}},
    {"match": "listonly/{rest=**}", "allow": {"list": "auth"}},
]}


@pytest.fixture
def fb(firebase_server):
    firebase_server.set_rules(OWNER_RULES)
    uid = firebase_server.create_user("alice@example.com", "alice-pw")
    r = sign_in(firebase_server.endpoint, "alice@example.com", "alice-pw")
    assert r.status == 200, r
    return firebase_server, uid, r.json()


def test_firebase_server_sign_in_errors_and_key(firebase_server):
    base = firebase_server.endpoint
    firebase_server.create_user("bob@example.com", "bob-pw")
    assert sign_in(base, "bob@example.com", "wrong").json()["error"]["message"] == "INVALID_LOGIN_CREDENTIALS"
    assert sign_in(base, "nobody@example.com", "x").json()["error"]["message"] == "INVALID_LOGIN_CREDENTIALS"
    r = request(base, "POST", "/v1/accounts:signInWithPassword", {"email": "bob@example.com", "password": "bob-pw"})
    assert r.status == 403, r  # no API key
    # the production path form (as --auth-endpoint gives it) answers too
    r = request(base, "POST", "/v1/accounts:signInWithPassword?key=k", {"email": "bob@example.com", "password": "bob-pw"})
    assert r.status == 200 and r.json()["expiresIn"] == "3600"
    firebase_server.api_key = "the-key"
    assert sign_in(base, "bob@example.com", "bob-pw", key="other").status == 400
    assert sign_in(base, "bob@example.com", "bob-pw", key="the-key").status == 200


def test_firebase_server_rules_owner_and_missing_names(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    assert upload(base, f"users/{uid}/a.txt", b"A", tok).status == 200
    assert upload(base, "users/someone-else/a.txt", b"A", tok).status == 403
    assert upload(base, f"users/{uid}/b.txt", b"B").status == 403  # no token
    # a denied name is 403 whether or not it exists; an allowed missing one is 404
    srv.put_object(BUCKET, "users/someone-else/there.txt", b"x")
    for name in ("users/someone-else/there.txt", "users/someone-else/missing.txt"):
        assert request(base, "GET", obj_path(name), token=tok).status == 403
        assert request(base, "DELETE", obj_path(name), token=tok).status == 403
    assert request(base, "GET", obj_path(f"users/{uid}/missing.txt"), token=tok).status == 404
    assert request(base, "DELETE", obj_path(f"users/{uid}/missing.txt"), token=tok).status == 404
    # read-only area
    srv.put_object(BUCKET, "public/readme.txt", b"hello")
    assert request(base, "GET", obj_path("public/readme.txt") + "?alt=media", token=tok).body == b"hello"
    assert upload(base, "public/new.txt", b"x", tok).status == 403
    assert request(base, "DELETE", obj_path("public/readme.txt"), token=tok).status == 403


def test_firebase_server_list_rules_versions_and_filtering(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    for n in ("a.txt", "b//c.txt", "dir/", "dir/x.txt", "sub/y.txt"):
        srv.put_object(BUCKET, f"users/{uid}/{n}", b"x")
    r = request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=users/{uid}/&delimiter=/", token=tok)
    assert r.status == 200, r
    assert r.json()["items"] == [{"name": f"users/{uid}/a.txt", "bucket": BUCKET}]
    assert r.json()["prefixes"] == [f"users/{uid}/b/", f"users/{uid}/dir/", f"users/{uid}/sub/"]
    r = request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=users/{uid}/b/&delimiter=/", token=tok)
    assert r.status == 200 and r.json() == {"prefixes": [], "items": []}  # "b//" is not a valid prefix, "b//c.txt" not an item
    assert request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=users/{uid}&delimiter=/", token=tok).status == 400
    assert request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=users/other/&delimiter=/", token=tok).status == 403
    # listed but not readable
    srv.put_object(BUCKET, "listonly/secret.txt", b"s")
    assert request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=listonly/&delimiter=/", token=tok).status == 200
    assert request(base, "GET", obj_path("listonly/secret.txt"), token=tok).status == 403
    srv.set_rules({**OWNER_RULES, "version": 1})
    r = request(base, "GET", f"/v0/b/{enc(BUCKET)}/o?prefix=users/{uid}/&delimiter=/", token=tok)
    assert r.status == 403 and "LIST" in r.json()["error"]["message"]
    assert request(base, "GET", obj_path(f"users/{uid}/a.txt"), token=tok).status == 200
    srv.set_rules(None)
    r = request(base, "GET", obj_path(f"users/{uid}/a.txt"), token=tok)
    assert r.status == 403 and "no loaded ruleset" in r.json()["error"]["message"]


@pytest.mark.parametrize("flavor", ["emulator", "production"])
def test_firebase_server_pagination(fb, flavor):
    srv, uid, login = fb
    srv.flavor = flavor
    base, tok = srv.endpoint, login["idToken"]
    names = [f"users/{uid}/f{i:02d}" for i in range(7)] + [f"users/{uid}/d{i}/x" for i in range(3)]
    for n in names:
        srv.put_object(BUCKET, n, b"x")
    items, prefixes, token, pages = [], [], None, 0
    while True:
        q = f"?prefix=users/{uid}/&delimiter=/&maxResults=3" + (f"&pageToken={enc(token)}" if token else "")
        r = request(base, "GET", f"/v0/b/{enc(BUCKET)}/o{q}", token=tok).json()
        items += [i["name"] for i in r.get("items", [])]
        prefixes += r.get("prefixes", [])
        pages += 1
        token = r.get("nextPageToken")
        if not token:
            break
    # the files directly under the prefix (a user id that starts with "d" made "/d" match them all)
    assert items == sorted(n for n in names if n.count("/") == 2)
    if flavor == "emulator":  # items only count; every page repeats the prefixes
        assert pages == 3 and len(prefixes) == 9
    else:
        assert pages == 4 and sorted(prefixes) == [f"users/{uid}/d{i}/" for i in range(3)]


def test_firebase_server_metadata_strings_token_minting_and_patch(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    name = f"users/{uid}/m.txt"
    up = upload(base, name, b"hello", tok, "text/plain", {"a": "1", "b": "2"}).json()
    assert up["size"] == "5" and up["generation"].isdigit() and up["metageneration"] == "1"
    assert up["downloadTokens"]  # minted by the upload
    assert up["timeCreated"].endswith("Z") and "." in up["timeCreated"]
    got = request(base, "GET", obj_path(name), token=tok).json()
    assert got["downloadTokens"] == up["downloadTokens"] and got["metageneration"] == "1"  # nothing to mint
    srv.put_object(BUCKET, f"users/{uid}/behind.txt", b"x")  # written behind the API: no token
    behind = request(base, "GET", obj_path(f"users/{uid}/behind.txt"), token=tok).json()
    assert behind["downloadTokens"] and behind["metageneration"] == "2"  # minted on the first GET
    again = request(base, "GET", obj_path(f"users/{uid}/behind.txt"), token=tok).json()
    assert again["downloadTokens"] == behind["downloadTokens"] and again["metageneration"] == "2"
    r = request(base, "PATCH", obj_path(name), {"metadata": {"a": None, "c": "3"}, "cacheControl": "no-cache",
                                                "size": "99"}, token=tok).json()
    assert r["metadata"] == {"b": "2", "c": "3"} and r["cacheControl"] == "no-cache" and r["size"] == "5"
    r = request(base, "PATCH", obj_path(name), {"cacheControl": None}, token=tok).json()
    assert "cacheControl" not in r and r["metadata"] == {"b": "2", "c": "3"}
    r = request(base, "PUT", obj_path(name), {"metadata": None}, {"X-HTTP-Method-Override": "PATCH"}, tok).json()
    assert "metadata" not in r and r["metageneration"] == "4"
    assert srv.violations == []


def test_firebase_server_download_ranges_and_tokens(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    name = f"users/{uid}/r.bin"
    data = bytes(range(256)) * 10
    upload(base, name, data, tok)
    r = request(base, "GET", obj_path(name) + "?alt=media", headers={"Range": "bytes=10-19"}, token=tok)
    assert r.status == 206 and r.body == data[10:20] and r.header("Content-Range") == f"bytes 10-19/{len(data)}"
    assert r.header("x-goog-generation").isdigit()
    past = request(base, "GET", obj_path(name) + "?alt=media", headers={"Range": f"bytes={len(data)}-"}, token=tok)
    assert past.status == 200 and past.body == data  # the emulator ignores an unsatisfiable range
    srv.flavor = "production"
    assert request(base, "GET", obj_path(name) + "?alt=media", headers={"Range": f"bytes={len(data)}-"},
                   token=tok).status == 416
    srv.flavor = "emulator"
    dl = request(base, "GET", obj_path(name), token=tok).json()["downloadTokens"]
    assert request(base, "GET", obj_path(name) + f"?alt=media&token={dl}").body == data  # skips the rules
    assert request(base, "GET", obj_path(name) + "?alt=media&token=wrong").status == 403
    assert srv.violations and "download token" in srv.violations[-1]


def test_firebase_server_resumable_upload_checks(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    name = f"users/{uid}/big.bin"
    data = b"x" * (256 * 1024 + 10)
    start = request(base, "POST", f"/v0/b/{enc(BUCKET)}/o?name={enc(name)}", {"name": name}, {
        "X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start",
        "X-Goog-Upload-Header-Content-Length": str(len(data))}, tok)
    assert start.status == 200 and start.header("X-Goog-Upload-Status") == "active"
    url = start.header("X-Goog-Upload-URL")
    assert url.startswith(base) and "upload_id=" in url

    def step(cmd, offset=None, body=b""):
        h = {"X-Goog-Upload-Command": cmd}
        if offset is not None:
            h["X-Goog-Upload-Offset"] = str(offset)
        return request(base, "POST", url, body, h)

    assert step("upload", 0, data[:1000]).status == 400          # not a multiple of 256 KiB
    assert step("upload", 5, data[:256 * 1024]).status == 400    # wrong offset
    assert step("upload", 0, data[:256 * 1024]).status == 200
    q = step("query")
    assert q.header("X-Goog-Upload-Size-Received") == str(256 * 1024)
    assert step("upload, finalize", 0, data[256 * 1024:]).status == 400  # offset again
    fin = step("upload, finalize", 256 * 1024, data[256 * 1024:])
    assert fin.status == 200 and fin.header("X-Goog-Upload-Status") == "final" and fin.json()["size"] == str(len(data))
    assert step("finalize").json()["generation"] == fin.json()["generation"]  # replayed
    assert srv.get_object(BUCKET, name).data == data
    # emulator flavor: a denied create is only seen at finalize, as 403 with status final
    other = "users/other/x.bin"
    start = request(base, "POST", f"/v0/b/{enc(BUCKET)}/o?name={enc(other)}", {"name": other}, {
        "X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start"}, tok)
    assert start.status == 200
    url = start.header("X-Goog-Upload-URL")
    fin = step("upload, finalize", 0, b"abc")
    assert fin.status == 403 and fin.header("X-Goog-Upload-Status") == "final"


def test_firebase_server_token_expiry_refresh_revoke_disable(fb):
    srv, uid, login = fb
    base = srv.endpoint
    srv.token_lifetime = 1
    r = sign_in(base, "alice@example.com", "alice-pw").json()
    assert r["expiresIn"] == "1"
    assert request(base, "GET", obj_path(f"users/{uid}/none"), token=r["idToken"]).status == 404
    time.sleep(1.6)
    assert request(base, "GET", obj_path(f"users/{uid}/none"), token=r["idToken"]).status == 401
    ref = request(base, "POST", "/securetoken.googleapis.com/v1/token?key=k",
                  f"grant_type=refresh_token&refresh_token={r['refreshToken']}".encode(),
                  {"Content-Type": "application/x-www-form-urlencoded"})
    assert ref.status == 200 and ref.json()["user_id"] == uid and ref.json()["expires_in"] == "1"
    assert request(base, "GET", obj_path(f"users/{uid}/none"), token=ref.json()["id_token"]).status == 404
    srv.token_lifetime = 3600
    fresh = sign_in(base, "alice@example.com", "alice-pw").json()
    srv.expire(uid)
    assert request(base, "GET", obj_path(f"users/{uid}/none"), token=fresh["idToken"]).status == 401
    srv.revoke(uid)
    ref = request(base, "POST", "/v1/token?key=k", {"grant_type": "refresh_token", "refresh_token": fresh["refreshToken"]})
    assert ref.status == 400 and ref.json()["error"]["message"] == "TOKEN_EXPIRED"
    srv.disable_user(uid)
    assert sign_in(base, "alice@example.com", "alice-pw").json()["error"]["message"] == "USER_DISABLED"
    # a forged token (right claims, wrong signature) is refused
    h, b, s = fresh["idToken"].split(".")
    assert request(base, "GET", obj_path(f"users/{uid}/none"), token=f"{h}.{b}.{s[::-1]}").status == 401


def test_firebase_server_custom_and_anonymous_sign_in(firebase_server):
    srv = firebase_server
    base = srv.endpoint
    srv.set_rules(OWNER_RULES)
    tok = srv.custom_token("carol", {"admin": True})
    r = request(base, "POST", "/identitytoolkit.googleapis.com/v1/accounts:signInWithCustomToken?key=k",
                {"token": tok, "returnSecureToken": True})
    assert r.status == 200 and r.json()["isNewUser"] is True and "localId" not in r.json()
    assert upload(base, "users/carol/x", b"x", r.json()["idToken"]).status == 200
    bad = request(base, "POST", "/v1/accounts:signInWithCustomToken?key=k", {"token": '{"uid":"carol"}'})
    assert bad.status == 400 and bad.json()["error"]["message"] == "INVALID_CUSTOM_TOKEN"
    anon = request(base, "POST", "/identitytoolkit.googleapis.com/v1/accounts:signUp?key=k", {"returnSecureToken": True})
    assert anon.status == 200
    a = anon.json()
    assert upload(base, f"users/{a['localId']}/x", b"x", a["idToken"]).status == 200
    assert upload(base, "users/carol/y", b"x", a["idToken"]).status == 403


def test_firebase_server_records_copied_download_tokens(fb):
    srv, uid, login = fb
    base, tok = srv.endpoint, login["idToken"]
    upload(base, f"users/{uid}/src", b"x", tok)
    dl = request(base, "GET", obj_path(f"users/{uid}/src"), token=tok).json()["downloadTokens"]
    up = upload(base, f"users/{uid}/dst", b"x", tok, metadata={"firebaseStorageDownloadTokens": dl})
    assert up.status == 200 and "metadata" not in up.json()
    tokens = srv.get_object(BUCKET, f"users/{uid}/dst").tokens
    assert tokens[0] == dl and len(tokens) == 2  # moved, as the service does, and a new one added
    assert any("sets firebaseStorageDownloadTokens" in v for v in srv.violations)
