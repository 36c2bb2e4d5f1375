"""The path real users take: TLS to the storage and Auth endpoints, through nginx as a TLS front
(Scripts/tls-front.sh: a private CA, HTTP/2 and HTTP/1.1 on two ports, a certificate for another
name, an expired one) in front of each test server. docs/OPERATING.md ("A private CA") and
docs/SEMANTICS.md §5 (certificate errors).

- gs:// (gcp-storage-emulator) and firebase:// (firebase_server.py) mounted through each front
  port with `--ca-file`: listings, reads, writes (small and resumable-sized), xattrs; nginx's
  access log shows every request came by the protocol of that port.
- a fault behind the front (faultproxy.py between nginx and the emulator): retried, right bytes.
- certificate errors: untrusted (no --ca-file), wrong name, expired, a bad --ca-file; each fails
  the mount check within 2 s with a message that says "certificate", names the host and the fix.
  SSL_CERT_FILE works in place of --ca-file.

nginx comes from Scripts/tls-front.sh, which installs Debian's nginx-light when it is missing;
the tests skip only when it cannot be installed (exit status 3). Ports: four from
BUCKETFS_TLS_PORT (default 9455) upward, the first free run of four.
"""
import os
import re
import socket
import subprocess
import time
import uuid

import pytest

from conftest import BIN, ROOT, run, server, sh, startup_seconds
from faultproxy import FaultProxy

FRONT = os.path.join(ROOT, "Scripts", "tls-front.sh")
BASE = int(os.environ.get("BUCKETFS_TLS_PORT", "9455"))
CHECK_BOUND = 2.0  # seconds: a certificate failure fails the mount check at once (beyond the process's own start: startup_seconds)


def _free_run(n=4, tries=15):
    for base in range(BASE, BASE + n * tries, n):
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx binds
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no four free ports from {BASE}")


class Front:
    """nginx with TLS in front of `backend` (host:port), started by Scripts/tls-front.sh."""

    def __init__(self, backend, directory):
        self.dir = str(directory)
        self.port = _free_run()
        self.env = dict(os.environ, TLS_FRONT_PORT=str(self.port), TLS_FRONT_DIR=self.dir)
        p = subprocess.run([FRONT, "start", backend], capture_output=True, text=True, env=self.env, timeout=600)
        if p.returncode == 3:
            pytest.skip(f"nginx cannot be installed here: {p.stderr.strip()}")
        assert p.returncode == 0, f"tls-front.sh start failed: {p.stderr}"
        exports = dict(re.findall(r"^export (\w+)=(.*)$", p.stdout, re.M))
        self.ca = exports["BUCKETFS_TLS_CA"]
        self.h2 = exports["BUCKETFS_TLS_H2"]
        self.h1 = exports["BUCKETFS_TLS_H1"]
        self.wrong_name = exports["BUCKETFS_TLS_WRONG_NAME"]
        self.expired = exports["BUCKETFS_TLS_EXPIRED"]
        self.access_log = exports["BUCKETFS_TLS_ACCESS_LOG"]

    def url(self, protocol):
        return {"h2": self.h2, "h1": self.h1}[protocol]

    def requests(self, url, connections=False):
        """(request line, protocol[, connection]) of every request nginx logged on `url`'s port."""
        port = url.rsplit(":", 1)[1]
        with open(self.access_log) as f:
            found = [m for m in (re.match(r'^\S+ (\d+) "([^"]*)" \d+ \d+ (\S+) (\S+)', line) for line in f)
                     if m and m.group(1) == port]
        return [(m.group(2), m.group(3), m.group(4)) if connections else (m.group(2), m.group(3)) for m in found]

    def stop(self):
        subprocess.run([FRONT, "stop"], capture_output=True, env=self.env, timeout=60)


@pytest.fixture
def fronts(tmp_path):
    made = []

    def start(backend):
        f = Front(backend, tmp_path / f"front-{len(made)}")
        made.append(f)
        return f
    yield start
    for f in made:
        f.stop()


def _mount_check(source, *options, env=None, mnt=None):
    """Runs a mount expected to be refused: (stderr, seconds)."""
    t = time.monotonic()
    p = subprocess.run([BIN, "mount", source, str(mnt), *map(str, options)], capture_output=True, text=True,
                       env=env, timeout=60)
    took = time.monotonic() - t
    if p.returncode == 0:  # not refused: leave no mount behind
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=30)
    assert p.returncode != 0, f"the mount was not refused: {p.stdout}{p.stderr}"
    assert not os.path.ismount(str(mnt))
    return p.stderr, took


