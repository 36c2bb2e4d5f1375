"""firebase:// for real: `bucketfs login` (email and password from a file, standard
input or a terminal without echo; a custom token; a new anonymous user), `whoami`, `logout`, the
library commands and a real mount against Tests/e2e/firebase_server.py (v0 + Firebase Auth, a
small rules model), with `ls -l`, `cat`, `getfattr -d`, `setfattr`, `cp`, `mv`, `rm`, `rsync -aX`
and `tar` within what the rules allow, EACCES and a clear log line beyond, ID tokens that expire
every few seconds, and no token or password in the mount's log, process title or metrics.

The server runs in this process (fixture `firebase_server`, ports 9220–9229); the environment
points bucketfs at it the way `firebase emulators:start` would (FIREBASE_AUTH_EMULATOR_HOST,
FIREBASE_STORAGE_EMULATOR_HOST), with a config directory of the test's own."""
import json
import os
import pty
import re
import select
import shutil
import socket
import stat
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import BIN, run, sh, startup_seconds
from firebase_http import BUCKET, obj_path, request
from daemons import daemon_of

API_KEY = "test-api-key"
SRC = f"firebase://{BUCKET}"

RULES = {"version": 2, "rules": [
    {"match": "users/{uid}/{rest=**}", "allow": {"read,write": "owner"}},
    {"match": "shared/{rest=**}", "allow": {"read": "auth"}},          # a read-only area
    {"match": "{rest=**}", "allow": {"list": "auth"}},                  # every name listable, not readable
]}


class Firebase:
    """The server, a user, and bucketfs pointed at them."""

    def __init__(self, server, tmp_path):
        self.server = server
        self.tmp = tmp_path
        self.config = tmp_path / "config"
        self.email = "alice@example.com"
        self.password = "correct horse battery staple"
        self.uid = server.create_user(self.email, self.password)
        self.password_file = tmp_path / "password"
        self.password_file.write_text(self.password + "\n")
        server.set_rules(RULES)

    @property
    def login_file(self):
        return self.config / "bucketfs" / f"firebase-{BUCKET}.json"

    def login(self, *extra, check=True, input=None):
        return run("login", SRC, "--api-key", API_KEY, *extra, check=check, input=input)

    def login_email(self):
        return self.login("--email", self.email, "--password-file", self.password_file)

    def home(self, name=""):
        return f"users/{self.uid}" + ("/" + name if name else "")

    def secrets(self):
        """Every token the server has issued, and the password."""
        with self.server.lock:
            return list(self.server.id_tokens) + list(self.server.refresh_tokens) + [self.password]


@pytest.fixture
def fb(firebase_server, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", firebase_server.hostport)
    monkeypatch.setenv("FIREBASE_STORAGE_EMULATOR_HOST", firebase_server.hostport)
    for v in ("FIREBASE_ID_TOKEN", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(v, raising=False)
    f = Firebase(firebase_server, tmp_path)
    yield f
    assert firebase_server.violations == [], "bucketfs sent, copied or used a download token"


def fields(out):
    """`key: value` lines as a dict."""
    d = {}
    for line in out.decode().splitlines():
        k, sep, v = line.partition(": ")
        if sep:
            d[k.strip()] = v.strip()
    return d


def errno_of(cmd):
    p = sh(cmd, check=False)
    return p.returncode, p.stderr.decode(errors="replace")


def wait_for(pred, timeout=10, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# --- login, whoami, logout ---------------------------------------------------------------------

def test_firebase_login_email_password_file_whoami_logout(fb):
    p = fb.login_email()
    out = fields(p.stdout)
    assert out["uid"] == fb.uid and out["email"] == fb.email and out["provider"] == "password"
    # the mount it suggests is the user's own folder, which the usual rules allow (not the root)
    assert f"bucketfs mount {SRC}/users/{fb.uid} DIR" in p.stdout.decode(), p.stdout
    st = os.stat(fb.login_file)
    assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(os.stat(fb.login_file.parent).st_mode) == 0o700
    kept = json.loads(fb.login_file.read_text())
    assert kept["uid"] == fb.uid and kept["apiKey"] == API_KEY and kept["refreshToken"] in fb.server.refresh_tokens
    assert fb.password not in fb.login_file.read_text()
    assert not any(t in fb.login_file.read_text() for t in fb.server.id_tokens), "an ID token was kept"

    w = fields(run("whoami", SRC).stdout)
    assert w["uid"] == fb.uid and w["email"] == fb.email and w["provider"] == "password"
    assert re.match(r"\d{4}-\d\d-\d\dT.*\(in (59|60) min\)", w["ID token expires"]), w

    assert "signed out" in run("logout", SRC).stdout.decode()
    assert not fb.login_file.exists()
    p = run("whoami", SRC, check=False)
    assert p.returncode != 0 and f"bucketfs login {SRC} --api-key KEY --email ADDRESS" in p.stderr.decode()
    assert "not signed in" in run("logout", SRC).stdout.decode()


def test_firebase_login_password_from_stdin_and_refusals(fb):
    p = fb.login("--email", fb.email, input=(fb.password + "\n").encode())
    assert fields(p.stdout)["uid"] == fb.uid
    run("logout", SRC)
    p = fb.login("--email", fb.email, input=b"wrong password\n", check=False)
    assert p.returncode != 0 and "INVALID_LOGIN_CREDENTIALS" in p.stderr.decode()
    assert "wrong password" not in p.stderr.decode() + p.stdout.decode()
    assert not fb.login_file.exists()
    # exactly one way to sign in
    p = fb.login("--email", fb.email, "--anonymous", check=False)
    assert p.returncode != 0 and "exactly one of" in p.stderr.decode()
    p = run("login", "gs://some-bucket", "--api-key", API_KEY, "--anonymous", check=False)
    assert p.returncode != 0 and "not a firebase:// source" in p.stderr.decode()


def test_firebase_login_password_from_a_terminal_without_echo(fb):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "login", SRC, "--api-key", API_KEY, "--email", fb.email])
    out = b""
    try:
        deadline = time.time() + 60
        while b"Password for" not in out and time.time() < deadline:
            if select.select([fd], [], [], 1)[0]:
                out += os.read(fd, 4096)
        assert b"Password for alice@example.com" in out, out
        os.write(fd, (fb.password + "\n").encode())
        while time.time() < deadline:
            if select.select([fd], [], [], 1)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:  # never wait for ever on a login that hangs
            time.sleep(2)
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, 9)
                _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out
    assert fb.password.encode() not in out, "the password was echoed"
    assert f"uid: {fb.uid}".encode() in out


