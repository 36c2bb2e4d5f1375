"""`bucketfs recover` after a crash, as an operator meets it (docs/OPERATING.md, "The recovery
runbook"): a dry run changes nothing on disk or in the bucket (the cache directory compared byte
for byte); the cache directory records how the mount reached its bucket (never a secret), so
`recover` needs no --endpoint or credential options; a refusal names every option that can fix it."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import BIN
from test_faults import UPLOAD, fx, rand  # noqa: F401 (fx: fixture)
from test_unattended import CLOSE_WITH_METADATA, crash, writer_holding_open


def tree(root):
    """{relative path: (mode, bytes' sha256)} of every file and directory under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            digest = hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.isfile(p) else None
            out[os.path.relpath(p, root)] = (st.st_mode, digest)
    return out


def crashed_cache(fx, tmp_path):
    """A --write-back mount killed with a closed file whose upload hung and a file still open."""
    mnt = fx.mount("--write-back")
    cache = fx.mounts.cache_dir(mnt)
    fx.proxy.add_rule(method="POST", path_re=UPLOAD, action="hang")
    r = fx.job([sys.executable, "-c", CLOSE_WITH_METADATA, f"{mnt}/done.txt"]).result(30)
    assert r.rc == 0, r
    (tmp_path / "part.bin").write_bytes(rand(1 << 20))
    w = writer_holding_open(tmp_path / "part.bin", f"{mnt}/part.bin")
    crash(mnt)
    w.kill()
    w.wait()
    fx.proxy.clear()
    fx.proxy.release()
    return cache


@pytest.mark.faults
def test_a_dry_run_changes_nothing_and_recover_reaches_the_bucket_as_the_mount_did(fx, tmp_path):
    cache = crashed_cache(fx, tmp_path)
    recorded = json.load(open(os.path.join(cache, ".source")))
    assert recorded["endpoint"] and recorded["credentials"] == "anonymous", recorded
    assert not any("token" in k.lower() and k != "credentials" for k in recorded), recorded
    before = tree(cache)
    assert any(n.startswith("stage-") for n in before), before  # the crash's stage files, not yet moved
    # No --endpoint, no credential option: the recorded ones are used (not the metadata server).
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    dry = subprocess.run([BIN, "recover", cache, "--dry-run"], capture_output=True, text=True, timeout=60, env=env)
    assert dry.returncode == 0, dry
    assert "would upload: 'done.txt'" in dry.stdout and "cut off (left)" in dry.stdout, dry
    assert tree(cache) == before, "a dry run changed the cache directory"
    assert fx.get("done.txt") is None
    rec = subprocess.run([BIN, "recover", cache], capture_output=True, text=True, timeout=60, env=env)
    assert "uploaded: 'done.txt'" in rec.stdout, rec
    assert "--endpoint" in rec.stderr, rec  # says it reached the bucket as the mount did
    assert fx.get("done.txt") == b"complete content\n" * 1000


@pytest.mark.faults
def test_a_refused_recovery_names_every_option_that_can_fix_it(fx, tmp_path):
    cache = crashed_cache(fx, tmp_path)
    # Told otherwise (an endpoint where nothing listens): refused, with every option named.
    rec = subprocess.run([BIN, "recover", cache, "--endpoint", "http://127.0.0.1:1", "--anonymous"],
                         capture_output=True, text=True, timeout=120)
    assert rec.returncode != 0, rec
    for option in ("--endpoint", "--key-file", "--token", "--anonymous", "--ca-file", "--to"):
        assert option in rec.stderr, (option, rec.stderr)


def status(fx):
    st = subprocess.run([BIN, "status", f"gs://{fx.emulator.bucket_name}/{fx.prefix}"], capture_output=True, text=True, timeout=30)
    return st.returncode, st.stdout.strip().splitlines()[-1]


def lost(cache):
    d = os.path.join(cache, "lost+found")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@pytest.mark.faults
def test_cut_off_files_are_settled_by_keeping_them_aside_and_status_then_turns_green(fx, tmp_path):
    cache = crashed_cache(fx, tmp_path)
    rc, last = status(fx)
    assert rc == 1 and f"bucketfs recover {cache}" in last and "--drop-cut-off" in last and "--keep-aside" in last, last
    aside = tmp_path / "aside"
    before = tree(cache)
    dry = subprocess.run([BIN, "recover", cache, "--dry-run", "--keep-aside", aside], capture_output=True, text=True, timeout=60)
    assert "would keep aside" in dry.stdout, dry
    assert tree(cache) == before and not aside.exists()
    # The complete file is uploaded; the cut-off one stays (recover exits 0: only cut-off is left).
    rec = subprocess.run([BIN, "recover", cache], capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0 and "uploaded: 'done.txt'" in rec.stdout and "cut off (left)" in rec.stdout, rec
    assert "--drop-cut-off" in rec.stdout and "--keep-aside" in rec.stdout, rec.stdout
    rc, last = status(fx)
    assert rc == 1 and "cut-off" in last, last
    rec = subprocess.run([BIN, "recover", cache, "--keep-aside", aside], capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0 and "kept aside" in rec.stdout, rec
    assert lost(cache) == []
    moved = sorted(os.listdir(aside))
    assert len(moved) == 2 and moved[0].startswith("part.bin.") and moved[0].endswith(".cut-off") and moved[1] == moved[0] + ".json", moved
    assert os.path.getsize(aside / moved[0]) == 1 << 20
    rc, last = status(fx)
    assert rc == 0 and "nothing to run" in last, last


@pytest.mark.faults
def test_a_cut_off_file_the_bucket_holds_newer_is_dropped_and_the_rest_with_drop_cut_off(fx, tmp_path):
    cache = crashed_cache(fx, tmp_path)
    # The writer ran again after the crash (a backup tool's next run): the bucket holds part.bin whole.
    fx.put("part.bin", b"written again, whole\n")
    rec = subprocess.run([BIN, "recover", cache], capture_output=True, text=True, timeout=60)
    assert "dropped (superseded)" in rec.stdout and "part.bin" in rec.stdout, rec
    assert rec.returncode == 0 and lost(cache) == [], (rec, lost(cache))
    assert fx.get("part.bin") == b"written again, whole\n"
    rc, last = status(fx)
    assert rc == 0, last
    # Another crash, whose writer does not run again: --drop-cut-off, after a look.
    (tmp_path / "again").mkdir()
    cache = crashed_cache(fx, tmp_path / "again")
    subprocess.run([BIN, "recover", cache], capture_output=True, text=True, timeout=60)
    assert status(fx)[0] == 1
    before = tree(cache)
    dry = subprocess.run([BIN, "recover", cache, "--drop-cut-off", "--dry-run"], capture_output=True, text=True, timeout=60)
    assert "would drop (--drop-cut-off)" in dry.stdout and tree(cache) == before, dry
    rec = subprocess.run([BIN, "recover", cache, "--drop-cut-off"], capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0 and "dropped (--drop-cut-off)" in rec.stdout and lost(cache) == [], rec
    rc, last = status(fx)
    assert rc == 0 and "nothing to run" in last, last