def _exercise(mnt, tmp_path, seeded):
    """Listings, reads, writes (one small, one resumable-sized), xattrs through a mount."""
    out = sh(["ls", "-l", mnt]).stdout.decode()
    for name, data in seeded.items():
        assert re.search(rf"^-.* {len(data)} .* {re.escape(name)}$", out, re.M), out
        assert sh(["cat", f"{mnt}/{name}"]).stdout == data
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(200_000))
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * 1024 * 1024 + 4321))
    sh(["cp", str(small), str(big), mnt])
    sh(["cmp", str(small), f"{mnt}/small.bin"])
    sh(["cmp", str(big), f"{mnt}/big.bin"])
    sh(["setfattr", "-n", "user.color", "-v", "blue", f"{mnt}/small.bin"])
    assert 'user.color="blue"' in sh(["getfattr", "-d", f"{mnt}/small.bin"]).stdout.decode()
    sh(["mkdir", f"{mnt}/sub"])
    sh(["cp", str(small), f"{mnt}/sub/again.bin"])
    assert sorted(os.listdir(f"{mnt}/sub")) == ["again.bin"]


def _all_by(front, url, protocol):
    reqs = front.requests(url)
    assert reqs, f"no request reached nginx on {url}"
    wrong = [r for r in reqs if r[1] != protocol]
    assert not wrong, f"requests on {url} not over {protocol}: {wrong[:5]}"
    return reqs


# --- gs:// ---------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["h2", "h1"])
def test_gs_mount_through_tls_front(protocol, fronts, mounts, tmp_path):
    emu = server("emulator")
    front = fronts(emu.hostport)
    url = front.url(protocol)
    # on the HTTP/1.1 port the default; on the other, HTTP/2 for everything (the default reads
    # object data over HTTP/1.1: test_http_version_and_connections_counted)
    opts = ["--endpoint", url, "--anonymous", "--ca-file", front.ca, *(["--http-version", "2"] if protocol == "h2" else [])]
    prefix = f"tls-{uuid.uuid4().hex[:10]}"
    src = f"gs://{emu.bucket_name}/{prefix}"
    seeded = {"a.txt": b"alpha\n", "b.bin": os.urandom(300_000)}
    for name, data in seeded.items():  # the library commands through the front too
        run("put", "-", f"{src}/{name}", *opts, input=data)
    assert run("cat", f"{src}/a.txt", *opts).stdout == b"alpha\n"
    mnt = mounts.mount(src, *opts, "--metadata-ttl", "1")
    _exercise(mnt, tmp_path, seeded)
    assert emu.bucket().blob(f"{prefix}/big.bin").download_as_bytes() == (tmp_path / "big.bin").read_bytes()
    reqs = _all_by(front, url, {"h2": "HTTP/2.0", "h1": "HTTP/1.1"}[protocol])
    assert any("/upload/" in r[0] for r in reqs) and any("alt=media" in r[0] for r in reqs), reqs[:10]


def test_gs_fault_behind_tls_front(fronts, mounts, tmp_path):
    """A body cut mid-way and a 503 behind nginx: retried through the front, the right bytes."""
    emu = server("emulator")
    with FaultProxy(emu.hostport) as proxy:
        front = fronts(proxy.endpoint.split("//", 1)[1])
        opts = ["--endpoint", front.h2, "--anonymous", "--ca-file", front.ca, "--http-version", "2"]
        prefix = f"tlsf-{uuid.uuid4().hex[:10]}"
        data = os.urandom(3 * 1024 * 1024 + 17)
        emu.bucket().blob(f"{prefix}/f.bin").upload_from_string(data)
        mnt = mounts.mount(f"gs://{emu.bucket_name}/{prefix}", *opts, "--op-timeout", "20", "--read-ahead-mb", "0")
        cut = proxy.add_rule(method="GET", query_re=r"(^|&)alt=media(&|$)", action="reset_mid_body", times=1,
                             bytes=100_000)
        busy = proxy.add_rule(method="GET", query_re=r"(^|&)alt=media(&|$)", action="status", status=503, times=1)
        t = time.monotonic()
        assert sh(["cat", f"{mnt}/f.bin"], timeout=60).stdout == data
        assert time.monotonic() - t < 15
        assert cut.fired == 1 and busy.fired == 1, (cut.fired, busy.fired)
        _all_by(front, front.h2, "HTTP/2.0")