def test_firebase_login_custom_token_and_anonymous(fb, tmp_path):
    token_file = tmp_path / "custom-token"
    token_file.write_text(fb.server.custom_token("carol") + "\n")
    out = fields(fb.login("--custom-token-file", token_file).stdout)
    assert out["uid"] == "carol" and out["provider"] == "custom" and out["email"] == "-"
    assert fields(run("whoami", SRC).stdout)["uid"] == "carol"
    run("put", "-", f"{SRC}/users/carol/hello.txt", input=b"from carol")
    assert fb.server.get_object(BUCKET, "users/carol/hello.txt").data == b"from carol"

    out = fields(fb.login("--anonymous").stdout)
    anon = out["uid"]
    assert out["provider"] == "anonymous" and anon in fb.server.users and anon != "carol"
    run("put", "-", f"{SRC}/users/{anon}/a.txt", input=b"anon")
    p = run("put", "-", f"{SRC}/users/carol/a.txt", input=b"x", check=False)
    assert p.returncode != 0 and "Permission denied" in p.stderr.decode()


# --- sources, library commands, fail-fast checks -----------------------------------------------

def test_firebase_library_commands(fb):
    fb.login_email()
    home = f"{SRC}/{fb.home()}"
    assert run("put", "-", f"{home}/notes/a.txt", "--content-type", "text/plain", "--metadata", "color=blue",
               input=b"hello").returncode == 0
    obj = fb.server.get_object(BUCKET, fb.home("notes/a.txt"))
    assert obj.data == b"hello" and obj.custom == {"color": "blue"} and obj.props["contentType"] == "text/plain"
    assert run("cat", f"{home}/notes/a.txt").stdout == b"hello"
    assert run("ls", f"{home}/notes").stdout.decode().split() == ["a.txt"]
    assert run("ls", home).stdout.decode().split() == ["notes/"]
    st = json.loads(run("stat", "--json", f"{home}/notes/a.txt").stdout)
    assert st["size"] == "5" and st["customMetadata"] == {"color": "blue"} and st["contentType"] == "text/plain"
    assert "downloadTokens" not in json.dumps(st) and not any(t in json.dumps(st) for t in obj.tokens)
    # the text form has no line for a property the server did not give (v0 gives no crc32c)
    text = run("stat", f"{home}/notes/a.txt").stdout.decode().splitlines()
    assert text and not [l for l in text if l.rstrip().endswith(":")], text
    run("meta", "set", f"{home}/notes/a.txt", "size", "L")
    run("meta", "rm", f"{home}/notes/a.txt", "color")
    assert run("meta", "get", f"{home}/notes/a.txt", "size").stdout == b"L\n"
    assert fb.server.get_object(BUCKET, fb.home("notes/a.txt")).custom == {"size": "L"}
    # a v0 URL is a firebase:// source: its host is the endpoint
    url = f"{fb.server.endpoint}/v0/b/{BUCKET}/o/{fb.home('notes/a.txt').replace('/', '%2F')}"
    assert run("cat", url).stdout == b"hello"
    # beyond the rules: the server's words, exit 1
    p = run("cat", f"{SRC}/users/someone-else/x", check=False)
    assert p.returncode == 1 and "Permission denied" in p.stderr.decode()
    run("rm", f"{home}/notes/a.txt")
    assert fb.server.get_object(BUCKET, fb.home("notes/a.txt")) is None
    p = run("rm", f"{home}/notes/a.txt", check=False)
    assert p.returncode == 2  # not found (allowed by the rules, so a real 404)


def test_firebase_https_v0_url_source(fb):
    fb.login_email()
    fb.server.put_object(BUCKET, fb.home("u.txt"), b"via https url")
    # the production host is the endpoint only when nothing else says; here the emulator variable does
    url = f"https://firebasestorage.googleapis.com/v0/b/{BUCKET}/o/{fb.home('u.txt').replace('/', '%2F')}"
    assert run("cat", url).stdout == b"via https url"


