"""bucketfs as the FUSE daemon of the Cloud Storage FUSE CSI driver's sidecar (docs/KUBERNETES.md),
through a stand-in of both sides written from the driver's source (csi_standin.py): the node
plugin mounts /dev/fuse at the pod's target with fd=N and hands the descriptor over a unix
socket; the sidecar starts bucketfs through a `gcsfuse` link with the driver's argv and config
file, as uid 65534 with no capabilities, a clean environment and a read-only root, its
descriptor as fd 3. Then the pod uses the volume, and ends."""
import ctypes
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BIN, run
from csi_standin import NodePlugin, Sidecar

NOBODY = (65534, 65534)


@pytest.fixture(autouse=True)
def _needs_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: the node plugin's side mounts /dev/fuse")


@pytest.fixture
def pod(tmp_path):
    """A pod's directories on a tmpfs of its own (the emptyDirs; the rest of the machine is
    read-only to the daemon), and a `gcsfuse` link to bucketfs."""
    root = tempfile.mkdtemp(prefix="bucketfs-pod-", dir="/tmp")
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mount(b"pod", root.encode(), b"tmpfs", 0, b"mode=0755") == 0, os.strerror(ctypes.get_errno())
    p = Pod(root)
    yield p
    p.end()
    libc.umount2(root.encode(), 2)
    shutil.rmtree(root, ignore_errors=True)


class Pod:
    def __init__(self, root):
        self.root = root
        self.tmp = os.path.join(root, "gcsfuse-tmp", ".volumes")        # the sidecar's /gcsfuse-tmp/.volumes
        self.buffer = os.path.join(root, "gcsfuse-buffer")              # its /gcsfuse-buffer
        self.target_base = os.path.join(root, "kubelet")
        os.makedirs(self.tmp, mode=0o777)
        os.makedirs(self.buffer, mode=0o777)
        os.makedirs(self.target_base)
        for d in (os.path.join(root, "gcsfuse-tmp"), self.tmp, self.buffer):
            os.chmod(d, 0o777)
        bindir = os.path.join(root, "bin")
        os.makedirs(bindir)
        self.gcsfuse = os.path.join(bindir, "gcsfuse")
        os.symlink(BIN, self.gcsfuse)
        self.nodes, self.sidecars = [], []
        self.port = 62990

    def volume(self, name, bucket, options=(), extra_config=None, read_only_root=True):
        """The node plugin's mount and handover, then the sidecar's start: (node, sidecar, target)."""
        volume_dir = os.path.join(self.tmp, name)
        os.makedirs(volume_dir)
        os.chown(volume_dir, *NOBODY)
        target = os.path.join(self.target_base, name, "mount")
        node = NodePlugin(bucket, target, volume_dir, options)
        self.nodes.append(node)
        self.port += 1
        env = {"PATH": "/usr/bin:/bin"}
        sidecar = Sidecar(volume_dir, self.buffer, self.gcsfuse, prometheus_port=self.port, extra_config=extra_config,
                          run_as=NOBODY, env=env)
        if read_only_root:
            sidecar.read_only_root_except = [self.root]
        self.sidecars.append(sidecar)
        sidecar.start(os.path.join(self.root, f"{name}.stdout"))
        return node, sidecar, target

    def end(self):
        for s in self.sidecars:
            s.stop()
        for n in self.nodes:
            n.unmount()


