"""A real mount of a bucket with a hierarchical namespace, on the project's own server
(`gcs-test-server --hns`, Tests/e2e/own_gcs.py; docs/TESTING.md, "Hierarchical-namespace test
servers"): the mount learns the layout and says it in its log (and whoami); mkdir makes a folder
and no placeholder object; empty folders list, also for another mount; an emptied folder stays a
directory; rmdir of a full folder is ENOTEMPTY, of an empty one deletes the folder; a directory's
xattrs are refused; `mv` of a directory is one folder rename and of a file one move (counted in
the mount's request log); a rename whose operation is never answered leaves nothing half done."""
import errno
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import BIN, eventually, sh
from daemons import daemon_pid
from faultproxy import FaultProxy
from own_gcs import OwnServer


def get(srv, path):
    """(status, JSON) of a GET on the server's JSON API."""
    try:
        with urllib.request.urlopen(f"{srv.endpoint}/storage/v1/b/{srv.bucket_name}/{path}", timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}


def folder(srv, name):
    return get(srv, "folders/" + urllib.parse.quote(name, safe=""))[0]


def obj(srv, name):
    return get(srv, "o/" + urllib.parse.quote(name, safe=""))[0]


@pytest.fixture
def hns():
    srv = OwnServer(f"hns-{uuid.uuid4().hex[:8]}", hns=True)
    yield srv
    srv.stop()


def test_a_mount_of_a_hierarchical_bucket_uses_folders(mounts, hns):
    mnt = mounts.mount(hns.src(), *hns.options)
    log = open(mounts.log_path(mnt)).read()
    assert "bucket layout: hierarchical namespace (folders; a directory rename is one request)" in log, log[-3000:]
    os.mkdir(f"{mnt}/d")
    assert folder(hns, "d/") == 200
    assert obj(hns, "d/") == 404, "no placeholder object"
    os.mkdir(f"{mnt}/d/sub")
    with open(f"{mnt}/d/sub/f", "w") as f:
        f.write("hello")
    os.rename(f"{mnt}/d", f"{mnt}/e")
    assert sorted(os.listdir(mnt)) == ["e"]
    assert open(f"{mnt}/e/sub/f").read() == "hello"
    assert folder(hns, "d/") == 404 and folder(hns, "e/") == 200 and folder(hns, "e/sub/") == 200
    assert obj(hns, "e/sub/f") == 200 and obj(hns, "d/sub/f") == 404
    with pytest.raises(OSError) as e:
        os.rmdir(f"{mnt}/e/sub")
    assert e.value.errno == errno.ENOTEMPTY
    os.rename(f"{mnt}/e/sub/f", f"{mnt}/e/sub/g")
    assert obj(hns, "e/sub/g") == 200 and obj(hns, "e/sub/f") == 404
    os.unlink(f"{mnt}/e/sub/g")
    assert folder(hns, "e/sub/") == 200, "an emptied folder stays"
    assert os.path.isdir(f"{mnt}/e/sub") and os.listdir(f"{mnt}/e/sub") == []
    os.rmdir(f"{mnt}/e/sub")
    assert folder(hns, "e/sub/") == 404
    mounts.unmount(mnt)
    # A mount that starts afresh sees the empty folder as a directory (listed as a prefix).
    mnt = mounts.mount(hns.src(), *hns.options)
    assert os.listdir(mnt) == ["e"] and os.listdir(f"{mnt}/e") == []
    mounts.unmount(mnt)


