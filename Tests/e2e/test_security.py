"""Private by default (docs/SECURITY.md), tried as a second local user would: a mount made by
root with --allow-other, and user `nobody` (setpriv --reuid=65534 --regid=65534 --clear-groups)
reading through it and around it, on the embedded bucket and on gs:// (gcp-storage-emulator).

Every directory the test makes is 0755 under /tmp, so that the only thing that keeps `nobody`
out of a file is the mode bucketfs gave it (or its directory). Each test also checks, as root,
that every file bucketfs wrote is 0600 and every directory 0700."""
import errno
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.request
import uuid

import pytest

from conftest import BIN, eventually, free_port, run, server
from daemons import daemon_pid

NOBODY = 65534
TOKEN = "ya29.security-test-" + uuid.uuid4().hex

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root (mounts with --allow-other) and setpriv (util-linux) to act as nobody")

# Run as nobody: each argument is OP=PATH; prints {argument: outcome}. Outcomes: "read:<bytes>",
# "listed:<names>", "wrote", or the errno's name.
PROBE = r'''
import errno, json, os, sys
out = {}
for arg in sys.argv[1:]:
    op, path = arg.split("=", 1)
    try:
        if op == "read":
            with open(path, "rb") as f:
                out[arg] = "read:" + f.read(4096).decode("utf-8", "replace")
        elif op == "list":
            out[arg] = "listed:" + ",".join(sorted(os.listdir(path)))
        elif op == "write":
            with open(path, "wb") as f:
                f.write(b"nobody was here")
            out[arg] = "wrote"
        elif op == "walk":
            names = []
            for root, dirs, files in os.walk(path):
                names += [os.path.relpath(os.path.join(root, n), path) for n in dirs + files]
            out[arg] = "listed:" + ",".join(sorted(names))
    except OSError as e:
        out[arg] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
'''


def as_nobody(*ops):
    p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        "/usr/bin/python3", "-c", PROBE, *ops], capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def tree(root):
    """Every path under `root` (itself included), as root sees them."""
    out = [root]
    for r, dirs, files in os.walk(root):
        out += [os.path.join(r, n) for n in dirs + files]
    return out


def assert_private(paths):
    """Each path bucketfs wrote: a directory 0700, a file 0600."""
    for p in paths:
        want = 0o700 if os.path.isdir(p) and not os.path.islink(p) else 0o600
        assert mode(p) == want, f"{p} is {oct(mode(p))}, not {oct(want)}"


def listening_addresses(port):
    """Local addresses of the sockets listening on `port` (IPv4 and IPv6), from /proc/net."""
    out = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(f).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) == port and state == "0A":
                out.append(addr)
    return out