def test_firebase_commands_without_login_fail_fast(fb, mounts, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    t = time.time()
    p = subprocess.run([BIN, "mount", SRC, str(mnt)], capture_output=True, timeout=30)
    assert p.returncode == 1 and time.time() - t < 5 + startup_seconds()
    err = p.stderr.decode()
    assert f"bucketfs login {SRC} --api-key KEY --email ADDRESS" in err, err
    assert not os.path.ismount(mnt)
    p = run("ls", f"{SRC}/{fb.home()}", check=False)
    assert p.returncode == 1 and f"bucketfs login {SRC}" in p.stderr.decode()
    p = run("ls", f"{SRC}/{fb.home()}", "--anonymous", check=False)
    assert p.returncode == 1 and "--anonymous" in p.stderr.decode() and "bucketfs login" in p.stderr.decode()


def test_firebase_mount_refuses_what_cannot_work(fb, tmp_path):
    fb.login_email()
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def mount(src, *extra):
        t = time.time()
        p = subprocess.run([BIN, "mount", src, str(mnt), *extra], capture_output=True, timeout=60)
        took = time.time() - t
        assert not os.path.ismount(mnt)
        assert p.returncode == 1, p.stdout
        return p.stderr.decode(), took

    # rules that do not allow listing the mounted prefix
    fb.server.set_rules({"version": 2, "rules": [{"match": "users/{uid}/{rest=**}", "allow": {"get": "owner"}}]})
    err, took = mount(f"{SRC}/{fb.home()}")
    assert "may not list" in err and "Permission denied" in err and "allow list" in err and took < 10, err
    # rules_version 1 refuses every list, and the message says how to fix it
    fb.server.set_rules({**RULES, "version": 1})
    err, _ = mount(f"{SRC}/{fb.home()}")
    assert "rules_version = '2'" in err and "rules_version = '1'" in err, err
    fb.server.set_rules(RULES)
    # an endpoint where nothing listens
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    err, took = mount(f"{SRC}/{fb.home()}", "--endpoint", f"http://127.0.0.1:{dead}")
    assert "cannot reach" in err and f"127.0.0.1:{dead}" in err and took < 15, err
    # a bucket that does not exist (signed in to it, so only the bucket is wrong)
    run("login", "firebase://no-such-bucket.appspot.com", "--api-key", API_KEY, "--email", fb.email,
        "--password-file", fb.password_file)
    err, _ = mount("firebase://no-such-bucket.appspot.com/" + fb.home())
    assert "bucket 'no-such-bucket.appspot.com' does not exist" in err, err
    # a login whose refresh token was revoked
    fb.server.revoke(fb.uid)
    err, _ = mount(f"{SRC}/{fb.home()}")
    assert "TOKEN_EXPIRED" in err and f"bucketfs login {SRC}" in err, err


# --- the mount ---------------------------------------------------------------------------------

def seed(fb):
    s = fb.server
    s.put_object(BUCKET, fb.home("a.txt"), b"alpha\n", "text/plain", {"color": "red", "owner": "alice"})
    s.put_object(BUCKET, fb.home("docs/b.md"), b"# bravo\n", "text/markdown")
    s.put_object(BUCKET, "shared/readme.txt", b"read me\n", "text/plain")
    s.put_object(BUCKET, "users/someone-else/private.txt", b"not yours\n")


def test_firebase_mount_tools_within_the_rules(fb, mounts, tmp_path):
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(SRC, "--metadata-ttl", "1")
    home = os.path.join(mnt, fb.home())
    # down from the root by listings (a lookup of `users` alone: test_firebase_lookup_of_a_directory_whose_own_name_is_not_readable)
    assert sorted(os.listdir(mnt)) == ["shared", "users"]
    assert sorted(os.listdir(os.path.join(mnt, "users"))) == sorted([fb.uid, "someone-else"])

    # ls -l, cat, getfattr -d
    out = sh(["ls", "-l", home]).stdout.decode()
    assert re.search(r"^-.* 6 .* a\.txt$", out, re.M) and re.search(r"^d.* docs$", out, re.M), out
    assert sh(["cat", f"{home}/a.txt"]).stdout == b"alpha\n"
    xattrs = sh(["getfattr", "-d", "-m", "-", f"{home}/a.txt"]).stdout.decode()
    # text/plain is what a.txt's name means, so it is not listed; it reads by name (docs/SEMANTICS.md §4.1)
    assert 'user.color="red"' in xattrs and "user.storage.contentType" not in xattrs, xattrs
    assert sh(["getfattr", "-n", "user.storage.contentType", "--only-values", f"{home}/a.txt"]).stdout == b"text/plain"
    assert "downloadTokens" not in xattrs and "firebaseStorageDownloadTokens" not in xattrs
    tokens = fb.server.get_object(BUCKET, fb.home("a.txt")).tokens
    assert tokens and not any(t in xattrs for t in tokens)

    # setfattr sends only its key: a key another client set meanwhile survives
    r = request(fb.server.endpoint, "PATCH", obj_path(fb.home("a.txt")), {"metadata": {"elsewhere": "yes"}},
                token=json.loads(request(fb.server.endpoint, "POST",
                                         "/v1/accounts:signInWithPassword?key=k",
                                         {"email": fb.email, "password": fb.password}).body)["idToken"])
    assert r.status == 200
    sh(["setfattr", "-n", "user.size", "-v", "XL", f"{home}/a.txt"])
    sh(["setfattr", "-x", "user.owner", f"{home}/a.txt"])
    assert fb.server.get_object(BUCKET, fb.home("a.txt")).custom == {"color": "red", "elsewhere": "yes", "size": "XL"}

    # cp in (small and resumable-sized), mv, rm
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(100_000))
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * 1024 * 1024 + 12345))
    sh(["cp", str(small), str(big), home])
    assert fb.server.get_object(BUCKET, fb.home("small.bin")).data == small.read_bytes()
    assert fb.server.get_object(BUCKET, fb.home("big.bin")).data == big.read_bytes()
    assert sh(["cmp", str(big), f"{home}/big.bin"]).returncode == 0
    before = fb.server.get_object(BUCKET, fb.home("a.txt"))
    sh(["mv", f"{home}/a.txt", f"{home}/docs/a-moved.txt"])
    moved = fb.server.get_object(BUCKET, fb.home("docs/a-moved.txt"))
    assert fb.server.get_object(BUCKET, fb.home("a.txt")) is None
    assert moved.data == before.data and moved.custom == before.custom
    assert not set(moved.tokens) & set(before.tokens), "a download token was copied by the rename"
    sh(["rm", f"{home}/small.bin", f"{home}/big.bin"])
    assert fb.server.get_object(BUCKET, fb.home("small.bin")) is None

    # rsync -aX in and back out keeps content and custom metadata
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "one.txt").write_text("one\n")
    (src / "sub" / "two.txt").write_text("two\n")
    sh(["setfattr", "-n", "user.tag", "-v", "t1", str(src / "one.txt")])
    sh(["rsync", "-aX", f"{src}/", f"{home}/tree/"])
    assert fb.server.get_object(BUCKET, fb.home("tree/one.txt")).custom.get("tag") == "t1"
    back = tmp_path / "back"
    sh(["rsync", "-aX", f"{home}/tree/", f"{back}/"])
    assert (back / "sub" / "two.txt").read_text() == "two\n"
    assert sh(["getfattr", "-n", "user.tag", "--only-values", str(back / "one.txt")]).stdout == b"t1"

    # tar out of the mount and into it
    archive = tmp_path / "home.tar"
    sh(["tar", "-cf", str(archive), "-C", home, "docs", "tree"])
    names = sh(["tar", "-tf", str(archive)]).stdout.decode().split()
    assert "docs/b.md" in names and "tree/sub/two.txt" in names
    os.makedirs(f"{home}/restored")
    sh(["tar", "-xf", str(archive), "-C", f"{home}/restored"])
    assert fb.server.get_object(BUCKET, fb.home("restored/docs/b.md")).data == b"# bravo\n"

    # beyond the rules: EACCES, and a clear log line
    assert sorted(os.listdir(os.path.join(mnt, "shared"))) == ["readme.txt"]
    assert sh(["cat", os.path.join(mnt, "shared", "readme.txt")]).stdout == b"read me\n"
    rc, err = errno_of(["cp", str(tmp_path / "back" / "one.txt"), os.path.join(mnt, "shared", "new.txt")])
    assert rc != 0 and "Permission denied" in err, err
    rc, err = errno_of(["rm", os.path.join(mnt, "shared", "readme.txt")])
    assert rc != 0 and "Permission denied" in err, err
    assert fb.server.get_object(BUCKET, "shared/readme.txt") is not None
    rc, err = errno_of(["cp", str(tmp_path / "back" / "one.txt"), os.path.join(mnt, "users", "someone-else", "mine.txt")])
    assert rc != 0 and "Permission denied" in err, err
    assert fb.server.get_object(BUCKET, "users/someone-else/mine.txt") is None
    log = open(mounts.log_path(mnt)).read()
    assert re.search(r"shared/new\.txt.*Permission denied. No WRITE permission", log), log[-3000:]
    assert re.search(r"shared/readme\.txt.*Permission denied. No WRITE permission", log), log[-3000:]


def listed_not_readable(fb, mounts, wait):
    """The rules let every signed-in user list everything, and read only their own: another
    user's file shows in `ls`; its stat (`ls -l`) and reading it are EACCES, logged (a listing
    reads names only, as a directory with read but no search permission shows its names)."""
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(SRC, "--metadata-ttl", "1")
    other = os.path.join(mnt, "users", "someone-else")
    assert "users" in os.listdir(mnt)
    assert "someone-else" in os.listdir(os.path.join(mnt, "users"))  # by listings
    assert os.listdir(other) == ["private.txt"]
    p = sh(["ls", "-l", other], check=False)
    assert p.returncode != 0 and "Permission denied" in p.stderr.decode() and "private.txt" in p.stdout.decode(), p
    log = open(mounts.log_path(mnt)).read()
    assert re.search(r"users/someone-else/private\.txt.*Permission denied. No READ permission", log), log[-3000:]
    time.sleep(wait)
    rc, err = errno_of(["cat", os.path.join(other, "private.txt")])
    assert rc != 0 and "Permission denied" in err, f"cat of an unreadable file: rc {rc}, {err!r}"