@pytest.mark.parametrize("choice,protocol", [("1.1", "HTTP/1.1"), ("2", "HTTP/2.0"), ("auto", None)])
def test_http_version_and_connections_counted(choice, protocol, fronts, mounts, tmp_path):
    """`--http-version` decides the protocol on a port that offers both; the mount reuses its
    connections (40 reads, a listing and a stat each: a handful of connections, not one per
    request), and says how many it made in its metrics and in its last log lines. `auto` (the
    default) reads object data over HTTP/1.1 and asks for everything else over HTTP/2."""
    emu = server("emulator")
    front = fronts(emu.hostport)
    prefix = f"conn-{uuid.uuid4().hex[:10]}"
    bucket = emu.bucket()
    files = {f"f{i:02d}.txt": os.urandom(1000 + i) for i in range(40)}
    for name, data in files.items():
        bucket.blob(f"{prefix}/{name}").upload_from_string(data)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    mnt = mounts.mount(f"gs://{emu.bucket_name}/{prefix}", "--endpoint", front.h2, "--anonymous", "--ca-file", front.ca,
                       "--http-version", choice, "--metrics-address", f"127.0.0.1:{metrics_port}",
                       "--read-ahead-mb", "0")
    assert len(sh(["ls", "-l", mnt]).stdout.decode().splitlines()) == 41
    for name, data in files.items():
        assert sh(["cat", f"{mnt}/{name}"]).stdout == data

    def ours():
        return [r for r in front.requests(front.h2, connections=True) if prefix in r[0]]

    def media_of(reqs):
        return [r for r in reqs if re.search(r"[?&]alt=media(&| |$)", r[0])]

    # nginx writes a request's line once it has sent the response: the last `cat` can return
    # before its line is written (seen in a CI run: 39 of 40)
    deadline = time.monotonic() + 10
    while len(media_of(ours())) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    reqs = ours()
    if protocol:
        assert len(reqs) >= 40 and {r[1] for r in reqs} == {protocol}, reqs[:5]
    else:
        media = media_of(reqs)
        rest = [r for r in reqs if r not in media]
        assert len(media) >= 40 and {r[1] for r in media} == {"HTTP/1.1"}, media[:5]
        assert rest and {r[1] for r in rest} == {"HTTP/2.0"}, rest[:5]
    seen = {r[2] for r in reqs}
    assert len(seen) <= 4, f"{len(reqs)} requests came on {len(seen)} connections"
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    counted = sum(int(float(v)) for v in re.findall(r'^bucketfs_store_connections_total\{[^}]*\} (\S+)$', text, re.M))
    handshakes = sum(int(float(v)) for v in re.findall(r'^bucketfs_store_tls_handshakes_total(?:\{[^}]*\})? (\S+)$', text, re.M))
    assert 1 <= counted <= 4 and handshakes == counted, text
    mounts.unmount(mnt)
    deadline = time.time() + 20  # the process logs it as it exits, after the unmount
    while "exiting" not in open(mounts.log_path(mnt)).read() and time.time() < deadline:
        time.sleep(0.1)
    log = open(mounts.log_path(mnt)).read()
    m = re.search(r"connections made: (\d+) connections? \(HTTP/1\.1: (\d+), HTTP/2: (\d+)\), (\d+) TLS handshake", log)
    assert m, log[-2000:]
    total, h1, h2, tls = map(int, m.groups())
    assert total == counted and tls == counted and h1 + h2 == total, m.group(0)
    assert {"2": h2, "1.1": h1, "auto": min(h1, h2) and h1 + h2}[choice] == total, m.group(0)


def test_http2_only_on_a_server_without_http2(fronts, mounts, tmp_path):
    """`--http-version 2` on a port that offers HTTP/1.1 only (ALPN chooses no h2): the mount
    check and a library command fail at once, saying the server does not offer HTTP/2 and to use
    `auto` or `1.1`; no request reaches the server in HTTP/1.1 (no silent fall back). `auto`
    mounts the same port (docs/SEMANTICS.md §5.6)."""
    emu = server("emulator")
    front = fronts(emu.hostport)
    host = front.h1.split("//", 1)[1]
    src = f"gs://{emu.bucket_name}/h2only-{uuid.uuid4().hex[:10]}"
    opts = ["--endpoint", front.h1, "--anonymous", "--ca-file", front.ca]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    err, took = _mount_check(src, *opts, "--http-version", "2", mnt=mnt)
    assert took < CHECK_BOUND + startup_seconds(), (took, err)
    assert host in err and "does not offer HTTP/2" in err and "--http-version auto" in err and "1.1" in err, err
    t = time.monotonic()
    p = run("ls", f"{src}/", *opts, "--http-version", "2", check=False)
    cmd_err = p.stderr.decode()
    assert p.returncode != 0 and time.monotonic() - t < CHECK_BOUND + startup_seconds(), cmd_err
    assert "does not offer HTTP/2" in cmd_err and "--http-version auto" in cmd_err, cmd_err
    assert front.requests(front.h1) == [], front.requests(front.h1)[:5]
    run("put", "-", f"{src}/a.txt", *opts, input=b"alpha\n")
    m = mounts.mount(src, *opts, "--http-version", "auto")
    assert sh(["cat", f"{m}/a.txt"]).stdout == b"alpha\n"
    _all_by(front, front.h1, "HTTP/1.1")


