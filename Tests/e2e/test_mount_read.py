"""docs/SEMANTICS.md §3, §4, §6 through a real mount of the embedded bucket: listing, stat, reads,
extended attributes, hidden names, backup tools, request counts."""
import errno
import hashlib
import os
import stat

import pytest

from conftest import run, sh

FOREST = os.urandom(300_000)


def fill(bucket):
    bucket.put("hello.txt", b"Hello from bucketfs\n", content_type="text/plain", metadata={"greeting": "hi"})
    bucket.put("images/forest.jpg", FOREST, content_type="image/jpeg",
               metadata={"location": "Yosemite, CA, USA", "activity": "Hiking"})
    bucket.put("images/uid/file1", b'{"a":1}', content_type="application/json")
    bucket.put("docs/readme.md", b"# readme\n", metadata={"goog-reserved-file-mtime": "1700000000"})
    bucket.put("empty/", b"", exact=True)


def test_ls_stat_find_du_cat(bucket, mounts):
    fill(bucket)
    mnt = mounts.mount(bucket.src())
    assert sorted(os.listdir(mnt)) == ["docs", "empty", "hello.txt", "images"]
    assert sorted(os.listdir(f"{mnt}/images")) == ["forest.jpg", "uid"]
    assert os.listdir(f"{mnt}/empty") == []
    ls = sh(["ls", "-l", f"{mnt}/images"]).stdout.decode()
    assert "forest.jpg" in ls and "300000" in ls
    st = os.stat(f"{mnt}/images/forest.jpg")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 300_000
    assert st.st_blocks == (300_000 + 511) // 512
    meta = bucket.stat("images/forest.jpg")
    assert st.st_ino == os.stat(f"{mnt}/images/forest.jpg").st_ino  # stable
    # mtime from goog-reserved-file-mtime, else updated
    assert os.stat(f"{mnt}/docs/readme.md").st_mtime == 1700000000
    assert abs(st.st_mtime - _rfc3339(meta["updated"])) < 1.0
    for d in ["", "images", "images/uid", "empty", "docs"]:
        dst = os.stat(f"{mnt}/{d}")
        assert stat.S_ISDIR(dst.st_mode) and dst.st_nlink == 1
    found = sorted(sh(["find", mnt, "-type", "f"]).stdout.decode().split())
    assert found == sorted(f"{mnt}/{p}" for p in ["hello.txt", "images/forest.jpg", "images/uid/file1", "docs/readme.md"])
    du = int(sh(["du", "-s", "-B1", f"{mnt}/images"]).stdout.split()[0])
    assert du >= 300_000
    with open(f"{mnt}/images/forest.jpg", "rb") as f:
        assert f.read() == FOREST
    sh(["cmp", f"{mnt}/hello.txt", "-"], input=bucket.cat("hello.txt"))
    svfs = os.statvfs(mnt)
    assert svfs.f_namemax == 255 and svfs.f_bavail > 0


