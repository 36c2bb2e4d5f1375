"""The log as an audit trail (docs/OPERATING.md, "Logs"): at info level, one line per finished
upload with its object, bytes, generation, attempts and time, as stable JSON fields; at notice
level a summary at unmount."""
import json
import os
import subprocess
import time

from conftest import BIN  # noqa: F401 (the binary under test)
from daemons import daemon_pid
from test_unattended import wait_gone

FILES = 1000


def events(log, event):
    out = []
    for line in open(log):
        line = line.strip()
        if line.startswith("{"):
            o = json.loads(line)
            if o.get("event") == event:
                out.append(o)
    return out


def test_the_info_log_of_a_1000_file_rsync_has_one_upload_line_per_file_and_a_summary_at_unmount(bucket, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(FILES):
        (src / f"f{i:04d}.txt").write_bytes(b"x" * (i + 1))
    mnt = mounts.mount(bucket.src(), "--log-format", "json")
    log = mounts.log_path(mnt)
    r = subprocess.run(["rsync", "-r", f"{src}/", f"{mnt}/dst/"], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    uploads = events(log, "upload")
    by_object = {}
    for o in uploads:
        by_object.setdefault(o["object"], []).append(o)
    # rsync writes each file under a temporary name, then renames it: one upload per file.
    assert len(uploads) == FILES, (len(uploads), uploads[:3])
    assert all(o["level"] == "info" for o in uploads)
    for o in uploads:
        assert set(o) >= {"time", "level", "message", "object", "bytes", "generation", "attempts", "seconds"}, o
        assert int(o["bytes"]) >= 1 and int(o["generation"]) > 0 and o["attempts"] == "1" and float(o["seconds"]) >= 0, o
    assert sorted(int(o["bytes"]) for o in uploads) == list(range(1, FILES + 1))
    pid = daemon_pid(mnt)
    mounts.unmount(mnt)
    assert wait_gone(pid, timeout=60)
    [summary] = [o for o in events(log, "summary") if "unmount" in o["message"]]
    assert summary["level"] == "notice" and summary["uploads"] == str(FILES), summary
    assert summary["bytes"] == str(FILES * (FILES + 1) // 2) and summary["given_up"] == "0" and summary["lost_found"] == "0", summary
