"""The project's own Cloud Storage test server (Tests/GCSTestServerKit, the one ObjectStoresTests
run in-process) as a process of its own: the `gcs-test-server` executable that
`swift build --build-tests` builds beside bucketfs. One bucket per process, so a test that wants
a bucket of its own starts a server of its own (`start`), and stops it when done."""
import os
import select
import subprocess
import time

import pytest

from conftest import BIN, GAPS, ROOT


def binary():
    """gcs-test-server beside BUCKETFS_BIN, else in `swift build --show-bin-path`."""
    here = os.path.join(os.path.dirname(BIN), "gcs-test-server")
    if os.path.exists(here):
        return here
    out = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True)
    there = os.path.join(out.stdout.strip(), "gcs-test-server")
    if out.returncode == 0 and os.path.exists(there):
        return there
    pytest.fail(f"{here} is missing: `swift build --build-tests` (Scripts/test.sh) builds it, "
                "or `swift build --product gcs-test-server`")


class OwnServer:
    """A running gcs-test-server with one bucket; the same face as conftest's Emulator for the
    tests (`kind`, `name`, `endpoint`, `options`, `has`, `src`)."""

    kind = "own"
    name = "the project's Cloud Storage test server"

    def __init__(self, bucket, versioning=False, hns=False):
        self.bucket_name = bucket
        first = int(os.environ.get("BUCKETFS_OWN_GCS_PORT", "0"))
        # BUCKETFS_OWN_GCS_PORT: the first port to try (the next ones if it is taken); else any free one
        for port in ([first + i for i in range(20)] if first else [0]):
            self.proc = subprocess.Popen([binary(), "--port", str(port), "--bucket", bucket,
                                          *(["--versioning"] if versioning else []),
                                          *(["--hns"] if hns else [])],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            line = self._ready_line()
            if line:
                break
            if port != 0 and port != first + 19:
                self.stop()  # taken: the next one
        else:
            raise RuntimeError(f"gcs-test-server did not start: {self.proc.stderr.read().decode(errors='replace')}")
        # "gcs-test-server listening on 127.0.0.1:PORT bucket NAME versioning on|off hns on|off"
        self.hostport = line.split()[3]
        self.endpoint = f"http://{self.hostport}"
        self.options = ["--endpoint", self.endpoint, "--anonymous"]

    def _ready_line(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline().decode()
                if line.startswith("gcs-test-server listening on "):
                    return line
            if self.proc.poll() is not None:
                return None
        self.stop()
        return None

    def has(self, gap):
        """Whether this server has `gap` (a name in conftest's GAPS): it has none."""
        return gap in GAPS[self.kind]

    def src(self, name=""):
        return f"gs://{self.bucket_name}" + ("/" + name if name else "")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