# --- firebase:// ---------------------------------------------------------------------------


@pytest.fixture
def fb_tls(firebase_server, tmp_path, monkeypatch, fronts):
    """A Firebase user on firebase_server.py behind a TLS front; no emulator variables set."""
    from test_firebase import Firebase
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for v in ("FIREBASE_ID_TOKEN", "STORAGE_EMULATOR_HOST", "FIREBASE_AUTH_EMULATOR_HOST",
              "FIREBASE_STORAGE_EMULATOR_HOST", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(v, raising=False)
    f = Firebase(firebase_server, tmp_path)
    f.front = fronts(firebase_server.hostport)
    return f


@pytest.mark.parametrize("protocol", ["h2", "h1"])
def test_firebase_mount_through_tls_front(protocol, fb_tls, mounts, tmp_path):
    from test_firebase import API_KEY, SRC
    fb, front = fb_tls, fb_tls.front
    url = front.url(protocol)
    run("login", SRC, "--api-key", API_KEY, "--email", fb.email, "--password-file", fb.password_file,
        "--endpoint", url, "--auth-endpoint", url, "--ca-file", front.ca)
    seeded = {"a.txt": b"alpha\n"}
    fb.server.put_object("bucketfs-test.appspot.com", fb.home("a.txt"), b"alpha\n", "text/plain")
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--ca-file", front.ca, "--metadata-ttl", "1",
                       *(["--http-version", "2"] if protocol == "h2" else []))
    _exercise(mnt, tmp_path, seeded)
    assert fb.server.get_object("bucketfs-test.appspot.com", fb.home("big.bin")).data == (tmp_path / "big.bin").read_bytes()
    reqs = _all_by(front, url, {"h2": "HTTP/2.0", "h1": "HTTP/1.1"}[protocol])
    assert any("securetoken" in r[0] or "accounts:" in r[0] for r in reqs), "the Auth calls did not go through the front"


# --- certificate errors --------------------------------------------------------------------


def test_certificate_errors_say_what_and_how_to_fix(fb_tls, tmp_path):
    """Each refused certificate fails the check within 2 s, naming the host, what was wrong and
    the fix; trusting the CA (--ca-file or SSL_CERT_FILE) makes the same mount work."""
    from test_firebase import API_KEY, SRC
    fb, front = fb_tls, fb_tls.front
    host = front.h2.split("//", 1)[1]
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    # login: untrusted Auth endpoint
    t = time.monotonic()
    p = run("login", SRC, "--api-key", API_KEY, "--email", fb.email, "--password-file", fb.password_file,
            "--endpoint", front.h2, "--auth-endpoint", front.h2, check=False)
    err = p.stderr.decode()
    assert p.returncode != 0 and time.monotonic() - t < CHECK_BOUND + startup_seconds(), err
    assert "certificate" in err and host in err and "not trusted" in err and "--ca-file" in err, err
    run("login", SRC, "--api-key", API_KEY, "--email", fb.email, "--password-file", fb.password_file,
        "--endpoint", front.h2, "--auth-endpoint", front.h2, "--ca-file", front.ca)
    src = f"{SRC}/{fb.home()}"

    # untrusted: no --ca-file
    err, took = _mount_check(src, mnt=mnt)
    assert took < CHECK_BOUND + startup_seconds(), (took, err)
    assert "certificate" in err and host in err and "not trusted" in err and "--ca-file" in err, err

    # a --ca-file that is not one
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("hello\n")
    for path in (bad, tmp_path / "missing.pem"):
        err, took = _mount_check(src, "--ca-file", path, mnt=mnt)
        assert f"--ca-file {path}" in err and took < CHECK_BOUND + startup_seconds(), err

    # wrong name and expired: the CA is trusted, the certificate is not right
    for url, what in ((front.wrong_name, "wrong name"), (front.expired, "expired")):
        err, took = _mount_check(src, "--ca-file", front.ca, "--endpoint", url, mnt=mnt)
        other = url.split("//", 1)[1]
        assert took < CHECK_BOUND + startup_seconds(), (took, err)
        assert "certificate" in err and other in err and what in err, err

    # a library command says the same
    p = run("ls", f"{src}/", check=False)
    assert p.returncode != 0 and "certificate" in p.stderr.decode() and "--ca-file" in p.stderr.decode()

    # SSL_CERT_FILE in place of --ca-file (it replaces the system store, as curl and OpenSSL read it)
    env = dict(os.environ, SSL_CERT_FILE=front.ca)
    p = subprocess.run([BIN, "ls", f"{src}/"], capture_output=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
