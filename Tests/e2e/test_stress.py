"""The short version of Scripts/stress.sh: 16 processes on one mount, 2 readers on a
second mount of the same bucket, for STRESS_SECONDS (default 20) each on the embedded bucket and
on gs:// against gcp-storage-emulator, in the default mode and (the embedded bucket; gs:// with
STRESS_GS_WRITE_BACK=1) with the first mount in --write-back. stress.py says what is checked; its table is printed."""
import os
import subprocess
import sys

import pytest

from conftest import BIN, run

HERE = os.path.dirname(os.path.abspath(__file__))
SECONDS = float(os.environ.get("STRESS_SECONDS", "20"))


def stress(capsys, *args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "stress.py"), "--bin", BIN, "--seconds", str(SECONDS),
                        "--op-bound", "90", "--settle", "3", *args],
                       capture_output=True, text=True, timeout=SECONDS + 600)
    with capsys.disabled():
        print("\n" + p.stdout[-4000:])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


MODES = pytest.mark.parametrize("mode", [[], ["--write-back"]], ids=["default", "write-back"])


@MODES
def test_stress_embedded(tmp_path, capsys, mode):
    run("mb", str(tmp_path / "bucket"))
    stress(capsys, "--source", str(tmp_path / "bucket"), "--tmp", str(tmp_path), *mode)


# gs:// in the default mode only: with --write-back against gcp-storage-emulator (one connection
# at a time, HTTP/1.0) the unmount drains a queue of hundreds of files for up to a minute; one CI
# run (before listings answered after an upload were corrected, docs/SEMANTICS.md §6) met only
# connect timeouts at unmount and ended in lost+found; three runs since passed. fake-gcs-server's
# gaps (no preconditions, metageneration stays 1) make wrong results of their own. Run it by hand
# with STRESS_GS_WRITE_BACK=1 (or Scripts/stress.sh's STRESS_MODES).
GS_MODES = pytest.mark.parametrize(
    "mode", [[]] + ([["--write-back"]] if os.environ.get("STRESS_GS_WRITE_BACK") else []),
    ids=["default"] + (["write-back"] if os.environ.get("STRESS_GS_WRITE_BACK") else []))


@GS_MODES
def test_stress_gs(tmp_path, capsys, mode):
    hostport = os.environ.get("BUCKETFS_EMULATOR")
    if not hostport:
        pytest.skip("BUCKETFS_EMULATOR is not set")
    bucket = os.environ.get("BUCKETFS_EMULATOR_BUCKET", "bucketfs-test")
    stress(capsys, "--source", f"gs://{bucket}", "--endpoint", f"http://{hostport}", "--tmp", str(tmp_path),
           "--server-ignores-generation", *mode)