def wait_listed(target, sidecar, timeout=60):
    """The target's listing once it answers; what the daemon said when it never does."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            return sorted(os.listdir(target))
        except OSError as e:
            last = e
            if sidecar.proc.poll() is not None:
                break
            time.sleep(0.05)
    raise AssertionError(f"{target} never answered: {last}; daemon exit {sidecar.proc.poll()}, argv {sidecar.args}, "
                         f"stderr {sidecar.errors()[-2000:]!r}, log {open(sidecar.log.name).read()[-2000:]!r}")


def json_lines(path):
    out = []
    for line in open(path).read().splitlines():
        out.append(json.loads(line))
    return out


def volume_options(server):
    """What a volume's mountOptions give to reach a test server (gcsfuse's names)."""
    return [f"custom-endpoint={server.endpoint}/storage/v1/", "anonymous-access"]


def test_a_pod_reads_writes_and_sets_xattrs_through_the_driver(pod, emulator, prefix):
    bucket = emulator.bucket()
    bucket.blob(f"{prefix}/hello.txt").upload_from_string(b"hello from the bucket")
    node, sidecar, target = pod.volume("data", emulator.bucket_name,
                                       [*volume_options(emulator), f"only-dir={prefix}", "implicit-dirs",
                                        "metadata-cache:ttl-secs:5", "logging:severity:info"])
    assert wait_listed(target, sidecar) == ["hello.txt"]
    assert node.handed.wait(10)
    assert open(os.path.join(target, "hello.txt")).read() == "hello from the bucket"
    # cp, then the object is in the bucket once close returned (the default mode).
    src = os.path.join(pod.root, "local.bin")
    data = os.urandom(3 << 20)
    open(src, "wb").write(data)
    subprocess.run(["cp", src, os.path.join(target, "copied.bin")], check=True, timeout=120)
    assert bucket.blob(f"{prefix}/copied.bin").download_as_bytes() == data
    subprocess.run(["setfattr", "-n", "user.owner", "-v", "pod", os.path.join(target, "copied.bin")], check=True, timeout=60)
    got = subprocess.run(["getfattr", "-n", "user.owner", "--only-values", os.path.join(target, "copied.bin")],
                         capture_output=True, check=True, timeout=60).stdout
    assert got == b"pod"
    blob = bucket.get_blob(f"{prefix}/copied.bin")
    assert blob.metadata.get("owner") == "pod"
    # Metrics on the port the sidecar proxies to.
    with urllib.request.urlopen(f"http://127.0.0.1:{pod.port}/metrics", timeout=30) as r:
        assert b"bucketfs_" in r.read()
    # A pod's end: SIGTERM, exit 0 well within the 5 s before SIGKILL, nothing unsaved.
    t = time.monotonic()
    code = sidecar.stop()
    assert code == 0, (code, open(sidecar.log.name).read()[-3000:])
    assert time.monotonic() - t < 5
    assert sidecar.errors() == "", sidecar.errors()
    lines = json_lines(sidecar.log.name)
    assert any("gcsfuse --implicit-dirs: accepted, no effect" in l["message"] for l in lines), lines[:20]
    assert any("mounted" in l["message"] or "serving" in l["message"] for l in lines)
    # It wrote nothing outside the pod's directories (the rest was read-only to it, and nothing
    # failed), and its cache directory is the temp dir the sidecar gave, private.
    assert not [l for l in lines if l["level"] in ("warning", "error", "critical")], lines
    cache = os.path.join(pod.buffer, ".volumes", "data", "temp-dir")
    assert ".lock" in os.listdir(cache), os.listdir(cache)
    assert os.stat(cache).st_mode & 0o077 == 0


class TokenServer:
    """The driver's token server for host-network pods (sidecar_mounter.go): HTTP on a unix
    socket, any path, one fresh token a request as Go's oauth2.Token ({access_token, token_type,
    expiry}); Go's net/http answers a request without Host with 400, and so does this one."""

    def __init__(self, path, mint):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                srv.requests.append(dict(self.headers.items()))
                if not self.headers.get("Host"):
                    body = b"400 Bad Request: missing required Host header"
                    self.send_response(400)
                else:
                    expiry = datetime.now(timezone.utc) + timedelta(hours=1)
                    stamp = expiry.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"  # Go writes nanoseconds
                    body = json.dumps({"access_token": mint(), "token_type": "Bearer", "expiry": stamp}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class UnixHTTPServer(ThreadingHTTPServer):
            address_family = socket.AF_UNIX

            def server_bind(self):
                self.socket.bind(self.server_address)
                self.server_name, self.server_port = "localhost", 0

            def get_request(self):
                conn, _ = self.socket.accept()
                return conn, ("local", 0)

        self.requests = []
        self.server = UnixHTTPServer(path, Handler)
        os.chmod(path, 0o777)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def raw_get(path):
    """A GET on the unix socket without a Host header, as HTTP/1.0 clients may send it."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    c.sendall(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    out = b""
    while chunk := c.recv(4096):
        out += chunk
    c.close()
    return out


def test_a_host_network_pods_token_comes_from_the_sidecars_unix_socket(pod):
    from fake_google_auth import FakeGoogleAuth
    from own_gcs import OwnServer
    backend = OwnServer("csi-token")
    fake = FakeGoogleAuth(backend=backend.endpoint)
    try:
        sock = os.path.join(pod.root, "token.sock")
        tokens = TokenServer(sock, lambda: fake._mint("csi"))
        assert raw_get(sock).startswith(b"HTTP/1.") and b" 400 " in raw_get(sock).split(b"\r\n")[0]
        node, sidecar, target = pod.volume("hnw", "csi-token", [f"custom-endpoint={fake.url}/storage/v1/"],
                                           extra_config={"gcs-auth:token-url": "unix://" + sock})
        assert wait_listed(target, sidecar) == []
        open(os.path.join(target, "t.txt"), "w").write("through a token from the socket")
        served = [r for r in tokens.requests if r.get("Host")]
        assert served, tokens.requests
        sent = {v[len("Bearer "):] for r in fake.storage_records() for k, v in r["headers"] if k.lower() == "authorization"}
        assert sent and all(t.startswith("csi-token-") for t in sent), sent
        assert fake.unauthorized == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{pod.port}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        title = open(f"/proc/{sidecar.proc.pid}/cmdline", "rb").read().decode(errors="replace")
        assert sidecar.stop() == 0 and sidecar.errors() == ""
        # No token reaches the log (the pod's standard output), the error file, the metrics or
        # the process title.
        said = open(sidecar.log.name).read() + sidecar.errors() + metrics + title
        assert not [t for t in sent if t in said], "a token reached the daemon's output"
        tokens.stop()
    finally:
        fake.stop()
        backend.stop()


def gcsfuse_link(tmp_path):
    link = tmp_path / "gcsfuse"
    link.symlink_to(BIN)
    return str(link)


BAD_INPUT = {
    "not a FUSE device": (["--foreground", "b", "/dev/fd/3"], "null", "not a FUSE device"),
    "a closed descriptor": (["--foreground", "b", "/dev/fd/7"], None, "not an open file descriptor"),
    "a config file that is not YAML": (["--foreground", "--config-file=CONFIG", "b", "/dev/fd/3"], "fuse", "is not YAML"),
    "an unknown config key": (["--foreground", "--config-file=UNKNOWN", "b", "/dev/fd/3"], "fuse", "unknown key no-such:key"),
    "a refused flag": (["--foreground", "--client-protocol=grpc", "b", "/dev/fd/3"], "fuse", "client-protocol"),
    "an unknown flag": (["--foreground", "--no-such-flag=1", "b", "/dev/fd/3"], "fuse", "unknown flag"),
    "write-back on a pod's volume": (["--foreground", "--write-back", "b", "/dev/fd/3"], "fuse", "--write-back is refused"),
    "a background mount of a descriptor": (["b", "/dev/fd/3"], "fuse", "served in the foreground"),
    "every bucket": (["--foreground", "_", "/dev/fd/3"], "fuse", "every bucket"),
}


@pytest.mark.one_server
@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_clear_error_and_leaves_nothing(tmp_path, emulator, case):
    argv, fd3, said = BAD_INPUT[case]
    (tmp_path / "bad.yaml").write_text("logging: [unclosed\n")
    (tmp_path / "unknown.yaml").write_text("no-such:\n    key: 1\n")
    temp = tmp_path / "temp-dir"
    argv = [a.replace("CONFIG", str(tmp_path / "bad.yaml")).replace("UNKNOWN", str(tmp_path / "unknown.yaml")) for a in argv]
    argv = [f"--temp-dir={temp}", f"--custom-endpoint={emulator.endpoint}", "--anonymous-access", *argv]
    opened = None
    if fd3 == "null":
        opened = os.open("/dev/null", os.O_RDWR)
    elif fd3 == "fuse":
        opened = os.open("/dev/fuse", os.O_RDWR)  # never mounted: nothing must read it
    wrapper = ["/bin/bash", "-c", (f'exec 3<&{opened} {opened}<&- "$0" "$@"' if opened is not None else 'exec 3<&- "$0" "$@"'),
               gcsfuse_link(tmp_path), *argv]
    p = subprocess.run(wrapper, capture_output=True, text=True, timeout=120, pass_fds=(opened,) if opened is not None else ())
    if opened is not None:
        os.close(opened)
    assert p.returncode != 0, (case, p.stdout, p.stderr)
    assert said in p.stderr, (case, p.stderr)
    assert len(p.stderr.strip().splitlines()) <= 2, p.stderr
    assert not temp.exists(), (case, list(temp.iterdir()))