def _rfc3339(s):
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def test_xattrs_get_set_remove(bucket, mounts):
    fill(bucket)
    mnt = mounts.mount(bucket.src())
    f = f"{mnt}/images/forest.jpg"
    dump = sh(["getfattr", "-d", f]).stdout.decode()
    assert 'user.activity="Hiking"' in dump and 'user.location="Yosemite, CA, USA"' in dump
    assert "md5Hash" not in dump  # read-only properties are not listed
    assert sh(["getfattr", "--only-values", "-n", "user.storage.contentType", f]).stdout == b"image/jpeg"
    # image/jpeg is what forest.jpg's name means: readable, not listed (docs/SEMANTICS.md §4.1)
    names = os.listxattr(f)
    assert "user.storage.contentType" not in names and "user.storage.cacheControl" not in names
    assert os.getxattr(f, "user.storage.md5Hash").decode() == bucket.stat("images/forest.jpg")["md5Hash"]

    sh(["setfattr", "-n", "user.k", "-v", "v", f])
    cm = bucket.stat("images/forest.jpg")["customMetadata"]
    assert cm == {"k": "v", "location": "Yosemite, CA, USA", "activity": "Hiking"}
    sh(["setfattr", "-x", "user.k", f])
    assert "k" not in bucket.stat("images/forest.jpg")["customMetadata"]
    sh(["setfattr", "-n", "user.storage.contentType", "-v", "image/png", f])
    assert bucket.stat("images/forest.jpg")["contentType"] == "image/png"
    assert "user.storage.contentType" in os.listxattr(f)
    sh(["setfattr", "-x", "user.storage.contentType", f])
    assert "contentType" not in bucket.stat("images/forest.jpg")

    def err(fn):
        with pytest.raises(OSError) as e:
            fn()
        return e.value.errno

    assert err(lambda: os.setxattr(f, "user.storage.md5Hash", b"x")) == errno.EPERM
    assert err(lambda: os.removexattr(f, "user.storage.generation")) == errno.EPERM
    assert err(lambda: os.setxattr(f, "user.big", b"x" * 4097)) == errno.E2BIG
    assert err(lambda: os.setxattr(f, "user.bad", b"\xff\xfe")) == errno.EINVAL
    assert err(lambda: os.getxattr(f, "user.missing")) == errno.ENODATA
    # not supported, so that `ls -l` asks once per mount (docs/SEMANTICS.md §4)
    assert err(lambda: os.getxattr(f, "security.selinux")) == errno.ENOTSUP
    assert err(lambda: os.getxattr(f, "system.posix_acl_access")) == errno.ENOTSUP
    assert err(lambda: os.getxattr(f, "security.capability")) == errno.ENODATA
    assert err(lambda: os.setxattr(f, "user.firebaseStorageDownloadTokens", b"t")) == errno.EPERM
    os.setxattr(f, "user.a", b"a" * 4000)
    os.setxattr(f, "user.b", b"b" * 4000)
    assert err(lambda: os.setxattr(f, "user.c", b"c" * 400)) == errno.ENOSPC
    assert set(bucket.stat("images/forest.jpg")["customMetadata"]) == {"location", "activity", "a", "b"}
    # ERANGE for a buffer too small is answered by the kernel/FuseKit: getfattr probes sizes, so it works
    assert len(os.getxattr(f, "user.a")) == 4000
    # the bytes did not change
    assert hashlib.md5(open(f, "rb").read()).digest() == hashlib.md5(FOREST).digest()


def test_directory_xattrs_and_placeholder_creation(bucket, mounts):
    fill(bucket)
    bucket.put("prefixonly/x", b"x")
    mnt = mounts.mount(bucket.src())
    os.setxattr(f"{mnt}/empty", "user.owner", b"team-a")
    assert bucket.stat("empty/")["customMetadata"] == {"owner": "team-a"}
    assert not bucket.exists("prefixonly/")
    os.setxattr(f"{mnt}/prefixonly", "user.owner", b"team-b")
    assert bucket.stat("prefixonly/")["customMetadata"] == {"owner": "team-b"}
    assert sorted(os.listdir(f"{mnt}/prefixonly")) == ["x"]


def test_hidden_names_and_clash(bucket, mounts):
    bucket.put("ok/fine.txt", b"fine")
    bucket.put("ok//double", b"x", exact=True)
    bucket.put("ok/./dot", b"x", exact=True)
    bucket.put("ok/../dotdot", b"x", exact=True)
    bucket.put("ok/" + "L" * 256, b"x", exact=True)
    bucket.put("clash", b"i am a file")
    bucket.put("clash/inner", b"inner")
    mnt = mounts.mount(bucket.src())
    assert sorted(os.listdir(f"{mnt}/ok")) == ["fine.txt"]
    assert sorted(os.listdir(mnt)) == ["clash", "ok"]
    assert os.path.isdir(f"{mnt}/clash") and os.listdir(f"{mnt}/clash") == ["inner"]
    assert bucket.cat("clash") == b"i am a file"  # still reachable through the library
    found = sh(["find", mnt]).stdout.decode().split("\n")
    assert not any("double" in x or "dotdot" in x or "LLLL" in x for x in found)