def test_firebase_listed_but_not_readable_is_eacces(fb, mounts):
    listed_not_readable(fb, mounts, wait=1.5)


# The core's lookup of a name not yet listed GETs it and lists NAME/ at once: a refused GET of
# `users` (not readable under users/{uid} rules) must not hide the directory the listing shows.
def test_firebase_lookup_of_a_directory_whose_own_name_is_not_readable(fb, mounts):
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(SRC)
    # no listing first: the kernel looks up `users`, then the uid, then the file
    assert open(os.path.join(mnt, fb.home("a.txt")), "rb").read() == b"alpha\n"


def test_firebase_mount_across_token_expiries(fb, mounts, tmp_path):
    fb.server.token_lifetime = 3
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--metadata-ttl", "0.5")
    before = fb.server.snapshot_stats()["refresh"]
    end = time.time() + 11
    i = 0
    while time.time() < end:  # several token lifetimes, each operation a request or more
        assert sh(["cat", f"{mnt}/a.txt"]).stdout == b"alpha\n"
        (tmp_path / "w").write_text(f"write {i}\n")
        sh(["cp", str(tmp_path / "w"), f"{mnt}/w{i % 3}.txt"])
        assert "a.txt" in os.listdir(mnt)
        i += 1
        time.sleep(0.7)
    assert fb.server.get_object(BUCKET, fb.home("w0.txt")).data.startswith(b"write")
    refreshes = fb.server.snapshot_stats()["refresh"] - before
    assert refreshes >= 3, f"only {refreshes} refreshes in 11 s of 3 s tokens"
    # a token ended early (a 401 before its time): one refresh, then the operation succeeds
    fb.server.expire(fb.uid)
    assert sh(["cat", f"{mnt}/docs/b.md"]).stdout == b"# bravo\n"
    # a refresh refused for good: EACCES and "sign in again" in the log
    fb.server.revoke(fb.uid)
    fb.server.expire(fb.uid)
    time.sleep(1.2)  # past --metadata-ttl and the failure memory of the last success
    rc, err = errno_of(["cat", f"{mnt}/docs/b.md"])
    if rc == 0:  # the content may still be cached from the read above: ask for a new file
        rc, err = errno_of(["cp", str(tmp_path / "w"), f"{mnt}/after-revoke.txt"])
    assert rc != 0 and "Permission denied" in err, err
    wait_for(lambda: "bucketfs login" in open(mounts.log_path(mnt)).read(), what="the sign-in-again log line")
    assert f"bucketfs login firebase://{BUCKET}" in open(mounts.log_path(mnt)).read()


def test_firebase_no_token_in_logs_process_title_or_metrics(fb, mounts, tmp_path):
    seed(fb)
    fb.server.token_lifetime = 2
    fb.login_email()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reqlog = tmp_path / "requests.log"
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--log-level", "debug", "--request-log", reqlog,
                       "--metrics-address", f"127.0.0.1:{port}", "--metadata-ttl", "0.5")
    for i in range(4):
        sh(["ls", "-l", mnt])
        sh(["cat", f"{mnt}/a.txt"])
        (tmp_path / "x").write_text(str(i))
        sh(["cp", str(tmp_path / "x"), f"{mnt}/x.txt"])
        time.sleep(0.8)
    pid, cmdline = daemon_of(mnt)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    texts = {"log": open(mounts.log_path(mnt), "rb").read(), "request log": reqlog.read_bytes(),
             "process title": cmdline, "metrics": metrics}
    secrets = fb.secrets()
    assert len(secrets) >= 4  # several ID tokens were issued and used
    for what, text in texts.items():
        for s in secrets:
            assert s.encode() not in text, f"a token or the password is in the mount's {what}"
    assert stat.S_IMODE(os.stat(fb.login_file).st_mode) == 0o600


def test_firebase_id_token_option_never_in_the_process_title(fb, mounts):
    seed(fb)
    login = json.loads(request(fb.server.endpoint, "POST", "/v1/accounts:signInWithPassword?key=k",
                               {"email": fb.email, "password": fb.password}).body)
    token = login["idToken"]
    w = fields(run("whoami", SRC, "--id-token", token).stdout)
    assert w["uid"] == fb.uid and w["provider"] == "password" and "never refreshed" in w["login"]
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--id-token", token)
    assert sh(["cat", f"{mnt}/a.txt"]).stdout == b"alpha\n"
    pid, cmdline = daemon_of(mnt)
    assert token.encode() not in cmdline
    assert token.encode() not in open(mounts.log_path(mnt), "rb").read()
    # FIREBASE_ID_TOKEN works the same for library commands
    env = dict(os.environ, FIREBASE_ID_TOKEN=token)
    assert run("cat", f"{SRC}/{fb.home('docs/b.md')}", env=env).stdout == b"# bravo\n"
    # a fixed token is not refreshed: once it ends, EACCES
    fb.server.expire(fb.uid)
    p = run("cat", f"{SRC}/{fb.home('docs/b.md')}", env=env, check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and "has expired" in err and "never refreshed" in err, err


# --- content types and default properties (docs/SEMANTICS.md §4.1) ------------------------------

@pytest.mark.parametrize("flavor", ["emulator", "production"])
@pytest.mark.parametrize("mode", ["default", "write-back"])
def test_firebase_rsync_types_from_final_names_and_a_second_run_moves_nothing(fb, mounts, tmp_path, flavor, mode):
    """rsync writes `.pic.jpg.XXXXXX` and renames it: the object gets image/jpeg. The servers give
    every upload a contentEncoding (identity) and a contentDisposition (the emulator `inline`,
    production `inline; filename*=utf-8''NAME`): neither is listed, so a second `rsync -aXi`
    itemizes nothing and writes nothing."""
    fb.server.flavor = flavor
    fb.login_email()
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "pic.jpg").write_bytes(b"\xff\xd8\xff jpeg")
    (src / "sub" / "page.html").write_bytes(b"<p>")
    (src / "sub" / "notes").write_bytes(b"plain")
    (src / "explicit.jpg").write_bytes(b"\xff\xd8\xff")
    os.setxattr(src / "explicit.jpg", "user.storage.contentType", b"text/x-mine")
    log = tmp_path / "req.log"
    options = ["--request-log", str(log), "--metadata-ttl", "30"] + (["--write-back"] if mode == "write-back" else [])
    mnt = mounts.mount(f"{SRC}/{fb.home()}", *options)
    sh(["rsync", "-aX", f"{src}/", f"{mnt}/rs/"])
    def obj(rel):
        return fb.server.get_object(BUCKET, fb.home("rs/" + rel))
    # with --write-back the uploads follow rsync's exit
    deadline = time.time() + 10
    while time.time() < deadline and not all(obj(r) for r in ("pic.jpg", "sub/page.html", "sub/notes", "explicit.jpg")):
        time.sleep(0.05)
    assert obj("pic.jpg").props["contentType"] == "image/jpeg"
    assert obj("sub/page.html").props["contentType"] == "text/html"
    assert obj("sub/notes").props["contentType"] == "application/octet-stream"
    assert obj("explicit.jpg").props["contentType"] == "text/x-mine"
    # production names the object in its disposition: the final name, not rsync's temporary one
    want = "inline" if flavor == "emulator" else "inline; filename*=utf-8''pic.jpg"
    assert obj("pic.jpg").props["contentDisposition"] == want
    listed = os.listxattr(f"{mnt}/rs/pic.jpg")
    assert not [x for x in listed if x.startswith("user.storage.")], listed
    assert os.getxattr(f"{mnt}/rs/pic.jpg", "user.storage.contentEncoding") == b"identity"
    assert os.getxattr(f"{mnt}/rs/pic.jpg", "user.storage.contentDisposition") == want.encode()
    log.write_text("")
    again = sh(["rsync", "-aXi", f"{src}/", f"{mnt}/rs/"]).stdout.decode().strip()
    assert again == "", again
    writes = [line for line in log.read_text().splitlines() if line.split(" ")[0] in ("write", "patch", "copy", "delete")]
    assert writes == [], writes


