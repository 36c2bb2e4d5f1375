"""Content types from names, and properties every object has anyway left out of listxattr
(docs/SEMANTICS.md §4.1), on real mounts of the embedded bucket and of both Cloud Storage servers:
rsync's temporary names, `bucketfs put`, an explicit type winning, and a second `rsync -aXi` of an
unchanged tree that itemizes nothing and writes no metadata. Firebase's: test_firebase.py."""
import os
import time

import pytest

from conftest import run, sh

CHANGES = {"write", "patch", "copy", "delete"}


def make_tree(root):
    """Files whose names mean a type, one that means none, and one with an explicit type."""
    (root / "sub").mkdir(parents=True)
    files = {"pic.jpg": b"\xff\xd8\xff jpeg", "sub/page.html": b"<p>hi</p>", "sub/notes": b"plain",
             "report.odt": b"odt", "explicit.jpg": b"\xff\xd8\xff also jpeg"}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    os.setxattr(root / "explicit.jpg", "user.storage.contentType", b"text/x-mine")
    for rel in files:
        os.utime(root / rel, (1_600_000_000, 1_600_000_000))
    return files


EXPECTED = {"pic.jpg": "image/jpeg", "sub/page.html": "text/html", "sub/notes": "application/octet-stream",
            # from /etc/mime.types, not the built-in table
            "report.odt": "application/vnd.oasis.opendocument.text", "explicit.jpg": "text/x-mine"}


def changes(log):
    return [line for line in log.read_text().splitlines() if line.split(" ")[0] in CHANGES]


def check_rsync_types_and_second_run(bucket, mounts, tmp_path, *options):
    src = tmp_path / "src"
    make_tree(src)
    log = tmp_path / "req.log"
    mnt = mounts.mount(bucket.src(), "--request-log", str(log), "--metadata-ttl", "30", *options)
    dst = os.path.join(mnt, "rs")
    os.mkdir(dst)
    sh(["rsync", "-aX", f"{src}/", f"{dst}/"])
    for rel, want in EXPECTED.items():
        # with --write-back the uploads follow rsync's exit
        for _ in range(100):
            if bucket.exists("rs/" + rel):
                break
            time.sleep(0.1)
        assert bucket.stat("rs/" + rel)["contentType"] == want, rel
    # A type an object has anyway is not listed; the explicit one is, and every one reads by name.
    assert "user.storage.contentType" not in os.listxattr(f"{dst}/pic.jpg")
    assert os.getxattr(f"{dst}/pic.jpg", "user.storage.contentType") == b"image/jpeg"
    assert "user.storage.contentType" in os.listxattr(f"{dst}/explicit.jpg")
    log.write_text("")
    again = sh(["rsync", "-aXi", f"{src}/", f"{dst}/"]).stdout.decode().strip()
    assert again == "", again
    assert changes(log) == [], changes(log)
    # and back out: the explicit type comes with the file, the inferred ones do not need to
    back = tmp_path / "back"
    sh(["rsync", "-aX", f"{dst}/", f"{back}/"])
    assert os.getxattr(back / "explicit.jpg", "user.storage.contentType") == b"text/x-mine"
    assert "user.storage.contentType" not in os.listxattr(back / "pic.jpg")


def test_rsync_gives_the_final_names_type_and_a_second_run_moves_nothing(any_bucket, mounts, tmp_path):
    check_rsync_types_and_second_run(any_bucket, mounts, tmp_path)


def test_rsync_gives_the_final_names_type_with_write_back(any_bucket, mounts, tmp_path):
    check_rsync_types_and_second_run(any_bucket, mounts, tmp_path, "--write-back")


def test_cp_and_setfattr_through_the_mount(any_bucket, mounts, tmp_path):
    (tmp_path / "a.html").write_bytes(b"<p>")
    mnt = mounts.mount(any_bucket.src())
    sh(["cp", str(tmp_path / "a.html"), f"{mnt}/a.html"])
    assert any_bucket.stat("a.html")["contentType"] == "text/html"
    # An explicit type survives a rename to a name that means another.
    sh(["setfattr", "-n", "user.storage.contentType", "-v", "text/plain", f"{mnt}/a.html"])
    sh(["mv", f"{mnt}/a.html", f"{mnt}/b.jpg"])
    assert any_bucket.stat("b.jpg")["contentType"] == "text/plain"


def test_put_gives_the_type_of_the_objects_name(any_bucket, tmp_path):
    pic = tmp_path / "x.jpg"
    pic.write_bytes(b"\xff\xd8\xff")
    extra = getattr(any_bucket, "extra", [])
    run("put", pic, any_bucket.src("x.jpg"), *extra)
    assert any_bucket.stat("x.jpg")["contentType"] == "image/jpeg"
    # the object's name counts, not the local file's
    run("put", pic, any_bucket.src("y.html"), *extra)
    assert any_bucket.stat("y.html")["contentType"] == "text/html"
    run("put", "-", any_bucket.src("z.png"), *extra, input=b"x")
    assert any_bucket.stat("z.png")["contentType"] == "image/png"
    # explicit wins; the default and no inference
    run("put", pic, any_bucket.src("e.jpg"), "--content-type", "text/x-mine", *extra)
    assert any_bucket.stat("e.jpg")["contentType"] == "text/x-mine"
    run("put", pic, any_bucket.src("n.jpg"), "--no-infer-content-type", *extra)
    assert any_bucket.stat("n.jpg")["contentType"] == "application/octet-stream"
    run("put", pic, any_bucket.src("d.unknownext"), "--content-type-default", "text/x-default", *extra)
    assert any_bucket.stat("d.unknownext")["contentType"] == "text/x-default"
    # put -r types each file by its own name
    tree = tmp_path / "tree"
    (tree / "s").mkdir(parents=True)
    (tree / "s" / "a.css").write_bytes(b"p{}")
    (tree / "b.json").write_bytes(b"{}")
    run("put", "-r", tree, any_bucket.src("r"), *extra)
    assert any_bucket.stat("r/s/a.css")["contentType"] == "text/css"
    assert any_bucket.stat("r/b.json")["contentType"] == "application/json"


def test_mount_options_set_the_default_and_turn_inference_off(bucket, mounts, tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "b.unknownext").write_bytes(b"x")
    mnt = mounts.mount(bucket.src(), "--content-type-default", "text/x-default")
    sh(["cp", str(tmp_path / "a.jpg"), str(tmp_path / "b.unknownext"), mnt])
    assert bucket.stat("a.jpg")["contentType"] == "image/jpeg"
    assert bucket.stat("b.unknownext")["contentType"] == "text/x-default"
    assert "user.storage.contentType" not in os.listxattr(f"{mnt}/b.unknownext")
    off = mounts.mount(bucket.src(), "--no-infer-content-type")
    sh(["cp", str(tmp_path / "a.jpg"), f"{off}/c.jpg"])
    assert bucket.stat("c.jpg")["contentType"] == "application/octet-stream"