def test_read_only_mount(bucket, mounts):
    fill(bucket)
    mnt = mounts.mount(bucket.src(), "--read-only")
    with pytest.raises(OSError) as e:
        os.setxattr(f"{mnt}/hello.txt", "user.x", b"y")
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        open(f"{mnt}/new.txt", "w")
    assert e.value.errno == errno.EROFS
    assert open(f"{mnt}/hello.txt", "rb").read() == b"Hello from bucketfs\n"


def test_rsync_and_tar_roundtrip(bucket, mounts, tmp_path):
    fill(bucket)
    mnt = mounts.mount(bucket.src(), "--metadata-ttl", "30")
    out = tmp_path / "copy"
    sh(["rsync", "-aX", f"{mnt}/", f"{out}/"])
    for name in ["hello.txt", "images/forest.jpg", "images/uid/file1", "docs/readme.md"]:
        assert (out / name).read_bytes() == bucket.cat(name)
        assert int(os.stat(out / name).st_mtime) == int(os.stat(f"{mnt}/{name}").st_mtime)
    assert os.stat(out / "docs/readme.md").st_mtime == 1700000000
    assert os.getxattr(out / "images/forest.jpg", "user.location") == b"Yosemite, CA, USA"
    # the type forest.jpg's name means is not listed, so not copied out (a copy back in infers it again)
    assert "user.storage.contentType" not in os.listxattr(out / "images/forest.jpg")
    again = sh(["rsync", "-aXi", f"{mnt}/", f"{out}/"]).stdout.decode().strip()
    assert again == "", f"second rsync transferred: {again}"

    tarball = tmp_path / "m.tar"
    sh(["tar", "--xattrs", "--xattrs-include=user.*", "-cf", str(tarball), "-C", mnt, "."])
    x = tmp_path / "untar"
    x.mkdir()
    sh(["tar", "--xattrs", "--xattrs-include=user.*", "-xf", str(tarball), "-C", str(x)])
    assert (x / "images/forest.jpg").read_bytes() == FOREST
    assert os.getxattr(x / "images/forest.jpg", "user.activity") == b"Hiking"
    assert os.stat(x / "docs/readme.md").st_mtime == 1700000000


def test_ls_and_getfattr_of_2500_entries_cost_three_lists(bucket, mounts, tmp_path):
    src = tmp_path / "many"
    (src / "big").mkdir(parents=True)
    for i in range(2500):
        (src / "big" / f"f{i:05d}.txt").write_bytes(b"x" * (i % 7))
    run("put", "-r", str(src), bucket.src(), "--metadata", "k=v")
    log = tmp_path / "requests.log"
    mnt = mounts.mount(bucket.src(), "--metadata-ttl", "300", "--list-page-size", "1000", "--request-log", str(log))
    os.stat(f"{mnt}/big")
    log.write_text("")
    ls = sh(["ls", "-l", f"{mnt}/big"]).stdout.decode().splitlines()
    assert len(ls) == 2501  # "total" + entries
    names = sorted(os.listdir(f"{mnt}/big"))
    dump = sh(["getfattr", "-d", *[f"{mnt}/big/{n}" for n in names]]).stdout.decode()
    assert dump.count('user.k="v"') == 2500
    lines = [l.split()[0] for l in log.read_text().splitlines()]
    assert lines == ["list", "list", "list"], lines


def test_mount_helper_form(bucket, mounts, tmp_path, on_path):
    """`mount -t fuse.bucketfs SOURCE DIR -o ro,metadata_ttl=7` goes through mount.fuse3, which
    runs `bucketfs SOURCE DIR -o ...` from a standard PATH (mount(8) resets PATH): the `on_path`
    fixture puts the binary under test at /usr/local/bin/bucketfs for its duration."""
    fill(bucket)
    mnt = tmp_path / "helper-mnt"
    mnt.mkdir()
    mounts.points.append(str(mnt))
    sh(["mount", "-t", "fuse.bucketfs", bucket.src(), str(mnt), "-o", "ro,metadata_ttl=7"])
    assert sorted(os.listdir(mnt)) == ["docs", "empty", "hello.txt", "images"]
    with pytest.raises(OSError) as e:
        open(mnt / "new.txt", "w")
    assert e.value.errno == errno.EROFS
    sh(["fusermount3", "-u", str(mnt)])
