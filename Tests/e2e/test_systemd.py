"""systemd's side of a mount (docs/OPERATING.md, "A systemd service"), without systemd: the docs'
unit and the package's template agree on the binary's path for each install; a fake
`NOTIFY_SOCKET` receiver sees `READY=1` only once the mount answers, `STATUS=` and
`STOPPING=1`; and a stop (SIGTERM, what `systemctl stop` sends) with a file held open for
writing detaches the mount, uploads what was written and exits 0."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

from conftest import BIN, ROOT
from test_operating import mounted, readme_block

TEMPLATE = os.path.join(ROOT, "Scripts", "package", "bucketfs@.service")


def exec_start_binary(unit):
    [line] = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
    return line.split("=", 1)[1].split()[0]


def test_the_docs_unit_and_the_package_template_agree_on_the_binary_for_each_install():
    docs, template = readme_block("systemd"), open(TEMPLATE).read()
    assert exec_start_binary(docs) == exec_start_binary(template) == "/usr/bin/bucketfs"
    for unit in (docs, template):
        # each says which path goes with the other installs
        assert re.search(r"/usr/bin/bucketfs: the \.deb\..*/usr/local/bin/bucketfs", unit), unit
        assert "Type=notify" in unit and "NotifyAccess=main" in unit and "ExecStop=" not in unit, unit
    # the .deb installs the binary where both say
    pkg = open(os.path.join(ROOT, "Scripts", "package.sh")).read()
    assert re.search(r"usr/bin/bucketfs|\$BIN_DIR|usr/bin", pkg)


class Receiver:
    """A fake systemd: an AF_UNIX datagram socket; each message is kept with what the mount point
    looked like the moment it arrived (whether it answered as the mount)."""

    def __init__(self, path, mnt):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)
        self.path, self.mnt = str(path), str(mnt)
        self.messages = []  # (text, mounted and answering at arrival)

    def poll(self, until, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.sock.recv(4096).decode()
            except socket.timeout:
                if until(self):
                    return True
                continue
            self.messages.append((m, self.answers()))
            if until(self):
                return True
        return until(self)

    def answers(self):
        if not mounted(self.mnt):
            return False
        try:
            os.listdir(self.mnt)
            return True
        except OSError:
            return False

    def has(self, key):
        return any(key in m.split("\n") or any(l.startswith(key) for l in m.split("\n")) for m, _ in self.messages)


def test_ready_comes_after_the_mount_answers_then_status_and_stopping_and_a_held_file_does_not_block_the_stop(bucket, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    rx = Receiver(tmp_path / "notify", mnt)
    env = {**os.environ, "NOTIFY_SOCKET": rx.path}
    proc = subprocess.Popen([BIN, "mount", bucket.src(), str(mnt), "--foreground", "--cache-dir", str(tmp_path / "cache"),
                             "--log-level", "info"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer = None
    try:
        assert rx.poll(lambda r: r.has("READY=1"), 60), (rx.messages, proc.poll())
        [(ready, answering)] = [(m, a) for m, a in rx.messages if "READY=1" in m.split("\n")]
        assert answering, "READY=1 arrived before the mount answered"
        assert f"MAINPID={proc.pid}" in ready and "STATUS=" in ready, ready
        assert not any("READY=1" in m for m, a in rx.messages if not a)
        # STATUS= while it serves (every 10 s)
        assert rx.poll(lambda r: sum("STATUS=serving" in m for m, _ in r.messages) >= 1, 30), rx.messages
        # A file held open for writing, then the stop: SIGTERM, as systemctl stop sends.
        writer = subprocess.Popen([sys.executable, "-c", (
            "import os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
            "os.write(fd, b'written before the stop\\n')\n"
            "print('ready', flush=True)\n"
            "time.sleep(3600)\n"), str(mnt / "held.txt")], stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"ready"
        busy = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, text=True)
        assert busy.returncode != 0 and "busy" in busy.stderr.lower(), busy  # why the unit has no ExecStop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, proc.stderr.read().decode()[-3000:]
        assert not mounted(mnt)
        assert rx.poll(lambda r: r.has("STOPPING=1"), 5), rx.messages
        assert bucket.cat("held.txt") == b"written before the stop\n"
    finally:
        if writer:
            writer.kill()
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
