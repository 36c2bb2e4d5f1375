"""docs/SEMANTICS.md §3.6 through a real gs:// mount: the walk-ahead fetches on evidence only.
An incremental backup (rdiff-backup, restic, borg: each that is installed; Scripts/setup.sh
installs them) of a tree of 50 files where 2 changed costs at most 4 media GETs with the
default options; a walk still gets its next files fetched before it opens them. Media GETs are
counted in the mount's --request-log ("read NAME": one line per ranged GET, written before it
is sent, NAME relative to the mount's prefix)."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import BIN, sh, without_hedges

N = 50
CHANGED = (9, 30)


def _content(i, version=1):
    return (f"file {i} version {version}\n".encode() * 400)[: 8000 + 100 * version + i]


def _fill(emulator, prefix):
    b = emulator.bucket()
    for i in range(N):
        b.blob(f"{prefix}/tree/f{i:02d}").upload_from_string(_content(i))


def _reads(log):
    """The names read (media GETs) in the request log, in order (relative to the mount's prefix)."""
    out = []
    for line in log.read_text().splitlines():
        kind, _, name = line.partition(" ")
        if kind == "read":
            out.append(name)
    return out


def _mount_at(mounts, mnt, source, *options):
    """A mount at the fixed point `mnt` (restic finds its parent snapshot by the path backed up)."""
    os.makedirs(mnt, exist_ok=True)
    if mnt not in mounts.points:
        mounts.points.append(mnt)
    subprocess.run([BIN, "mount", source, mnt, "--log-file", f"{mnt}.log", "--cache-dir", f"{mnt}.cache",
                    *without_hedges(options), *mounts.gs_options], check=True, capture_output=True, timeout=60)
    return mnt


def _rdiff_backup(mnt, repo, tmp):
    sh(["rdiff-backup", "backup", f"{mnt}/tree", str(repo)])


def _rdiff_backup_check(repo, tmp):
    return {i: (repo / f"f{i:02d}").read_bytes() for i in CHANGED}


def _restic(mnt, repo, tmp):
    env = dict(os.environ, RESTIC_REPOSITORY=str(repo), RESTIC_PASSWORD="test", XDG_CACHE_HOME=str(tmp / "cache"))
    if not repo.exists():
        sh(["restic", "init"], env=env)
    sh(["restic", "backup", "--quiet", "tree"], cwd=mnt, env=env)


def _restic_check(repo, tmp):
    env = dict(os.environ, RESTIC_REPOSITORY=str(repo), RESTIC_PASSWORD="test", XDG_CACHE_HOME=str(tmp / "cache"))
    return {i: sh(["restic", "dump", "latest", f"/tree/f{i:02d}"], env=env).stdout for i in CHANGED}


def _borg_env(tmp):
    return dict(os.environ, BORG_BASE_DIR=str(tmp / "borg-home"), BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes",
                BORG_RELOCATED_REPO_ACCESS_IS_OK="yes")


def _borg(mnt, repo, tmp):
    env = _borg_env(tmp)
    if not repo.exists():
        sh(["borg", "init", "-e", "none", str(repo)], env=env)
    (tmp / "borg-archives").mkdir(exist_ok=True)
    archive = f"a{len(list((tmp / 'borg-archives').iterdir()))}"
    (tmp / "borg-archives" / archive).touch()
    sh(["borg", "create", f"{repo}::{archive}", "tree"], cwd=mnt, env=env)


def _borg_check(repo, tmp):
    env = _borg_env(tmp)
    last = sorted((tmp / "borg-archives").glob("*"))[-1].name
    return {i: sh(["borg", "extract", "--stdout", f"{repo}::{last}", f"tree/f{i:02d}"], env=env).stdout
            for i in CHANGED}


TOOLS = {"rdiff-backup": (_rdiff_backup, _rdiff_backup_check), "restic": (_restic, _restic_check),
         "borg": (_borg, _borg_check)}


@pytest.mark.one_server
@pytest.mark.parametrize("tool", list(TOOLS))
def test_an_incremental_backup_of_2_changed_of_50_costs_at_most_4_media_gets(emulator, prefix, mounts, tmp_path, tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Scripts/setup.sh installs it)")
    backup, check = TOOLS[tool]
    _fill(emulator, prefix)
    repo = tmp_path / "repo"
    mnt = _mount_at(mounts, str(tmp_path / "mnt"), emulator.src(prefix), "--read-only")
    backup(mnt, repo, tmp_path)
    mounts.unmount(mnt)
    time.sleep(1.1)  # a new mtime in whole seconds too
    for i in CHANGED:
        emulator.bucket().blob(f"{prefix}/tree/f{i:02d}").upload_from_string(_content(i, 2))
    log = tmp_path / "requests.log"
    _mount_at(mounts, mnt, emulator.src(prefix), "--read-only", "--request-log", str(log))
    backup(mnt, repo, tmp_path)
    reads = _reads(log)
    mounts.unmount(mnt)
    assert {f"tree/f{i:02d}" for i in CHANGED} <= set(reads), reads
    assert len(reads) <= len(CHANGED) + 2, f"{tool}: {len(reads)} media GETs for {len(CHANGED)} changed: {reads}"
    assert check(repo, tmp_path) == {i: _content(i, 2) for i in CHANGED}


@pytest.mark.one_server
def test_a_walk_gets_its_next_files_fetched_before_it_opens_them(emulator, prefix, mounts, tmp_path):
    _fill(emulator, prefix)
    log = tmp_path / "requests.log"
    mnt = mounts.mount(emulator.src(prefix), "--read-only", "--request-log", str(log), "--metadata-ttl", "60")
    names = sorted(os.listdir(f"{mnt}/tree"))
    assert names == [f"f{i:02d}" for i in range(N)]
    for i in range(4):
        with open(f"{mnt}/tree/{names[i]}", "rb") as f:
            assert f.read() == _content(i)
    # Nothing opens f04 … yet their GETs come: the walk is evident after three neighbours.
    deadline = time.time() + 10
    while time.time() < deadline and not {"tree/f04", "tree/f05", "tree/f06", "tree/f07"} <= set(_reads(log)):
        time.sleep(0.05)
    assert {"tree/f04", "tree/f05", "tree/f06", "tree/f07"} <= set(_reads(log)), _reads(log)
    # tar of the whole tree: one GET per file, whatever was fetched ahead and when.
    out = subprocess.run(["tar", "-cf", "-", "-C", mnt, "tree"], capture_output=True, check=True).stdout
    assert len(out) > N * 8000
    reads = _reads(log)
    assert sorted(reads) == [f"tree/f{i:02d}" for i in range(N)], reads