class Place:
    """A directory under /tmp that everyone may enter (0755), and the mounts made in it."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="bucketfs-security-", dir="/tmp")
        os.chmod(self.path, 0o755)
        self.points = []

    def dir(self, name):
        p = os.path.join(self.path, name)
        os.makedirs(p, exist_ok=True)
        os.chmod(p, 0o755)
        return p

    def mount(self, source, name, *options, check=True):
        mnt = self.dir(name)
        self.points.append(mnt)
        p = subprocess.run([BIN, "mount", source, mnt, *map(str, options)], capture_output=True, text=True, timeout=60)
        if check:
            assert p.returncode == 0, f"mount failed: {p.stderr}"
        return mnt, p

    def unmount(self, mnt):
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True, timeout=30)
        deadline = time.time() + 15
        while time.time() < deadline and os.path.ismount(mnt):
            time.sleep(0.05)

    def cleanup(self):
        for m in self.points:
            subprocess.run(["fusermount3", "-uz", m], capture_output=True, timeout=30)
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def place():
    p = Place()
    assert as_nobody(f"list={p.path}")[f"list={p.path}"].startswith("listed:"), "nobody must reach the test directory"
    yield p
    p.cleanup()


@pytest.fixture(params=["embedded", "gs"])
def source(request, place):
    """(SOURCE, extra mount options, the bucket directory or None). gs:// goes to
    gcp-storage-emulator with a token on the command line (the emulator ignores it) on a prefix of
    its own."""
    if request.param == "embedded":
        b = os.path.join(place.path, "bucket")
        assert run("mb", b).stderr == b""
        return b, [], b
    srv = server("emulator")
    return f"gs://{srv.bucket_name}/sec-{uuid.uuid4().hex[:10]}", ["--endpoint", srv.endpoint, "--token", TOKEN], None


def test_a_second_user_reads_nothing_it_should_not(place, source):
    src, extra, bucket_dir = source
    cache = os.path.join(place.path, "cache")
    logs = place.dir("logs")
    log, requests = os.path.join(logs, "bucketfs.log"), os.path.join(logs, "requests.log")
    port = free_port()
    options = ["--allow-other", "--cache-dir", cache, "--log-file", log, "--request-log", requests,
               "--log-level", "info", "--metrics-address", port, *extra]
    mnt, _ = place.mount(src, "mnt", *options)
    with open(f"{mnt}/s.txt", "w") as f:
        f.write("secret-s")
    os.chmod(f"{mnt}/s.txt", 0o600)
    with open(f"{mnt}/p.txt", "w") as f:
        f.write("public-p")
    os.chmod(f"{mnt}/p.txt", 0o644)
    # A file being written: its stage file and sidecar are in the cache directory until close.
    fd = os.open(f"{mnt}/w.txt", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"staged-secret")
    stages = [n for n in os.listdir(cache) if n.startswith("stage-")]
    assert any(n.endswith(".json") for n in stages) and any("." not in n for n in stages), stages

    around = tree(cache) + [log, requests] + (tree(bucket_dir) if bucket_dir else [])
    if bucket_dir:
        assert any("/blobs/" in p for p in around) and f"{bucket_dir}/bucket.sqlite" in around
    pid = daemon_pid(mnt)
    ops = [f"read={mnt}/s.txt", f"read={mnt}/p.txt", f"list={mnt}", f"write={mnt}/nobody.txt",
           f"read=/proc/{pid}/cmdline", f"read=/proc/{pid}/environ"]
    ops += [("list=" if os.path.isdir(p) else "read=") + p for p in around]
    seen = as_nobody(*ops)
    # Through the mount: the kernel checks the modes bucketfs shows.
    assert seen[f"read={mnt}/s.txt"] == "EACCES"
    assert seen[f"read={mnt}/p.txt"] == "read:public-p"
    assert seen[f"list={mnt}"].startswith("listed:") and "s.txt" in seen[f"list={mnt}"]
    assert seen[f"write={mnt}/nobody.txt"] == "EACCES"
    # Around it: the bucket's directory, blobs and database, the cache directory, its stage files
    # and sidecars, the log and the request log.
    leaks = {op: seen[op][:40] for op in seen if op.split("=", 1)[1] in around and seen[op] != "EACCES"}
    assert leaks == {}, f"nobody got: {leaks}"
    assert_private(around)
    # The process title holds no token (the environment is the owner's and root's alone).
    assert seen[f"read=/proc/{pid}/cmdline"].startswith("read:")
    assert TOKEN not in seen[f"read=/proc/{pid}/cmdline"]
    assert seen[f"read=/proc/{pid}/environ"] == "EACCES"
    # Metrics: on loopback, and no object name, content or token in them.
    assert listening_addresses(port) == ["0100007F"]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "bucketfs_fuse_operations_total" in metrics
    for word in ("s.txt", "p.txt", "w.txt", "secret", TOKEN):
        assert word not in metrics

    # A crash with w.txt unsaved: the next mount keeps its data in lost+found. Each fork above
    # closed a copy of `fd` in its child, and a close uploads (it is a flush): what is written now,
    # with no close after it, is what the crash leaves unsaved (kept as a cut-off entry).
    os.write(fd, b" and more, never closed")
    os.kill(pid, signal.SIGKILL)
    try:
        os.close(fd)
    except OSError:
        pass
    subprocess.run(["fusermount3", "-uz", mnt], capture_output=True, timeout=30)
    mnt2, _ = place.mount(src, "mnt2", *options)
    lost = os.path.join(cache, "lost+found")
    # (The mount settles what the crash left in the background, as it serves.)
    assert eventually(lambda: any("w.txt." in n and not n.endswith(".json") for n in os.listdir(lost))), os.listdir(lost)
    around = tree(cache) + [log, requests]
    seen = as_nobody(*[("list=" if os.path.isdir(p) else "read=") + p for p in around])
    leaks = {op: seen[op][:40] for op in seen if op.split("=", 1)[1] in around and seen[op] != "EACCES"}
    assert leaks == {}, f"nobody got: {leaks}"
    assert_private(around)
    place.unmount(mnt2)


def test_the_login_file_is_the_users_alone(place, firebase_server, monkeypatch):
    config = place.dir("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", config)
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", firebase_server.hostport)
    monkeypatch.setenv("FIREBASE_STORAGE_EMULATOR_HOST", firebase_server.hostport)
    from firebase_http import BUCKET
    run("login", f"firebase://{BUCKET}", "--api-key", "test-api-key", "--anonymous")
    login = os.path.join(config, "bucketfs", f"firebase-{BUCKET}.json")
    assert os.path.exists(login)
    assert mode(os.path.dirname(login)) == 0o700 and mode(login) == 0o600
    seen = as_nobody(f"read={login}", f"list={os.path.dirname(login)}")
    assert seen == {f"read={login}": "EACCES", f"list={os.path.dirname(login)}": "EACCES"}


def test_names_written_by_other_tools_never_leave_the_mount(place, source):
    src, extra, bucket_dir = source
    hostile = ["../escape.txt", "a/../../escape2.txt", "./dot.txt", "b/./c.txt", "x//y.txt", "fine.txt"]
    accepted = []
    if bucket_dir:
        for n in hostile:
            run("put", "-", bucket_dir, "--object", n, input=b"from another tool")
            accepted.append(n)
    else:
        # With the official client, as another tool would. gcp-storage-emulator keeps objects as
        # files and refuses names with a `.` or `..` segment; the names it takes are tested.
        srv = server("emulator")
        prefix = src.split("/", 3)[3]
        for n in hostile:
            try:
                srv.bucket().blob(f"{prefix}/{n}").upload_from_string(b"from another tool", retry=None, timeout=10)
                accepted.append(n)
            except Exception:
                pass
        assert "x//y.txt" in accepted and len(accepted) >= 2, accepted
    shown = sorted({n.split("/")[0] for n in accepted} - {".", "..", ""})
    cache = os.path.join(place.path, "cache")
    mnt, _ = place.mount(src, "mnt", "--allow-other", "--cache-dir", cache, *extra)
    seen = as_nobody(f"walk={mnt}")[f"walk={mnt}"]
    names = seen.removeprefix("listed:").split(",")
    # `a`, `b` and `x` are real prefixes, so they show as directories; nothing under a `.`, `..`
    # or empty segment shows, and no name is rewritten into one that reaches elsewhere.
    assert sorted(names) == shown, (names, accepted)
    if bucket_dir:
        assert shown == ["a", "b", "fine.txt", "x"]
    assert not any(n.startswith("escape") for n in os.listdir(place.path))
    assert not any(n.startswith("escape") for n in os.listdir(os.path.dirname(place.path)))


def test_links_that_leave_the_mount_are_followed_by_the_kernel_only(place):
    bucket = os.path.join(place.path, "bucket")
    run("mb", bucket)
    outside = os.path.join(place.path, "outside-secret.txt")
    with open(outside, "w") as f:
        f.write("root's own")
    os.chmod(outside, 0o600)
    requests = os.path.join(place.dir("logs"), "requests.log")
    mnt, _ = place.mount(bucket, "mnt", "--allow-other", "--cache-dir", os.path.join(place.path, "cache"),
                         "--request-log", requests)
    os.symlink(outside, f"{mnt}/link")
    os.symlink("../../../../../etc/shadow", f"{mnt}/up")
    seen = as_nobody(f"read={mnt}/link", f"read={mnt}/up")
    # The kernel resolves the target outside the mount and checks its mode there.
    assert seen == {f"read={mnt}/link": "EACCES", f"read={mnt}/up": "EACCES"}
    assert os.readlink(f"{mnt}/link") == outside
    with open(f"{mnt}/link") as f:   # root may: the kernel opens the local file
        assert f.read() == "root's own"
    # The daemon never looked at the targets: every request names an object of the bucket.
    names = {line.split(" ", 1)[1] for line in open(requests).read().splitlines()}
    assert not any("outside-secret" in n or "shadow" in n for n in names), names


def test_allow_other_with_and_without_uid(place):
    bucket = os.path.join(place.path, "bucket")
    run("mb", bucket)
    run("put", "-", os.path.join(bucket, "keyless.txt"), input=b"no mode or owner keys")  # as another tool writes
    cache = lambda n: ["--cache-dir", os.path.join(place.path, n)]
    # Without --uid: an object with no owner key is the mounting user's, with --file-mode.
    mnt, _ = place.mount(bucket, "mine", "--allow-other", "--file-mode", "640", *cache("c1"))
    seen = as_nobody(f"read={mnt}/keyless.txt", f"write={mnt}/new.txt")
    assert seen == {f"read={mnt}/keyless.txt": "EACCES", f"write={mnt}/new.txt": "EACCES"}
    place.unmount(mnt)
    # With --uid/--gid nobody: nobody owns every object and directory without keys, so it may
    # read them and create files in them.
    mnt, _ = place.mount(bucket, "theirs", "--allow-other", "--file-mode", "640", "--uid", NOBODY, "--gid", NOBODY,
                         *cache("c2"))
    seen = as_nobody(f"read={mnt}/keyless.txt", f"write={mnt}/new.txt")
    assert seen == {f"read={mnt}/keyless.txt": "read:no mode or owner keys", f"write={mnt}/new.txt": "wrote"}
    place.unmount(mnt)
    # Without --allow-other nobody does not get in at all.
    mnt, _ = place.mount(bucket, "alone", *cache("c3"))
    assert as_nobody(f"list={mnt}") == {f"list={mnt}": "EACCES"}


def make_old_bucket(path):
    """An embedded bucket with the modes an earlier version left (the umask's 0755 and 0644)."""
    run("mb", path)
    run("put", "-", os.path.join(path, "s.txt"), input=b"secret")
    for p in tree(path):
        os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)


