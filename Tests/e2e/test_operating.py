"""Operating bucketfs (docs/OPERATING.md): a mount that fails fast with its own message and leaves
nothing mounted, Prometheus metrics that agree with the request log, JSON logs, the fstab line and
systemd unit of docs/OPERATING.md, shell completion and man page, and `put -r` progress on a terminal only."""
import collections
import json
import os
import pty
import re
import shlex
import signal
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import BIN, ROOT, free_port, run, sh

OPERATING = os.path.join(ROOT, "docs", "OPERATING.md")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def bucketfs_processes_for(path):
    """pids of bucketfs processes whose command line names `path`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if str(path).encode() in args and any(a.endswith(b"bucketfs") for a in args[:1]):
            found.append(int(pid))
    return found


class SilentServer:
    """A TCP endpoint that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                return

    def close(self):
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def silent():
    s = SilentServer()
    yield s
    s.close()


def bad_sources(tmp_path, emulator_hostport, silent_port):
    """(name, source, extra options, environment changes, the message's own words)."""
    bad_key = tmp_path / "bad-key.json"
    bad_key.write_text('{"type": "service_account", "client_email": "x@y", "private_key": "not a key"}')
    cases = [
        ("unreachable", "gs://bucketfs-test", ["--endpoint", "http://127.0.0.1:1", "--anonymous"], {},
         "cannot reach http://127.0.0.1:1"),
        ("not-a-url", "gs://bucketfs-test", [], {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:--read-only"},
         "STORAGE_EMULATOR_HOST=http://127.0.0.1:--read-only is not a URL"),
        ("silent", "gs://bucketfs-test", ["--endpoint", f"http://127.0.0.1:{silent_port}", "--anonymous"], {},
         f"http://127.0.0.1:{silent_port} did not answer within"),
        ("bad-key", "gs://bucketfs-test", ["--endpoint", "http://127.0.0.1:1", "--key-file", str(bad_key)], {},
         "bad credential file (--key-file"),
        ("file-not-dir", str(bad_key), [], {}, "is a file, not a directory"),
    ]
    if emulator_hostport:
        cases.append(("no-such-bucket", "gs://no-such-bucket-bfs", ["--endpoint", f"http://{emulator_hostport}", "--anonymous"],
                      {}, "bucket 'no-such-bucket-bfs' does not exist"))
    return cases


CASES = ["unreachable", "not-a-url", "silent", "bad-key", "file-not-dir", "no-such-bucket"]


@pytest.mark.parametrize("case", CASES)
def test_bad_source_is_refused_fast_with_its_own_message(case, tmp_path, silent):
    hostport = os.environ.get("BUCKETFS_EMULATOR")
    if case == "no-such-bucket" and not hostport:
        pytest.skip("needs the emulator (BUCKETFS_EMULATOR)")
    (name, source, options, env_changes, words), = [c for c in bad_sources(tmp_path, hostport, silent.port) if c[0] == case]
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env.update(env_changes)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        # The mount, in the background (the default) and in the foreground (as systemd runs it).
        for mode in ([], ["--foreground"]):
            start = time.monotonic()
            p = subprocess.run([BIN, "mount", source, str(mnt), "--cache-dir", str(tmp_path / "cache"), *options, *mode],
                               capture_output=True, env=env, timeout=30)
            took = time.monotonic() - start
            err = p.stderr.decode(errors="replace")
            assert p.returncode != 0, f"{case}: mount succeeded"
            assert took < 15, f"{case}: took {took:.1f} s"
            assert words in err, f"{case}: {err!r}"
            assert len(err.strip().splitlines()) == 1, f"{case}: not one line: {err!r}"
            assert not mounted(mnt)
            time.sleep(0.2)
            assert bucketfs_processes_for(mnt) == []
        # The same check for a library command.
        if source.startswith("gs://") or case == "file-not-dir":
            target = source + "/x" if source.startswith("gs://") else source
            start = time.monotonic()
            p = subprocess.run([BIN, "ls", target, *options], capture_output=True, env=env, timeout=30)
            err = p.stderr.decode(errors="replace")
            assert p.returncode != 0 and time.monotonic() - start < 15
            if case != "file-not-dir":  # ls of a local path looks for the bucket above it first
                assert words in err, f"{case}: {err!r}"
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


SAMPLE = re.compile(r'^([a-z_]+)(?:\{(.*)\})? ([0-9.e+-]+|NaN|\+Inf)$')


def samples(text):
    """{(name, frozenset(labels)): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def by_label(s, name, label):
    totals = collections.Counter()
    for (n, labels), v in s.items():
        if n == name:
            totals[dict(labels)[label]] += v
    return totals


def test_metrics_count_exactly_the_requests_of_a_script(any_bucket, mounts, tmp_path):
    any_bucket.put("docs/a.txt", "hello metrics", metadata={"k": "v"})
    any_bucket.put("docs/b.txt", "second")
    port = free_port()
    log = tmp_path / "requests.log"
    mnt = mounts.mount(any_bucket.src(), "--metrics-address", f"127.0.0.1:{port}", "--request-log", str(log),
                       "--metadata-ttl", "60", "--walk-ahead", "0", *any_bucket.extra)
    before = samples(scrape(port))
    assert ("bucketfs_lost_found_entries", frozenset()) in before
    assert ("bucketfs_dirty_files", frozenset()) in before
    log_before = log.read_text().splitlines() if log.exists() else []

    sh(["ls", "-l", f"{mnt}/docs"])
    assert sh(["cat", f"{mnt}/docs/a.txt"]).stdout == b"hello metrics"
    sh(["setfattr", "-n", "user.color", "-v", "blue", f"{mnt}/docs/a.txt"])

    after = samples(scrape(port))
    lines = log.read_text().splitlines()[len(log_before):]
    from_log = collections.Counter(l.split()[0] for l in lines)
    store = by_label(after, "bucketfs_store_requests_total", "operation") - by_label(before, "bucketfs_store_requests_total", "operation")
    assert dict(store) == dict(from_log), (store, lines)
    # The script's own requests: one listing (ls -l fills the caches), one read, one PATCH; and
    # the lookup of docs itself (one list request, or nothing when the root listing had it).
    assert from_log["read"] == 1 and from_log["patch"] == 1, lines
    assert set(from_log) <= {"list", "get", "read", "patch"}, lines
    statuses = by_label(after, "bucketfs_store_requests_total", "status")
    assert set(statuses) <= {"ok", "not_found"}, statuses  # the lookup of docs asks for an object docs too
    # Bytes that came through the store; the embedded bucket's reads go straight to its blob file.
    local = not any_bucket.src().startswith("gs://")
    assert after[("bucketfs_store_read_bytes_total", frozenset())] == (0 if local else len("hello metrics"))
    fuse = by_label(after, "bucketfs_fuse_operations_total", "operation")
    for op in ("lookup", "readdir", "open", "read", "setxattr"):
        assert fuse[op] >= 1, (op, fuse)
    assert after[("bucketfs_fuse_read_bytes_total", frozenset())] == len("hello metrics")
    hits = by_label(after, "bucketfs_cache_hits_total", "cache")
    misses = by_label(after, "bucketfs_cache_misses_total", "cache")
    assert hits["attributes"] >= 1, hits  # cat and setfattr find a.txt's metadata from the listing
    assert misses["listing"] >= 1, misses  # ls -l of docs listed it
    assert after[("bucketfs_cache_entries", frozenset({("cache", "listing")}))] >= 1
    assert any(n == "bucketfs_store_request_duration_seconds_bucket" for n, _ in after)
    # Anything but /metrics is 404; the server listens on loopback only.
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/")
    assert e.value.code == 404
    with open("/proc/net/tcp") as f:
        listening = [l.split()[1] for l in f.readlines()[1:] if l.split()[3] == "0A"]
    assert f"0100007F:{port:04X}" in listening
    mounts.unmount(mnt)


def test_max_cached_entries_bounds_the_cache_and_evicted_metadata_is_read_again(any_bucket, mounts, tmp_path):
    for i in range(60):
        any_bucket.put(f"many/f{i:03d}", "x" * i, metadata={"k": f"v{i}"})
    port = free_port()
    mnt = mounts.mount(any_bucket.src(), "--metrics-address", f"127.0.0.1:{port}", "--max-cached-entries", "20",
                       "--metadata-ttl", "60", *any_bucket.extra)
    out = sh(["ls", "-l", f"{mnt}/many"]).stdout.decode().splitlines()
    assert len(out) == 61
    s = samples(scrape(port))
    assert s[("bucketfs_cache_max_entries", frozenset())] == 20
    assert s[("bucketfs_cache_held_entries", frozenset())] <= 20, s
    # Metadata evicted after the listing is read again, right (the first files went first).
    for i in (0, 7, 59):
        assert os.stat(f"{mnt}/many/f{i:03d}").st_size == i
        assert os.getxattr(f"{mnt}/many/f{i:03d}", "user.k") == f"v{i}".encode()
    assert samples(scrape(port))[("bucketfs_cache_held_entries", frozenset())] <= 20
    mounts.unmount(mnt)


def test_metrics_port_taken_fails_the_mount(bucket, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        p = subprocess.run([BIN, "mount", bucket.src(), str(mnt), "--metrics-address", str(port),
                            "--cache-dir", str(tmp_path / "cache")], capture_output=True, timeout=60)
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        assert p.returncode != 0
        assert b"cannot serve metrics" in p.stderr
        assert not mounted(mnt)


def test_json_logs_parse_line_by_line_and_hold_no_token(emulator, prefix, tmp_path):
    src = emulator.src(prefix)
    run("put", "-", src + "/a.txt", "--endpoint", emulator.endpoint, "--anonymous", input=b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    secret = "ya29.SECRET-TOKEN-never-logged"
    try:
        p = subprocess.run([BIN, "mount", src, str(mnt), "--endpoint", emulator.endpoint, "--token", secret,
                            "--log-format", "json", "--log-level", "trace", "--log-file", str(log),
                            "--cache-dir", str(tmp_path / "cache")], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(mnt)) == ["a.txt"]
        assert open(mnt / "a.txt").read() == "x"
        assert not os.path.exists(mnt / "missing")
        sh(["fusermount3", "-u", str(mnt)])
        deadline = time.time() + 10
        while time.time() < deadline and mounted(mnt):
            time.sleep(0.05)
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    # the process may still be writing its last lines after the unmount: give it a moment
    deadline = time.time() + 10
    while time.time() < deadline and '"unmounted ' not in log.read_text():
        time.sleep(0.1)
    text = log.read_text()
    assert secret not in text
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert len(records) > 5
    for r in records:
        assert {"time", "level", "label", "message"} <= set(r), r
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", r["time"]), r
    messages = [r["message"] for r in records]
    assert any(m.startswith("mounted ") for m in messages)
    assert any("<redacted>" in m for m in messages)


def readme_block(marker):
    text = open(OPERATING).read()
    at = text.index(f"<!-- checked by Tests/e2e/test_operating.py: {marker} -->")
    block = text[at:].split("```", 2)[1]
    return block.split("\n", 1)[1]


def test_readme_fstab_line_mounts_and_unmounts(bucket, tmp_path, on_path):
    bucket.put("hello.txt", "from fstab")
    line = readme_block("fstab").strip()
    fields = line.split()
    assert fields[2] == "fuse.bucketfs" and len(fields) == 6
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    options = [o for o in fields[3].split(",") if not o.startswith("key_file=")]  # an embedded bucket needs no key
    options = [f"cache_dir={tmp_path / 'cache'}" if o.startswith("cache_dir=") else o for o in options]
    fstab = tmp_path / "fstab"
    fstab.write_text(" ".join([bucket.src(), str(mnt), fields[2], ",".join(options), fields[4], fields[5]]) + "\n")
    try:
        sh(["mount", "-T", str(fstab), str(mnt)])
        assert mounted(mnt)
        assert open(mnt / "hello.txt").read() == "from fstab"
        sh(["umount", str(mnt)])
        assert not mounted(mnt)
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_readme_systemd_unit_starts_and_stops(emulator, prefix, tmp_path):
    unit = readme_block("systemd")
    service = dict(l.split("=", 1) for l in unit.splitlines() if "=" in l and not l.startswith("#"))
    run("put", "-", emulator.src(prefix) + "/a.txt", "--endpoint", emulator.endpoint, "--anonymous", input=b"unit")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    port = free_port()

    def local(cmd):
        cmd = cmd.replace("/usr/bin/bucketfs", BIN).replace("gs://my-bucket", emulator.src(prefix))
        cmd = cmd.replace("/mnt/bucket", str(mnt)).replace("/var/cache/bucketfs", str(tmp_path / "cache"))
        cmd = cmd.replace("--key-file /etc/bucketfs/key.json", f"--endpoint {emulator.endpoint} --anonymous")
        return shlex.split(cmd.replace("127.0.0.1:9101", f"127.0.0.1:{port}"))

    if shutil.which("systemd-analyze"):
        # `systemd-analyze verify` works without a running systemd: the unit as written (with the
        # binary under test) must pass, with no directive ignored.
        f = tmp_path / "bucketfs-test.service"
        f.write_text(unit.replace("/usr/bin/bucketfs", BIN))
        v = subprocess.run(["systemd-analyze", "verify", str(f)], capture_output=True, text=True, timeout=60)
        assert v.returncode == 0, v.stderr
        assert "bucketfs-test.service:" not in v.stderr, v.stderr
    start = local(service["ExecStart"])
    assert "--foreground" in start
    proc = subprocess.Popen(start, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not mounted(mnt):
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        assert mounted(mnt)
        assert open(mnt / "a.txt").read() == "unit"
        assert "bucketfs_fuse_operations_total" in scrape(port)
        assert "ExecStop" not in service  # systemctl stop sends SIGTERM (docs/OPERATING.md)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert not mounted(mnt)
        err = proc.stderr.read().decode()
        for line in err.splitlines():
            json.loads(line)  # --log-format json: the journal gets one object per line
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_mount_help_is_grouped_with_examples():
    out = run("mount", "--help").stdout.decode()
    for title in ("MOUNT:", "CACHING AND WRITES:", "CLOUD STORAGE:", "LOGGING AND METRICS:"):
        assert title in out.upper(), out
    assert "--metrics-address" in out and "--log-format" in out
    assert out.rstrip().splitlines()[-1].startswith("Unmount with")
    assert "EXAMPLES:" in out.split("LOGGING AND METRICS")[-1]
    assert "source-checked" not in out


def test_completion_and_man_page():
    script = run("--generate-completion-script", "bash").stdout.decode()
    assert "_bucketfs" in script and "--metrics-address" in script
    r = subprocess.run(["bash", "-c", f"source /dev/stdin <<'EOF'\n{script}\nEOF\ncomplete -p bucketfs"],
                       capture_output=True, text=True)
    assert "bucketfs" in r.stdout, r.stderr
    installed = "/usr/local/share/bash-completion/completions/bucketfs"
    man = "/usr/local/share/man/man1/bucketfs.1"
    if not (os.path.exists(installed) and os.path.exists(man)):
        pytest.skip("Scripts/setup.sh has not installed completion and man page here")
    assert "--metrics-address" in open(installed).read()
    page = open(man).read()
    assert "Generated by swift-argument-parser" in page and ".Dt BUCKETFS 1" in page and "metrics-address" in page
    if shutil.which("man"):
        r = subprocess.run(["man", "-P", "cat", "bucketfs"], capture_output=True, text=True, env={**os.environ, "MANWIDTH": "100"})
        assert "--metrics-address" in r.stdout, r.stderr


def test_put_recursive_shows_progress_on_a_terminal_only(bucket, tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for i in range(5):
        (tree / ("sub" if i % 2 else "") / f"f{i}.bin").write_bytes(os.urandom(10_000 + i))
    # In a pipe: only the summary on stdout, nothing on stderr.
    p = run("put", "-r", str(tree), bucket.src("piped"))
    assert p.stderr == b""
    assert p.stdout.decode().strip() == "5 files uploaded under piped"
    # On a terminal (stderr is a pty): files, bytes and rate.
    master, slave = pty.openpty()
    q = subprocess.Popen([BIN, "put", "-r", str(tree), bucket.src("tty")], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    assert q.wait(timeout=60) == 0
    os.close(master)
    text = shown.decode(errors="replace")
    assert "5/5 files" in text and "KiB of" in text and "/s" in text, text


def test_the_past_commands_hold_no_token(mounts, tmp_path):
    """`versions`, `ls/stat/cat --at`, `restore` and `mount --at` given a token: it is in no
    output, no log line (trace), and not in the mount's process title; nor in the error of a
    bucket that keeps no versions (docs/SEMANTICS.md §7)."""
    from conftest import server
    from daemons import daemon_of
    from test_restore import VersionedGS, rfc3339
    srv = server("fake-gcs")
    b = VersionedGS(srv)
    secret = "ya29.SECRET-TOKEN-of-the-past-never-shown"
    opts = [o for o in srv.options if o != "--anonymous"] + ["--token", secret]
    run("put", "-", b.src("a.txt"), *srv.options, input=b"one")
    time.sleep(1.2)
    moment = rfc3339(time.time())
    time.sleep(1.2)
    run("put", "-", b.src("a.txt"), *srv.options, input=b"two")
    seen = b""
    for args in (["versions", b.src("a.txt")], ["versions", "-r", b.src()], ["ls", "--at", moment, b.src()],
                 ["stat", "--at", moment, b.src("a.txt")], ["restore", b.src("a.txt"), "--at", moment, "--log-level", "trace"]):
        p = run(*args, *opts)
        seen += p.stdout + p.stderr
    assert run("cat", "--at", moment, b.src("a.txt"), *opts).stdout == b"one"
    assert run("cat", b.src("a.txt"), *opts).stdout == b"one", "restore brought the moment's bytes back"
    unversioned = run("versions", f"gs://{srv.bucket_name}/a", *opts, check=False)
    seen += unversioned.stdout + unversioned.stderr
    mounts.gs_options = opts
    mnt = mounts.mount(b.src(), "--at", moment, "--log-level", "trace")
    assert open(f"{mnt}/a.txt", "rb").read() == b"one"
    pid, cmdline = daemon_of(mnt)
    mounts.unmount(mnt)
    assert secret.encode() not in seen
    assert secret.encode() not in cmdline
    assert secret.encode() not in open(mounts.log_path(mnt), "rb").read()


def test_an_unreachable_store_is_named_in_the_running_mounts_log(mounts):
    """With its storage server gone, a running mount answers EIO, and the log line says where the
    requests went and which setting chose that address, as the commands' refusals do
    (docs/SEMANTICS.md §5.3)."""
    import errno
    import uuid
    from own_gcs import OwnServer
    srv = OwnServer(f"gone-{uuid.uuid4().hex[:8]}")
    try:
        mnt = mounts.mount(f"gs://{srv.bucket_name}", *srv.options, "--op-timeout", "5")
    finally:
        srv.stop()
    with pytest.raises(OSError) as e:
        os.listdir(f"{mnt}/not-listed-yet")
    assert e.value.errno == errno.EIO
    log = open(mounts.log_path(mnt)).read()
    mounts.unmount(mnt)
    assert f"(storage at {srv.endpoint}, set by --endpoint) → Input/output error (5)" in log, log[-3000:]