@pytest.mark.parametrize("flavor", ["emulator", "production"])
def test_firebase_put_gives_the_type_of_the_objects_name(fb, tmp_path, flavor):
    fb.server.flavor = flavor
    fb.login_email()
    pic = tmp_path / "x.jpg"
    pic.write_bytes(b"\xff\xd8\xff")
    run("put", pic, f"{SRC}/{fb.home('x.jpg')}")
    assert fb.server.get_object(BUCKET, fb.home("x.jpg")).props["contentType"] == "image/jpeg"
    run("put", pic, f"{SRC}/{fb.home('e.jpg')}", "--content-type", "image/png")
    assert fb.server.get_object(BUCKET, fb.home("e.jpg")).props["contentType"] == "image/png"
    run("put", pic, f"{SRC}/{fb.home('n.jpg')}", "--no-infer-content-type")
    assert fb.server.get_object(BUCKET, fb.home("n.jpg")).props["contentType"] == "application/octet-stream"


# --- the library's front door ------------------------------------------------------------------

def test_firebase_library_example_runs_the_guides_samples(fb):
    """Examples/FirebaseSamples, built beside bucketfs: signed in by `bucketfs login`'s file and
    pointed at the server by the emulator variables, it runs the guides' samples in the user's
    folder; what it prints is what the server holds."""
    example = os.path.join(os.path.dirname(BIN), "firebase-samples")
    if not os.path.exists(example):
        pytest.fail(f"{example} is missing: swift build --build-tests builds it")
    fb.login_email()
    p = subprocess.run([example, f"gs://{BUCKET}", fb.home()], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    lines = p.stdout.decode().splitlines()
    got = fields(p.stdout)
    home = fb.home()
    assert got["spaceRef.fullPath"] == f"{home}/images/space.jpg" and got["spaceRef.name"] == "space.jpg"
    assert got["imagesParent == imagesRef"] == "true" and got["nilRef"] == "nil" and got["rootRef.fullPath"] == "''"
    assert got["earthRef.fullPath"] == f"{home}/images/earth.jpg" and got["spaceRef.bucket"] == BUCKET
    assert got["metadata.name"] == "forest.jpg" and got["metadata.size"] == "3000" and got["metadata.contentType"] == "image/png"
    assert got["updated.cacheControl"] == "public,max-age=300" and got["updated.contentType"] == "image/jpeg"
    assert got["deleted.contentType"] == "nil" and got["deleted.cacheControl"] == "public,max-age=300"
    forest = fb.server.get_object(BUCKET, f"{home}/images/forest.jpg")
    assert forest is not None and forest.data == bytes([7]) * 3000
    assert forest.custom == {"location": "Yosemite, CA, USA", "activity": "Hiking"}
    assert got["customMetadata"] == "activity=Hiking,location=Yosemite, CA, USA"
    listed = [line.split(": ", 1)[1] for line in lines if line.startswith("listAll item")]
    assert listed == [f"{home}/files/uid/file{i}" for i in range(5)]
    assert [line.split(": ", 1)[1] for line in lines if line.startswith("listAll prefix")] == [f"{home}/files/uid/sub"]
    pages = [line.split(": ", 1)[1] for line in lines if line.startswith("page ")]
    assert len(pages) == int(got["pages"]) >= 3, pages
    names = [n for page in pages for n in page.split(",") if n]
    assert sorted(set(names)) == sorted(["sub"] + [f"file{i}" for i in range(5)]), pages
    # Outside the user's folder the rules refuse, and the example says so and fails.
    p2 = subprocess.run([example, f"gs://{BUCKET}", "shared"], capture_output=True, timeout=60)
    assert p2.returncode == 1 and "Permission denied" in p2.stderr.decode(errors="replace"), p2.stderr
    for s in fb.secrets():
        assert s.encode() not in p.stdout + p.stderr + p2.stdout + p2.stderr, "a token or the password is in the sample's output"


# --- refusals a shell sees, listings that cost what they show ----------------------------------

def lost_entries(mounts, mnt):
    """lost+found's data files (not their sidecars), name -> content."""
    lf = os.path.join(mounts.cache_dir(mnt), "lost+found")
    if not os.path.isdir(lf):
        return {}
    return {n: open(os.path.join(lf, n), "rb").read() for n in os.listdir(lf) if not n.endswith(".json")}


def test_firebase_create_refused_by_path_fails_at_open(fb, mounts, tmp_path):
    """Production checks the write rule at the start of a resumable upload: the first create in
    a read-only directory asks once and fails at open(2); nothing is written, nothing kept."""
    fb.server.flavor = "production"
    seed(fb)
    fb.login_email()
    reqlog = tmp_path / "requests.log"
    mnt = mounts.mount(SRC, "--request-log", reqlog)
    shared = os.path.join(mnt, "shared")
    p = sh(["bash", "-c", f"echo x > {shared}/new.txt"], check=False)
    assert p.returncode != 0 and "Permission denied" in p.stderr.decode(), p
    p = sh(["bash", "-c", f"echo y > {shared}/other.txt"], check=False)
    assert p.returncode != 0 and "Permission denied" in p.stderr.decode(), p
    rc, err = errno_of(["touch", f"{shared}/third.txt"])
    assert rc != 0 and "Permission denied" in err, err
    for name in ("new.txt", "other.txt", "third.txt"):
        assert fb.server.get_object(BUCKET, f"shared/{name}") is None
    assert not os.path.exists(f"{shared}/new.txt")
    assert lost_entries(mounts, mnt) == {}
    lines = reqlog.read_text().splitlines()
    # one question for the directory (and text/plain), none per file, no upload
    assert [l for l in lines if l.startswith("probe ")] == ["probe shared/new.txt"], lines
    assert not [l for l in lines if l.startswith("write ")], lines
    # where the rules allow writing, the create asks once and goes on
    sh(["bash", "-c", f"echo z > {mnt}/{fb.home('new.txt')}"])
    assert fb.server.get_object(BUCKET, fb.home("new.txt")).data == b"z\n"
    log = open(mounts.log_path(mnt)).read()
    assert re.search(r"create of 'shared/new\.txt' refused by the bucket's rules: Permission denied", log), log[-3000:]
    with fb.server.lock:
        assert not [s for s in fb.server.uploads.values() if s["final"] is None], "a probe's session was left open"


def test_firebase_refusal_at_close_keeps_one_non_empty_entry(fb, mounts, tmp_path):
    """Rules on the size refuse only with the bytes: the refusal arrives at fsync, logged, and
    every later write and close of that file says EACCES too; lost+found holds one entry for the
    file, complete, with what the fsync handed over. The emulator checks a path rule only when an
    upload finishes: a shell's `>` there is refused once, at its close (which bash ignores), its
    data kept whole, and from then on every create of that type there fails at open, whatever
    the writer (docs/SEMANTICS.md §3.3, "Refused creates"); `recover --to` a folder the rules
    allow uploads the kept file."""
    fb.server.set_rules({"version": 2, "rules": RULES["rules"] + [
        {"match": "limited/{rest=**}", "allow": {"read": "auth", "write": "auth && size<1000"}}]})
    seed(fb)
    fb.server.put_object(BUCKET, "limited/keep.txt", b"k")
    fb.login_email()
    mnt = mounts.mount(SRC)
    big = os.path.join(mnt, "limited", "big.bin")
    fd = os.open(big, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 2000)
    with pytest.raises(PermissionError):
        os.fsync(fd)
    with pytest.raises(PermissionError):
        os.write(fd, b"b" * 500)
    with pytest.raises(PermissionError):
        os.close(fd)
    assert fb.server.get_object(BUCKET, "limited/big.bin") is None
    kept = lost_entries(mounts, mnt)
    assert list(kept.values()) == [b"a" * 2000], {k: len(v) for k, v in kept.items()}
    assert not any(k.endswith(".cut-off") for k in kept), kept
    log = open(mounts.log_path(mnt)).read()
    assert re.search(r"upload of 'limited/big\.bin' refused: .*Permission denied", log), log[-3000:]
    # a small file there is fine
    sh(["bash", "-c", f"echo ok > {mnt}/limited/small.txt"])
    assert fb.server.get_object(BUCKET, "limited/small.txt").data == b"ok\n"

    # the emulator (this server's default flavour) says yes to the probe; the shell's first close
    # (of the empty file) sends nothing, its last is refused: one entry, complete, with the data
    before = set(kept)
    sh(["bash", "-c", f"echo x > {mnt}/shared/new.txt"], check=False)
    kept = lost_entries(mounts, mnt)
    new = {k: v for k, v in kept.items() if k not in before}
    assert list(new.values()) == [b"x\n"] and not any(k.endswith(".cut-off") for k in new), kept
    assert fb.server.get_object(BUCKET, "shared/new.txt") is None
    # from now on a .txt there fails at open, whatever the writer, and nothing reaches the server
    uploads = len([r for r in fb.server.requests if r[0] == "POST"])
    for cmd in (["bash", "-c", f"echo y > {mnt}/shared/other.txt"],
                ["bash", "-c", f"printf 'y\\n' > {mnt}/shared/other.txt"],
                ["dash", "-c", f"echo y > {mnt}/shared/other.txt"],
                ["python3", "-c", f"open('{mnt}/shared/other.txt', 'w').write('y')"],
                ["bash", "-c", f"echo x > {mnt}/shared/new.txt"]):
        p = sh(cmd, check=False)
        assert p.returncode != 0 and b"Permission denied" in p.stderr, (cmd, p.returncode, p.stderr)
    assert len([r for r in fb.server.requests if r[0] == "POST"]) == uploads
    mounts.unmount(mnt)
    # status counts them as refused, with the command that puts them where the rules allow
    cache = mounts.cache_dir(mnt)
    st = run("status", SRC, check=False)
    [line] = [l for l in st.stdout.decode().splitlines() if l.split("\t")[1:2] == [cache]]
    assert st.returncode == 1 and "2 refused by the store" in line, st.stdout.decode()
    assert f"bucketfs recover {cache} --to {SRC}/PREFIX" in st.stdout.decode().splitlines()[-1], st.stdout.decode()
    # the kept file goes where the rules allow it
    r = run("recover", cache, "--to", f"{SRC}/{fb.home()}", check=False)
    assert fb.server.get_object(BUCKET, fb.home("shared/new.txt")).data == b"x\n", r.stdout + r.stderr


def test_firebase_plain_ls_costs_list_requests_only(fb, mounts, tmp_path):
    """v0 lists names only: a names-only `ls` asks for no metadata; `ls -l` GETs each object
    (v0's price), once."""
    fb.login_email()
    n = 300
    for i in range(n):
        fb.server.put_object(BUCKET, fb.home(f"many/f{i:04d}.txt"), b"x")
    reqlog = tmp_path / "requests.log"
    mnt = mounts.mount(SRC, "--request-log", reqlog)
    many = os.path.join(mnt, fb.home("many"))
    os.stat(many)  # the directory's own lookup, before counting
    reqlog.write_text("")
    fb.server.reset_stats()
    names = sh(["ls", many]).stdout.decode().split()
    assert len(names) == n
    # what reached the server (the store's own GETs of a listing never reach the request log)
    stats = fb.server.snapshot_stats()
    assert stats["list"] >= 1 and stats["get"] == 0 and stats["media"] == 0, stats
    lines = reqlog.read_text().splitlines()
    assert lines and all(l.startswith("list ") for l in lines), lines[:20]
    reqlog.write_text("")
    fb.server.reset_stats()
    out = sh(["ls", "-l", many]).stdout.decode().splitlines()
    assert len([l for l in out if l.startswith("-") and " 1 " in l]) == n, out[:5]
    stats = fb.server.snapshot_stats()
    assert stats["get"] == n, stats
    gets = [l for l in reqlog.read_text().splitlines() if l.startswith("get ")]
    assert len(gets) == n and len(set(gets)) == n, (len(gets), len(set(gets)))


def test_firebase_ls_l_longer_than_the_ttl_lists_once_and_getfattr_after_costs_nothing(fb, mounts):
    """An `ls -l` that lasts longer than --metadata-ttl (each request 50 ms late, 2 at a time: at
    least N/2 x 50 ms) lists the directory once and GETs each object once; `getfattr -d` on every
    file right after costs no request: what the `ls -l` filled lives the TTL from its end
    (docs/SEMANTICS.md §6). Once it has expired, `getfattr -d` GETs each object again, as many
    at once as the connections allow, not one at a time."""
    fb.login_email()
    n, page, ttl = 200, 50, 3
    for i in range(n):
        fb.server.put_object(BUCKET, fb.home(f"long/f{i:04d}.txt"), b"x")
    mnt = mounts.mount(SRC, "--metadata-ttl", str(ttl), "--max-connections", "2", "--list-page-size", str(page))
    d = os.path.join(mnt, fb.home("long"))
    names = [f"f{i:04d}.txt" for i in range(n)]
    cwd = os.getcwd()
    os.chdir(d)  # the tools below name the files relative to it: no lookup of the directory itself
    try:
        os.stat(".")  # the directory's own attributes, before counting
        fb.server.latency = 0.05
        fb.server.reset_stats()
        t = time.time()
        out = sh(["ls", "-l"]).stdout.decode().splitlines()
        took = time.time() - t
        assert len([l for l in out if l.startswith("-") and " 1 " in l]) == n, out[:5]
        assert took > ttl, f"the ls -l took {took:.1f} s, within the TTL: the test shows nothing"
        stats = fb.server.snapshot_stats()
        pages = -(-n // page)
        # One listing, its pages walked (v0 has no offsets); listed again, it would be twice that.
        assert stats["list"] == pages, stats
        # each object once (and the directory's own placeholder, which v0 never lists, once)
        gets = [urllib.parse.unquote(r[1]) for r in fb.server.requests if r[0] == "GET" and "/o/" in r[1]]
        files = [g for g in gets if g.endswith(".txt")]
        twice = sorted({f.rsplit("/", 1)[1] for f in files if files.count(f) > 1})
        assert len(files) == n and len(set(files)) == n, (len(files), len(set(files)), twice, took)
        # The directory's own attributes live the TTL too: `ls -l` looks at "." again, and its
        # placeholder is read once each time they expired (once a TTL of the ls -l, on a machine
        # slow enough to take two TTLs, twice).
        assert len(gets) - len(files) <= 1 + int(took // ttl), (len(gets), took)
        fb.server.reset_stats()
        sh(["getfattr", "-d", "--", *names])
        stats = fb.server.snapshot_stats()
        assert stats["list"] == 0 and stats["get"] == 0, stats
        # Expired: read again (with the names, listed again), many at once.
        time.sleep(ttl + 0.5)
        fb.server.latency = 0.01
        fb.server.reset_stats()
        sh(["getfattr", "-d", "--", *names])
        stats = fb.server.snapshot_stats()
        gets = [urllib.parse.unquote(r[1]) for r in fb.server.requests if r[0] == "GET" and "/o/" in r[1]]
        files = [g for g in gets if g.endswith(".txt")]
        assert len(set(files)) == n and len(gets) <= n + 1 and stats["list"] >= pages, (len(files), len(gets), stats)
        assert stats["most_at_once"] >= 2, stats
    finally:
        os.chdir(cwd)
        fb.server.latency = 0


# --- outages, refused sessions, small things ----------------------------------------------------

CHECK_BOUND = 5  # the mount check's bound (SourceCheck.probeTimeout; docs/SEMANTICS.md §3.1)
STARTUP = 3      # margin over the check's bound and the process's own start (startup_seconds, measured)


def dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def well_formed(err):
    depth = 0
    for c in err:
        depth += c == "("
        depth -= c == ")"
        assert depth >= 0, f"a ')' closes nothing: {err}"
    assert depth == 0, f"a '(' is never closed: {err}"
    assert "HTTP 0" not in err and "errno" not in err, err


def timed(*args, env=None):
    t = time.time()
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, env=env, timeout=120)
    return p, time.time() - t


def test_firebase_auth_down_fails_fast_naming_auth(fb, tmp_path):
    """Auth refuses connections, storage answers: the mount's check and each command fail within
    the check's bound (default timings), naming Firebase Auth and the variable that set it."""
    fb.login_email()
    port = dead_port()
    env = {**os.environ, "FIREBASE_AUTH_EMULATOR_HOST": f"127.0.0.1:{port}"}
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in (["mount", f"{SRC}/{fb.home()}", mnt], ["ls", f"{SRC}/{fb.home()}"], ["whoami", SRC],
                 ["login", SRC, "--api-key", API_KEY, "--email", fb.email, "--password-file", fb.password_file]):
        p, took = timed(*args, env=env)
        err = p.stderr.decode()
        assert p.returncode == 1 and took < CHECK_BOUND + STARTUP + startup_seconds(), (args[0], took, err)
        assert "Firebase Auth" in err and f"127.0.0.1:{port}" in err and "Connection refused" in err, (args[0], err)
        assert f"FIREBASE_AUTH_EMULATOR_HOST=127.0.0.1:{port}" in err, (args[0], err)
        assert "Firebase Storage" not in err, f"storage blamed: {err}"
        well_formed(err)
    assert not os.path.ismount(mnt)
    # An Auth server that takes the connection and never answers: the bound holds all the same.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        env["FIREBASE_AUTH_EMULATOR_HOST"] = f"127.0.0.1:{silent.getsockname()[1]}"
        for args in (["mount", f"{SRC}/{fb.home()}", mnt], ["ls", f"{SRC}/{fb.home()}"], ["whoami", SRC]):
            p, took = timed(*args, env=env)
            err = p.stderr.decode()
            assert p.returncode == 1 and took < CHECK_BOUND + STARTUP + startup_seconds(), (args[0], took, err)
            assert "Firebase Auth" in err and "did not answer" in err and "FIREBASE_AUTH_EMULATOR_HOST" in err, err
            well_formed(err)
    assert not os.path.ismount(mnt)


def test_firebase_storage_down_fails_fast_naming_storage(fb, tmp_path):
    fb.login_email()
    port = dead_port()
    env = {**os.environ, "FIREBASE_STORAGE_EMULATOR_HOST": f"127.0.0.1:{port}"}
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in (["mount", f"{SRC}/{fb.home()}", mnt], ["ls", f"{SRC}/{fb.home()}"], ["cat", f"{SRC}/{fb.home('a.txt')}"]):
        p, took = timed(*args, env=env)
        err = p.stderr.decode()
        assert p.returncode == 1 and took < CHECK_BOUND + STARTUP + startup_seconds(), (args[0], took, err)
        assert f"cannot reach http://127.0.0.1:{port} (Firebase Storage)" in err, (args[0], err)
        assert f"FIREBASE_STORAGE_EMULATOR_HOST=127.0.0.1:{port}" in err, (args[0], err)
        assert "Firebase Auth" not in err, err
        well_formed(err)
    assert not os.path.ismount(mnt)


def test_firebase_refused_session_revives_after_a_new_login(fb, mounts, tmp_path):
    """The server forgets the refresh token: operations fail with EACCES and the log gives the
    whole line to sign in again, emulator endpoints included; once the user runs it (here: as
    copied from the log, with no emulator variable set), the running mount works again."""
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--metadata-ttl", "0.5", "--failure-ttl", "0.5")
    assert sh(["cat", f"{mnt}/a.txt"]).stdout == b"alpha\n"
    fb.server.revoke(fb.uid)
    fb.server.expire(fb.uid)
    (tmp_path / "w").write_text("after\n")
    rc, err = errno_of(["cp", str(tmp_path / "w"), f"{mnt}/refused.txt"])
    assert rc != 0 and "Permission denied" in err, err
    hostport = fb.server.hostport
    line = (f"bucketfs login {SRC} --api-key {API_KEY} --email {fb.email} "
            f"--auth-endpoint http://{hostport} --endpoint http://{hostport}")
    wait_for(lambda: line in open(mounts.log_path(mnt)).read(), what="the sign-in-again line with the endpoints")
    # Still refused while nobody signs in again.
    time.sleep(0.6)
    assert errno_of(["cp", str(tmp_path / "w"), f"{mnt}/refused.txt"])[0] != 0
    # The logged line, as copied, signs in to the same server even without the emulator variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREBASE_")}
    args = line.split()[1:] + ["--password-file", str(fb.password_file)]
    run(*args, env=env)
    kept = json.loads(fb.login_file.read_text())
    assert kept["authEndpoint"] == f"http://{hostport}" and kept["storageEndpoint"] == f"http://{hostport}", kept

    def works():
        return errno_of(["cp", str(tmp_path / "w"), f"{mnt}/revived.txt"])[0] == 0
    wait_for(works, timeout=10, what="the running mount to take the new login")
    assert fb.server.get_object(BUCKET, fb.home("revived.txt")).data == b"after\n"
    assert sh(["cat", f"{mnt}/a.txt"]).stdout == b"alpha\n"
    assert "newer login" in open(mounts.log_path(mnt)).read()


def test_firebase_logout_leaves_running_mounts_signed_in(fb, mounts, tmp_path):
    """What `logout` says about running mounts is what they do: they keep their refresh token
    and go on (through new ID tokens) until the server refuses it."""
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--metadata-ttl", "0.5", "--failure-ttl", "0.5")
    out = run("logout", SRC).stdout.decode()
    assert "running mounts of this bucket are not signed out" in out, out
    assert not fb.login_file.exists()
    before = fb.server.snapshot_stats()["refresh"]
    fb.server.expire(fb.uid)
    (tmp_path / "w").write_text("still here\n")
    sh(["cp", str(tmp_path / "w"), f"{mnt}/after-logout.txt"])
    assert fb.server.get_object(BUCKET, fb.home("after-logout.txt")).data == b"still here\n"
    assert fb.server.snapshot_stats()["refresh"] > before, "no new ID token was fetched"
    # Until the server refuses the refresh token: then EACCES, and no login file to revive from.
    fb.server.revoke(fb.uid)
    fb.server.expire(fb.uid)
    time.sleep(0.6)
    rc, err = errno_of(["cp", str(tmp_path / "w"), f"{mnt}/refused.txt"])
    assert rc != 0 and "Permission denied" in err, err


def test_firebase_put_no_clobber_says_the_object_exists(fb, tmp_path):
    fb.login_email()
    f = tmp_path / "x.txt"
    f.write_text("one\n")
    run("put", f, f"{SRC}/{fb.home('x.txt')}", "--no-clobber")
    f.write_text("two\n")
    p = run("put", f, f"{SRC}/{fb.home('x.txt')}", "--no-clobber", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and "already exists; nothing was written" in err and "changed" not in err, err
    assert fb.server.get_object(BUCKET, fb.home("x.txt")).data == b"one\n"


def test_firebase_help_texts():
    whoami = run("whoami", "--help").stdout.decode()
    # whoami takes the gs:// credentials too (whoami gs://BUCKET), each marked as for gs:// only.
    for option in ("--key-file", "--token", "--anonymous", "--impersonate-service-account"):
        assert option in whoami, whoami
    assert "gs:// only" in whoami
    assert "--auth-endpoint" in whoami
    assert "bucketfs mount firebase://" in run("mount", "--help").stdout.decode()
    assert "running mounts" in run("logout", "--help").stdout.decode()


def test_firebase_public_and_own_folder_as_two_mounts(fb, mounts, tmp_path):
    """Rules that let no one list the root: the root's mount is refused with the prefix to mount
    instead, and `public/` and `users/UID/` are reached as two mounts side by side (FIREBASE.md)."""
    fb.server.set_rules({"version": 2, "rules": [
        {"match": "users/{uid}/{rest=**}", "allow": {"read,write": "owner"}},
        {"match": "public/{rest=**}", "allow": {"read": "auth"}},
    ]})
    fb.server.put_object(BUCKET, "public/hello.txt", b"hello\n", "text/plain")
    fb.server.put_object(BUCKET, fb.home("mine.txt"), b"mine\n", "text/plain")
    fb.login_email()
    root = tmp_path / "root"
    root.mkdir()
    p = subprocess.run([BIN, "mount", SRC, str(root)], capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 1 and f"Or mount a prefix the rules let you list, e.g. {SRC}/{fb.home()}" in err, err
    mine = mounts.mount(f"{SRC}/{fb.home()}")
    public = mounts.mount(f"{SRC}/public")
    assert open(f"{mine}/mine.txt").read() == "mine\n"
    assert open(f"{public}/hello.txt").read() == "hello\n"
    assert "hello.txt" in run("ls", f"{SRC}/public").stdout.decode()


# --- names: buckets checked before any request, every segment encoded -------------------------

def test_firebase_names_that_are_not_buckets_reach_no_server(fb):
    """`login firebase://Bad_Bucket!` and `firebase://..` said "signed in" and sent `GET /v0/b/../o`:
    now they are refused by Cloud Storage's naming rules before any request."""
    fb.server.reset_stats()
    for src in ["firebase://Bad_Bucket!", "firebase://..", "firebase://ab"]:
        p = run("login", src, "--api-key", API_KEY, "--anonymous", check=False)
        err = p.stderr.decode()
        assert p.returncode != 0 and "not a bucket name" in err, (src, p.returncode, err)
        p = run("ls", src + "/x", check=False)
        assert p.returncode != 0 and "not a bucket name" in p.stderr.decode(), (src, p.stderr)
    assert fb.server.snapshot_stats()["requests"] == 0, fb.server.requests


def test_firebase_awkward_names_reach_their_objects(fb, mounts):
    """Every path segment is percent-encoded, `.`-runs included: names with `..`, `%`, `#`, `?`,
    spaces and non-ASCII reach exactly their own objects through the library and the mount."""
    fb.login_email()
    names = ["a..b.txt", "..hidden-ish", "per%cent", "hash#tag", "what?ever", "two words", "née ünïcode", "..."]
    for n in names:
        run("put", "-", f"{SRC}/{fb.home('awk/' + n)}", input=n.encode())
    for n in names:
        obj = fb.server.get_object(BUCKET, fb.home("awk/" + n))
        assert obj is not None and obj.data == n.encode(), n
        assert run("cat", f"{SRC}/{fb.home('awk/' + n)}").stdout == n.encode(), n
    mnt = mounts.mount(f"{SRC}/{fb.home()}")
    shown = sorted(os.listdir(f"{mnt}/awk"))
    assert shown == sorted(names), shown
    for n in names:
        assert open(f"{mnt}/awk/{n}", "rb").read() == n.encode(), n