def test_whoami_says_the_layout(hns):
    p = subprocess.run([BIN, "whoami", hns.src(), *hns.options], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "bucket layout: hierarchical namespace (folders; a directory rename is one request)\n" in p.stdout, p.stdout


def test_a_mount_of_a_flat_bucket_says_so(mounts):
    srv = OwnServer(f"flat-{uuid.uuid4().hex[:8]}")
    try:
        mnt = mounts.mount(srv.src(), *srv.options)
        log = open(mounts.log_path(mnt)).read()
        mounts.unmount(mnt)
    finally:
        srv.stop()
    assert "bucket layout: flat" in log, log[-3000:]


def requests(log, since=0):
    lines = log.read_text().splitlines()[since:]
    return [l.split(" ", 1)[0] for l in lines]


def test_mkdir_rmdir_and_empty_folders(hns, mounts, tmp_path):
    log = tmp_path / "requests.log"
    mnt = mounts.mount(hns.src(), *hns.options, "--request-log", log)
    os.mkdir(f"{mnt}/empty")
    os.makedirs(f"{mnt}/a/b/c")
    # Another mount of the bucket sees the empty folders: they are the server's, not this mount's.
    other = mounts.mount(hns.src(), *hns.options)
    assert sorted(os.listdir(other)) == ["a", "empty"]
    assert os.listdir(f"{other}/a/b/c") == []
    with open(f"{mnt}/a/b/c/f.txt", "w") as f:
        f.write("x")
    with pytest.raises(OSError) as e:
        os.rmdir(f"{mnt}/a/b/c")
    assert e.value.errno == 39  # ENOTEMPTY
    os.unlink(f"{mnt}/a/b/c/f.txt")
    # Emptied, the folder stays (on a flat bucket a prefix-only directory would go).
    assert eventually(lambda: os.listdir(f"{other}/a/b") == ["c"], timeout=15)
    os.rmdir(f"{mnt}/a/b/c")
    os.rmdir(f"{mnt}/empty")
    assert eventually(lambda: sorted(os.listdir(other)) == ["a"], timeout=15)
    lines = requests(log)
    assert "folder_create" in lines and "folder_delete" in lines
    assert not [l for l in log.read_text().splitlines() if l.startswith("write ") and l.endswith("/")], \
        "no placeholder objects on a hierarchical bucket"
    # A directory's xattrs: a folder keeps none.
    p = subprocess.run(["setfattr", "-n", "user.color", "-v", "blue", f"{mnt}/a"], capture_output=True)
    assert p.returncode != 0 and b"not supported" in p.stderr.lower(), p.stderr


def test_mv_of_a_directory_is_one_folder_rename(hns, mounts, tmp_path):
    log = tmp_path / "requests.log"
    mnt = mounts.mount(hns.src(), *hns.options, "--request-log", log)
    os.makedirs(f"{mnt}/ckpt.tmp/sub")
    for i in range(200):
        with open(f"{mnt}/ckpt.tmp/shard{i:03d}", "wb") as f:
            f.write(b"s%d" % i)
    with open(f"{mnt}/ckpt.tmp/sub/meta", "w") as f:
        f.write("m")
    since = len(log.read_text().splitlines())
    sh(["mv", f"{mnt}/ckpt.tmp", f"{mnt}/ckpt"])
    ops = requests(log, since)
    assert ops.count("folder_rename") == 1, ops
    assert "copy" not in ops and "delete" not in ops and "move" not in ops, ops
    assert len(ops) <= 10, ops
    assert sorted(os.listdir(mnt)) == ["ckpt"]
    assert len(os.listdir(f"{mnt}/ckpt")) == 201
    with open(f"{mnt}/ckpt/shard123", "rb") as f:
        assert f.read() == b"s123"
    other = mounts.mount(hns.src(), *hns.options)
    assert sorted(os.listdir(other)) == ["ckpt"] and len(os.listdir(f"{other}/ckpt")) == 201


def test_mv_of_a_file_is_one_move(hns, mounts, tmp_path):
    log = tmp_path / "requests.log"
    mnt = mounts.mount(hns.src(), *hns.options, "--request-log", log)
    os.mkdir(f"{mnt}/d")
    with open(f"{mnt}/d/model.bin", "wb") as f:
        f.write(b"w" * 1000)
    since = len(log.read_text().splitlines())
    sh(["mv", f"{mnt}/d/model.bin", f"{mnt}/model.bin"])
    ops = requests(log, since)
    assert ops.count("move") == 1 and "copy" not in ops and "delete" not in ops, ops
    with open(f"{mnt}/model.bin", "rb") as f:
        assert f.read() == b"w" * 1000
    assert os.listdir(f"{mnt}/d") == []


def test_a_rename_whose_operation_is_answered_late_or_never_leaves_nothing_half_done(hns, mounts, tmp_path):
    """The server takes the rename; every poll of its operation then stalls (an outage): the
    rename fails within the op timeout, with the operation named in the log, and afterwards the
    mount shows one whole tree, as the server does."""
    proxy = FaultProxy(hns.hostport)
    proxy.start()
    try:
        mnt = mounts.mount(hns.src(), "--endpoint", proxy.endpoint, "--anonymous", "--op-timeout", "5")
        os.makedirs(f"{mnt}/src")
        for i in range(20):
            with open(f"{mnt}/src/f{i:02d}", "w") as f:
                f.write(str(i))
        proxy.add_rule(method="GET", path_re="/operations/", action="hang", times=1000)
        t = time.monotonic()
        p = subprocess.run(["mv", f"{mnt}/src", f"{mnt}/dst"], capture_output=True, timeout=60)
        took = time.monotonic() - t
        assert p.returncode != 0 and took < 30, (p.returncode, took, p.stderr)
        assert "operations/" in open(mounts.log_path(mnt)).read()
        proxy.clear()
        proxy.release()
        # Whatever the server did, one whole tree: never files in both, never half of each.
        def whole():
            names = sorted(os.listdir(mnt))
            return names in (["src"], ["dst"]) and len(os.listdir(f"{mnt}/{names[0]}")) == 20
        assert eventually(whole, timeout=20), sorted(os.listdir(mnt))
        assert not os.path.exists(f"{mnt}/dst/src"), "mv must not have copied into a half-built destination"
    finally:
        proxy.stop()


def test_a_crash_in_the_middle_of_a_folder_rename_leaves_one_whole_tree(hns, mounts, tmp_path):
    """kill -9 of the mount while its folder rename's operation is still being polled: the
    server does the rename all or nothing, so a new mount shows the whole tree in one place."""
    proxy = FaultProxy(hns.hostport)
    proxy.start()
    try:
        mnt = mounts.mount(hns.src(), "--endpoint", proxy.endpoint, "--anonymous")
        os.makedirs(f"{mnt}/src")
        for i in range(20):
            with open(f"{mnt}/src/f{i:02d}", "w") as f:
                f.write(str(i))
        hang = proxy.add_rule(method="GET", path_re="/operations/", action="hang", times=1000)
        mv = subprocess.Popen(["mv", f"{mnt}/src", f"{mnt}/dst"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert eventually(lambda: hang.fired > 0, timeout=30), "the rename's operation was never polled"
        pid = daemon_pid(mnt)
        os.kill(pid, signal.SIGKILL)
        mv.wait(timeout=30)
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        proxy.clear()
        proxy.release()
        again = mounts.mount(hns.src(), *hns.options)
        names = sorted(os.listdir(again))
        assert names in (["src"], ["dst"]), names
        assert sorted(os.listdir(f"{again}/{names[0]}")) == [f"f{i:02d}" for i in range(20)]
    finally:
        proxy.stop()