def test_an_older_bucket_is_reported_until_the_chmod(place):
    old = os.path.join(place.path, "old")
    make_old_bucket(old)
    assert as_nobody(f"list={old}/blobs")[f"list={old}/blobs"].startswith("listed:")
    p = run("ls", old)
    err = p.stderr.decode()
    assert err.count("warning:") == 1, err
    assert f"other users can read the embedded bucket {old}" in err and f"chmod -R go-rwx {old}" in err
    assert f"{old}/bucket.sqlite (mode 644)" in err
    assert run("mb", old).stderr.decode().count(f"chmod -R go-rwx {old}") == 1
    # --allow-shared-files silences it, and changes nothing.
    assert run("ls", old, "--allow-shared-files").stderr == b""
    assert mode(old) == 0o755
    # A mount says it once, before it returns.
    mnt, m = place.mount(old, "mnt", "--cache-dir", os.path.join(place.path, "cache"))
    assert m.stderr.count("warning:") == 1 and f"chmod -R go-rwx {old}" in m.stderr, m.stderr
    place.unmount(mnt)
    # The chmod it names makes the bucket private: then it opens silently, and nobody is out.
    subprocess.run(["chmod", "-R", "go-rwx", old], check=True)
    assert run("ls", old).stderr == b"" and run("mb", old).stderr == b""
    assert run("cat", os.path.join(old, "s.txt")).stdout == b"secret"
    mnt, m = place.mount(old, "mnt2", "--cache-dir", os.path.join(place.path, "cache"))
    assert m.stderr == "", m.stderr
    assert as_nobody(f"list={old}") == {f"list={old}": "EACCES"}


