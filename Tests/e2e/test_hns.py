"""A real mount of a bucket with a hierarchical namespace, on the project's own server
(`gcs-test-server --hns`, Tests/e2e/own_gcs.py; docs/TESTING.md, "Hierarchical-namespace test
servers"): the mount learns the layout and says it in its log; mkdir makes a folder and no
placeholder object; a directory rename moves everything under it at once; an emptied folder
stays a directory; rmdir of a full folder is ENOTEMPTY, of an empty one deletes the folder;
whoami prints the layout."""
import errno
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import BIN
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