def test_a_cache_directory_or_log_others_can_read_is_reported(place):
    bucket = os.path.join(place.path, "bucket")
    run("mb", bucket)
    cache = place.dir("shared-cache")      # 0755, made by hand
    log = os.path.join(place.dir("logs"), "old.log")
    open(log, "w").close()
    os.chmod(log, 0o644)
    mnt, m = place.mount(bucket, "mnt", "--cache-dir", cache, "--log-file", log)
    assert m.stderr.count("warning:") == 2, m.stderr
    assert f"the cache directory {cache}" in m.stderr and f"chmod -R go-rwx {cache}" in m.stderr
    assert f"the log file {log}" in m.stderr and f"chmod go-rwx {log}" in m.stderr
    place.unmount(mnt)
    mnt, m = place.mount(bucket, "mnt2", "--cache-dir", cache, "--log-file", log, "--allow-shared-files")
    assert m.stderr == "", m.stderr


def test_read_only_refuses_what_the_other_read_only_tests_do_not(place):
    """test_mount_write.py::test_read_only_refuses_every_change covers create, write, truncate,
    mkdir, rmdir, unlink, rename and utimens; here the rest: chmod, chown, symlink, xattrs."""
    bucket = os.path.join(place.path, "bucket")
    run("mb", bucket)
    run("put", "-", os.path.join(bucket, "f.txt"), input=b"f")
    mnt, _ = place.mount(bucket, "mnt", "--read-only", "--allow-other", "--cache-dir", os.path.join(place.path, "cache"))

    def err(f):
        try:
            f()
        except OSError as e:
            return e.errno
        return 0

    f = f"{mnt}/f.txt"
    assert err(lambda: os.chmod(f, 0o600)) == errno.EROFS
    assert err(lambda: os.chown(f, NOBODY, NOBODY)) == errno.EROFS
    assert err(lambda: os.symlink("/etc/passwd", f"{mnt}/l")) == errno.EROFS
    assert err(lambda: os.setxattr(f, "user.k", b"v")) == errno.EROFS
    assert err(lambda: os.removexattr(f, "user.k")) == errno.EROFS
    assert as_nobody(f"write={mnt}/n.txt", f"read={f}") == {f"write={mnt}/n.txt": "EROFS", f"read={f}": "read:f"}
