"""docs/SEMANTICS.md §3 (writes) and §5 (errors) through a real mount of the embedded bucket: files copied,
appended, overwritten, moved and removed with ordinary tools, checked from the other side with the
library commands (`bucketfs stat|cat`); mtimes, xattrs carried by cp/rsync, request counts, a
lost write race between two mounts, and the refusals."""
import base64
import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import re
import time
import uuid

import pytest

from conftest import Bucket, GSBucket, eventually, run, server, sh


def md5_b64(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def file_md5_b64(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode()


def err(fn):
    with pytest.raises(OSError) as e:
        fn()
    return e.value.errno


def requests(log):
    """The request log as (op, name) pairs."""
    out = []
    for line in log.read_text().splitlines():
        op, _, name = line.partition(" ")
        out.append((op, name))
    return out


# --- copies, appends, overwrites -------------------------------------------------------------


def test_cp_small_files_md5_matches_store(any_bucket, mounts, tmp_path):
    mnt = mounts.mount(any_bucket.src())
    sizes = {"zero.bin": 0, "one.bin": 1, "mib.bin": 1 << 20}
    for name, size in sizes.items():
        src = tmp_path / ("src-" + name)
        src.write_bytes(os.urandom(size))
        sh(["cp", str(src), f"{mnt}/{name}"])
        meta = any_bucket.stat(name)
        assert int(meta["size"]) == size, meta
        assert meta["md5Hash"] == file_md5_b64(src), name
        assert any_bucket.cat(name) == src.read_bytes()
        # and back through the mount
        assert open(f"{mnt}/{name}", "rb").read() == src.read_bytes()
        assert os.stat(f"{mnt}/{name}").st_size == size


def test_cp_300_mib(bucket, mounts, tmp_path):
    src = tmp_path / "big.bin"
    block = os.urandom(1 << 20)
    with open(src, "wb") as f:
        for i in range(300):
            f.write(bytes([i & 0xFF]) + block[1:])  # every MiB differs
    mnt = mounts.mount(bucket.src())
    sh(["cp", str(src), f"{mnt}/big.bin"], timeout=600)
    meta = bucket.stat("big.bin")
    assert int(meta["size"]) == 300 << 20
    assert meta["md5Hash"] == file_md5_b64(src)
    assert os.stat(f"{mnt}/big.bin").st_size == 300 << 20
    src.unlink()


def test_new_file_shows_in_ls_at_once_and_rm_hides_it(any_bucket, mounts):
    any_bucket.put("dir/old.txt", b"old")
    mnt = mounts.mount(any_bucket.src(), "--metadata-ttl", "60")
    assert os.listdir(f"{mnt}/dir") == ["old.txt"]  # listing cached for 60 s
    with open(f"{mnt}/dir/new.txt", "w") as f:
        f.write("new")
        # visible while still open (not uploaded yet)
        assert sorted(os.listdir(f"{mnt}/dir")) == ["new.txt", "old.txt"]
    assert sorted(os.listdir(f"{mnt}/dir")) == ["new.txt", "old.txt"]
    assert "new.txt" in sh(["ls", f"{mnt}/dir"]).stdout.decode().split()
    assert any_bucket.cat("dir/new.txt") == b"new"
    sh(["rm", f"{mnt}/dir/new.txt"])
    assert "new.txt" not in sh(["ls", f"{mnt}/dir"]).stdout.decode().split()
    assert not os.path.exists(f"{mnt}/dir/new.txt")
    assert not any_bucket.exists("dir/new.txt")
    sh(["rm", f"{mnt}/dir/old.txt"])
    assert sh(["ls", "-A", f"{mnt}/dir"]).stdout.decode().split() == []
    assert not any_bucket.exists("dir/old.txt")


def test_append_keeps_old_bytes(any_bucket, mounts):
    any_bucket.put("log.txt", b"first line\n", metadata={"k": "v"})
    mnt = mounts.mount(any_bucket.src())
    sh(f"echo 'second line' >> {mnt}/log.txt")
    assert any_bucket.cat("log.txt") == b"first line\nsecond line\n"
    sh(f"echo third >> {mnt}/log.txt")
    assert any_bucket.cat("log.txt") == b"first line\nsecond line\nthird\n"
    assert open(f"{mnt}/log.txt", "rb").read() == b"first line\nsecond line\nthird\n"
    assert os.stat(f"{mnt}/log.txt").st_size == len(b"first line\nsecond line\nthird\n")
    assert any_bucket.stat("log.txt")["customMetadata"].get("k") == "v"  # metadata kept across rewrites


def test_overwrite_replaces_content(any_bucket, mounts, tmp_path):
    any_bucket.put("o.txt", b"a much longer original content\n")
    gen = int(any_bucket.stat("o.txt")["generation"])
    mnt = mounts.mount(any_bucket.src())
    sh(f"echo short > {mnt}/o.txt")
    assert any_bucket.cat("o.txt") == b"short\n"
    assert int(any_bucket.stat("o.txt")["generation"]) != gen
    assert open(f"{mnt}/o.txt", "rb").read() == b"short\n"
    src = tmp_path / "o2"
    src.write_bytes(os.urandom(5000))
    sh(["cp", str(src), f"{mnt}/o.txt"])
    assert any_bucket.stat("o.txt")["md5Hash"] == md5_b64(src.read_bytes())
    # truncate(1) on a path: no close follows, it still reaches the store
    sh(["truncate", "-s", "10", f"{mnt}/o.txt"])
    assert any_bucket.cat("o.txt") == src.read_bytes()[:10]


def test_readers_see_writes_of_a_write_only_handle(any_bucket, mounts):
    """Write-only handles bypass the kernel's page cache (docs/SEMANTICS.md §8): a reader opened before
    the writer, and one opened while it writes, both read every write at once; a shared mmap
    beside a direct writer reads them too (Linux 6.6 and later; refused with ENODEV before), a
    private one works."""
    import mmap
    import platform
    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    any_bucket.put("coh.bin", b"a" * 10000)
    mnt = mounts.mount(any_bucket.src())
    p = f"{mnt}/coh.bin"
    r = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(r, 5, 0) == b"aaaaa"  # cached by the kernel now
        w = os.open(p, os.O_WRONLY)
        try:
            os.pwrite(w, b"bbbbb", 0)
            assert os.pread(r, 5, 0) == b"bbbbb"
        finally:
            os.close(w)
    finally:
        os.close(r)
    # (Another file: the kernel sends a close's RELEASE after close(2) returns, so the handles
    # above may still be open in the mount, and a writer opened beside a reader keeps the page
    # cache.)
    any_bucket.put("coh2.bin", b"a" * 10000)
    p = f"{mnt}/coh2.bin"
    w = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(w, b"ccccc", 0)
        r = os.open(p, os.O_RDONLY)
        try:
            assert os.pread(r, 5, 0) == b"ccccc"
            os.pwrite(w, b"ddddd", 0)
            os.pwrite(w, b"eeeee", 10000)  # grows the file
            assert os.pread(r, 5, 0) == b"ddddd"
            assert os.pread(r, 10, 9995) == b"aaaaaeeeee"
            if release >= (6, 6):
                with mmap.mmap(r, 0, prot=mmap.PROT_READ) as m:
                    assert m[:5] == b"ddddd"
                    os.pwrite(w, b"fffff", 0)
                    assert m[:5] == b"fffff", "a shared map kept a page the direct write made stale"
                os.pwrite(w, b"ddddd", 0)
            else:
                assert err(lambda: mmap.mmap(r, 0, prot=mmap.PROT_READ)) == errno.ENODEV
            with mmap.mmap(r, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:
                assert m[:5] == b"ddddd"
        finally:
            os.close(r)
    finally:
        os.close(w)
    assert any_bucket.cat("coh2.bin") == b"ddddd" + b"a" * 9995 + b"eeeee"

    def shared_map_works():  # no writer: shared works again, once the writer's RELEASE is in
        with open(p, "rb") as f:
            try:
                with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                    return m[:5] == b"ddddd"
            except OSError as e:
                assert e.errno == errno.ENODEV
                return False
    assert eventually(shared_map_works)
    # The I/O size tools pick their buffers by (cp: 1 MiB writes, one request each).
    assert os.stat(p).st_blksize == 1 << 20


def test_fsync_is_durable_before_close(any_bucket, mounts):
    mnt = mounts.mount(any_bucket.src())
    fd = os.open(f"{mnt}/durable.bin", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"abc")
        os.fsync(fd)
        assert any_bucket.cat("durable.bin") == b"abc"
        os.write(fd, b"def")
        os.fsync(fd)
        assert any_bucket.cat("durable.bin") == b"abcdef"
    finally:
        os.close(fd)
    assert any_bucket.cat("durable.bin") == b"abcdef"


# --- namespace -------------------------------------------------------------------------------


def test_mv_file_keeps_xattrs(any_bucket, mounts):
    any_bucket.put("src/a.txt", b"payload", content_type="text/plain")
    mnt = mounts.mount(any_bucket.src())
    os.makedirs(f"{mnt}/dst")
    sh(["setfattr", "-n", "user.color", "-v", "blue", f"{mnt}/src/a.txt"])
    sh(["mv", f"{mnt}/src/a.txt", f"{mnt}/dst/b.txt"])
    assert not os.path.exists(f"{mnt}/src/a.txt")
    assert os.listdir(f"{mnt}/src") == [] if os.path.isdir(f"{mnt}/src") else True
    assert open(f"{mnt}/dst/b.txt", "rb").read() == b"payload"
    out = sh(["getfattr", "-d", f"{mnt}/dst/b.txt"]).stdout.decode()
    assert 'user.color="blue"' in out
    assert os.getxattr(f"{mnt}/dst/b.txt", "user.storage.contentType") == b"text/plain"
    assert not any_bucket.exists("src/a.txt")
    meta = any_bucket.stat("dst/b.txt")
    assert meta["customMetadata"].get("color") == "blue" and meta["contentType"] == "text/plain"
    assert any_bucket.cat("dst/b.txt") == b"payload"
    # rename over an existing file replaces it
    with open(f"{mnt}/dst/c.txt", "w") as f:
        f.write("old c")
    sh(["mv", f"{mnt}/dst/b.txt", f"{mnt}/dst/c.txt"])
    assert any_bucket.cat("dst/c.txt") == b"payload" and not any_bucket.exists("dst/b.txt")
    assert sorted(os.listdir(f"{mnt}/dst")) == ["c.txt"]
    # ... also when the destination appeared behind the mount's back (within the TTL)
    any_bucket.put("dst/d.txt", b"made elsewhere")
    sh(["mv", f"{mnt}/dst/c.txt", f"{mnt}/dst/d.txt"])
    assert any_bucket.cat("dst/d.txt") == b"payload" and not any_bucket.exists("dst/c.txt")
    assert any_bucket.stat("dst/d.txt")["customMetadata"].get("color") == "blue"


def test_mv_directory_with_nested_files(any_bucket, mounts):
    files = {"top/x.txt": b"x", "top/sub/y.txt": b"yy", "top/sub/deeper/z.txt": b"zzz"}
    for k, v in files.items():
        any_bucket.put(k, v, metadata={"from": k})
    any_bucket.put("top/empty/", b"", exact=True)
    mnt = mounts.mount(any_bucket.src())
    sh(["mv", f"{mnt}/top", f"{mnt}/moved"])
    assert os.listdir(mnt) == ["moved"]
    assert sorted(os.listdir(f"{mnt}/moved")) == ["empty", "sub", "x.txt"]
    for k, v in files.items():
        new = "moved" + k[len("top"):]
        assert open(f"{mnt}/{new}", "rb").read() == v
        assert any_bucket.cat(new) == v
        assert any_bucket.stat(new)["customMetadata"] == {"from": k}
        assert not any_bucket.exists(k)
    assert any_bucket.exists("moved/empty/") and not any_bucket.exists("top/empty/")
    # a file written after the move lands under the new name
    with open(f"{mnt}/moved/sub/w.txt", "w") as f:
        f.write("w")
    assert any_bucket.cat("moved/sub/w.txt") == b"w"


def test_rm_r(any_bucket, mounts):
    for k in ["t/a", "t/b/c", "t/b/d/e", "keep"]:
        any_bucket.put(k, k.encode())
    any_bucket.put("t/b/empty/", b"", exact=True)
    mnt = mounts.mount(any_bucket.src())
    sh(["rm", "-r", f"{mnt}/t"])
    assert os.listdir(mnt) == ["keep"]
    assert run("ls", any_bucket.src(), *any_bucket.extra).stdout.decode().split() == ["keep"]
    for k in ["t/a", "t/b/c", "t/b/d/e"]:
        assert not any_bucket.exists(k)
    assert not any_bucket.exists("t/b/empty/")
    assert any_bucket.cat("keep") == b"keep"


def test_mkdir_p_creates_placeholders(any_bucket, mounts):
    mnt = mounts.mount(any_bucket.src())
    sh(["mkdir", "-p", f"{mnt}/a/b/c"])
    for p in ["a/", "a/b/", "a/b/c/"]:
        assert any_bucket.exists(p), p
        assert int(any_bucket.stat(p)["size"]) == 0
    assert os.path.isdir(f"{mnt}/a/b/c") and os.listdir(f"{mnt}/a/b/c") == []
    assert err(lambda: os.mkdir(f"{mnt}/a/b")) == errno.EEXIST
    os.rmdir(f"{mnt}/a/b/c")
    assert not any_bucket.exists("a/b/c/") and any_bucket.exists("a/b/")


def test_mkdir_p_and_lookups_in_a_directory_never_listed_cost_one_request_each(any_bucket, mounts, tmp_path):
    """docs/SEMANTICS.md §6: in a directory never listed, `mkdir -p new/b/c` costs the kernel's
    lookup of `new` (one list request of the names from `new` to `new0`) and a placeholder a
    level; a lookup there is that one list request whatever it finds (a file with its metadata,
    a directory with or without a placeholder, a name beside look-alikes such as `f.txt`, or
    nothing), and what it found is right; mkdir over a file or a prefix-only directory is EEXIST
    and writes nothing."""
    any_bucket.put("d/old.txt", b"old")
    any_bucket.put("d/f", b"hello")
    any_bucket.put("d/f.txt", b"look-alike")
    any_bucket.put("d/f-1", b"look-alike")
    any_bucket.put("d/s/", b"")
    any_bucket.put("d/s/in", b"in")
    any_bucket.put("d/p/in", b"in")  # a directory with no placeholder
    any_bucket.put("d/p.txt", b"look-alike")
    log = tmp_path / "req.log"
    mnt = mounts.mount(any_bucket.src(), "--request-log", str(log), "--metadata-ttl", "30")
    log.write_text("")
    sh(["mkdir", "-p", f"{mnt}/new/b/c"])
    assert requests(log) == [("list", "new"), ("write", "new/"), ("write", "new/b/"), ("write", "new/b/c/")], requests(log)
    sh(["mkdir", f"{mnt}/new/b/c/e"])
    assert any_bucket.exists("new/b/c/e/")
    os.stat(f"{mnt}/d")  # (the root, where `new` was missing, is listed: docs/SEMANTICS.md §6)
    log.write_text("")
    st = os.stat(f"{mnt}/d/f")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 5
    assert stat.S_ISDIR(os.stat(f"{mnt}/d/s").st_mode) and stat.S_ISDIR(os.stat(f"{mnt}/d/p").st_mode)
    assert err(lambda: os.stat(f"{mnt}/d/none")) == errno.ENOENT
    assert requests(log) == [("list", "d/f"), ("list", "d/s"), ("list", "d/p"), ("list", "d/none")], requests(log)
    assert open(f"{mnt}/d/f", "rb").read() == b"hello"
    assert err(lambda: os.mkdir(f"{mnt}/d/f")) == errno.EEXIST
    assert err(lambda: os.mkdir(f"{mnt}/d/p")) == errno.EEXIST
    assert not any_bucket.exists("d/f/") and not any_bucket.exists("d/p/")
    assert sorted(os.listdir(f"{mnt}/d/p")) == ["in"]


def test_touch_d_sets_mtime_across_remount(any_bucket, mounts):
    any_bucket.put("t.txt", b"t")
    want = int(sh(["date", "-d", "2020-01-02 03:04:05", "+%s"]).stdout)
    mnt = mounts.mount(any_bucket.src())
    sh(["touch", "-d", "2020-01-02 03:04:05", f"{mnt}/t.txt"])
    sh(["touch", "-d", "2020-01-02 03:04:05", f"{mnt}/new.txt"])  # creates, then sets
    assert os.stat(f"{mnt}/t.txt").st_mtime == want
    for name in ["t.txt", "new.txt"]:
        assert any_bucket.stat(name)["customMetadata"].get("goog-reserved-file-mtime") == str(want), name
    assert any_bucket.cat("t.txt") == b"t"
    mounts.unmount(mnt)
    assert not os.path.ismount(mnt)
    mnt2 = mounts.mount(any_bucket.src())
    for name in ["t.txt", "new.txt"]:
        assert os.stat(f"{mnt2}/{name}").st_mtime == want
        assert sh(["stat", "-c", "%Y", f"{mnt2}/{name}"]).stdout.decode().strip() == str(want)
    # the key is hidden from xattrs (stat already shows it)
    assert "goog-reserved" not in sh(["getfattr", "-d", "-m", "-", f"{mnt2}/t.txt"]).stdout.decode()


# --- tools that carry xattrs -----------------------------------------------------------------


def _local_tree(root):
    files = {"a.txt": b"alpha\n", "sub/b.dat": os.urandom(3000), "sub/deep/c.json": b"{}"}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.setxattr(p, "user.k", ("v-" + rel).encode())
        os.setxattr(p, "user.storage.contentType", b"application/x-test-" + rel.split("/")[-1].encode())
        os.utime(p, (1600000000, 1600000000))
    return files


def _check_tree(bucket, files, prefix):
    for rel, data in files.items():
        meta = bucket.stat(prefix + rel)
        assert meta["md5Hash"] == md5_b64(data), rel
        assert meta["customMetadata"].get("k") == "v-" + rel, meta
        assert meta["contentType"] == "application/x-test-" + rel.split("/")[-1], meta
        assert meta["customMetadata"].get("goog-reserved-file-mtime") == "1600000000", meta


def test_cp_preserve_xattr_one_upload_per_file(any_bucket, mounts, tmp_path):
    src = tmp_path / "tree"
    files = _local_tree(src)
    log = tmp_path / "req.log"
    mnt = mounts.mount(any_bucket.src(), "--request-log", str(log))
    os.listdir(mnt)
    log.write_text("")
    sh(["cp", "-r", "--preserve=xattr,timestamps", str(src), f"{mnt}/cp"])
    _check_tree(any_bucket, files, "cp/")
    reqs = requests(log)
    for rel in files:
        name = "cp/" + rel
        assert reqs.count(("write", name)) == 1, (name, reqs)
        assert ("patch", name) not in reqs, (name, reqs)
    # xattrs read back through the mount
    for rel in files:
        assert os.getxattr(f"{mnt}/cp/{rel}", "user.k") == ("v-" + rel).encode()
        assert int(os.stat(f"{mnt}/cp/{rel}").st_mtime) == 1600000000


def test_rsync_aX_into_mount(any_bucket, mounts, tmp_path):
    src = tmp_path / "tree"
    files = _local_tree(src)
    log = tmp_path / "req.log"
    mnt = mounts.mount(any_bucket.src(), "--request-log", str(log), "--metadata-ttl", "30")
    os.listdir(mnt)
    log.write_text("")
    # -O (--omit-dir-times): directories in the mount always show the mount's start time (docs/SEMANTICS.md §8),
    # so rsync would otherwise set directory times again on every run.
    sh(["rsync", "-aXO", f"{src}/", f"{mnt}/rs/"])
    _check_tree(any_bucket, files, "rs/")
    reqs = requests(log)
    # rsync writes a temporary ".name.XXXXXX", closes it, sets xattrs and times, then renames:
    # exactly one upload per file (the temporary one), never one per attribute.
    writes = [n for op, n in reqs if op == "write" and not n.endswith("/")]
    assert len(writes) == len(files), reqs
    for rel in files:
        d, _, base = ("rs/" + rel).rpartition("/")
        assert any(w.startswith(f"{d}/.{base}.") for w in writes), (rel, writes)
    # a second rsync finds nothing to do
    again = sh(["rsync", "-aXOi", f"{src}/", f"{mnt}/rs/"]).stdout.decode().strip()
    assert again == "", again
    assert sorted(os.listdir(f"{mnt}/rs")) == ["a.txt", "sub"]


def test_rsync_aX_with_write_back_uploads_each_file_once_under_its_final_name(any_bucket, mounts, tmp_path):
    """--write-back (docs/SEMANTICS.md §3.4): rsync closes its temporary ".name.XXXXXX", sets its
    xattrs and times, then renames it while its upload still waits in the queue: the rename moves
    the upload, so each file is uploaded once, under its final name, with its metadata and the
    final name's type, and nothing is copied, deleted or patched. A second run moves nothing."""
    n = 60
    src = tmp_path / "tree"
    src.mkdir()
    for i in range(n):
        p = src / f"f{i:03}.txt"
        p.write_bytes(os.urandom(2000))
        os.setxattr(p, "user.k", f"v{i}".encode())
        os.utime(p, (1600000000, 1600000000))
    log = tmp_path / "req.log"
    mnt = mounts.mount(any_bucket.src(), "--request-log", str(log), "--metadata-ttl", "30", "--write-back")
    os.mkdir(f"{mnt}/rs")
    os.listdir(f"{mnt}/rs")
    log.write_text("")
    sh(["rsync", "-aXO", f"{src}/", f"{mnt}/rs/"])
    deadline = time.time() + 60
    while time.time() < deadline and sum(op == "write" for op, _ in requests(log)) < n:
        time.sleep(0.1)
    reqs = requests(log)
    writes = sorted(name for op, name in reqs if op == "write")
    assert writes == [f"rs/f{i:03}.txt" for i in range(n)], reqs
    assert [r for r in reqs if r[0] in ("copy", "delete", "patch")] == [], reqs
    assert len(reqs) <= 1.1 * n, (len(reqs), reqs)
    for i in range(n):
        name = f"rs/f{i:03}.txt"
        for _ in range(100):
            if any_bucket.exists(name):
                break
            time.sleep(0.1)
        meta = any_bucket.stat(name)
        assert meta["md5Hash"] == md5_b64((src / f"f{i:03}.txt").read_bytes()), name
        assert meta["customMetadata"].get("k") == f"v{i}", meta
        assert meta["customMetadata"].get("goog-reserved-file-mtime") == "1600000000", meta
        assert meta["contentType"] == "text/plain", meta
    log.write_text("")
    again = sh(["rsync", "-aXOi", f"{src}/", f"{mnt}/rs/"]).stdout.decode().strip()
    assert again == "", again
    assert [r for r in requests(log) if r[0] in ("write", "copy", "delete", "patch")] == [], requests(log)


def test_rsync_aX_with_write_back_and_default_options_costs_about_one_request_per_file(any_bucket, mounts, tmp_path):
    """With the default options (--metadata-ttl 5), into a directory that exists in the bucket and
    was never listed: rsync looks each final name up, then a temporary name, creates it, and
    looks the final name up again at the rename. The first name found missing costs one list
    request; the directory is then listed once (docs/SEMANTICS.md §6) and answers the rest,
    so the run costs at most 1.1 requests per file: the uploads, under the final names. A second
    run transfers nothing (rsync's itemized output is empty)."""
    n = 300
    src = tmp_path / "tree"
    src.mkdir()
    for i in range(n):
        p = src / f"f{i:03}.txt"
        p.write_bytes(os.urandom(1000))
        os.setxattr(p, "user.k", f"v{i}".encode())
    any_bucket.put("rs/keep.txt", b"kept")
    log = tmp_path / "req.log"
    mnt = mounts.mount(any_bucket.src(), "--request-log", str(log), "--write-back")
    sh(["rsync", "-aX", f"{src}/", f"{mnt}/rs/"])
    deadline = time.time() + 120
    while time.time() < deadline and sum(op == "write" and not name.endswith("/") for op, name in requests(log)) < n:
        time.sleep(0.1)
    reqs = requests(log)
    # (the directory's times, which rsync -a sets, go to its placeholder: not a file)
    writes = sorted(name for op, name in reqs if op == "write" and not name.endswith("/"))
    assert writes == [f"rs/f{i:03}.txt" for i in range(n)], reqs
    assert [r for r in reqs if r[0] in ("copy", "delete", "patch")] == [], reqs
    assert len(reqs) <= 1.1 * n, (len(reqs), [r for r in reqs if r[0] != "write"])
    for i in (0, n // 2, n - 1):
        name = f"rs/f{i:03}.txt"
        # (the request log names an upload when it begins: the last ones may still be under way)
        while time.time() < deadline and not any_bucket.exists(name):
            time.sleep(0.2)
        meta = any_bucket.stat(name)
        assert meta["md5Hash"] == md5_b64((src / f"f{i:03}.txt").read_bytes()), name
        assert meta["customMetadata"].get("k") == f"v{i}", meta
    log.write_text("")
    again = sh(["rsync", "-aXi", f"{src}/", f"{mnt}/rs/"]).stdout.decode().split("\n")
    # nothing sent or created; at most the directory's own time (docs/SEMANTICS.md §8)
    assert [line for line in again if line and not line.startswith(".d")] == [], again
    assert [r for r in requests(log) if r[0] in ("copy", "delete") or (r[0] == "write" and not r[1].endswith("/"))] == [], requests(log)


# --- lost races between two mounts -----------------------------------------------------------


def _lost_found(mounts, mnt):
    """Data files in a mount's lost+found (each has a JSON sidecar naming its object)."""
    d = mounts.tmp / f"{os.path.basename(mnt)}.cache" / "lost+found"
    if not os.path.isdir(d):
        return {}
    out = {}
    for p in os.listdir(d):
        if p.endswith(".json"):
            continue
        side = json.loads(open(os.path.join(d, p + ".json")).read())
        assert p.startswith(side["object"].replace("%", "%25").replace("/", "%2F") + "."), (p, side)
        out[p] = open(os.path.join(d, p), "rb").read()
    return out


@pytest.mark.parametrize("how", ["close", "fsync-after-fork"])
def test_second_mount_wins_race_first_data_in_lost_found(bucket, mounts, how):
    bucket.put("shared.txt", b"original\n")
    m1 = mounts.mount(bucket.src(), "--metadata-ttl", "0")
    m2 = mounts.mount(bucket.src(), "--metadata-ttl", "0")
    fd = os.open(f"{m1}/shared.txt", os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"first writer\n")
        with open(f"{m2}/shared.txt", "wb") as f:
            f.write(b"second writer\n")
        if how == "fsync-after-fork":
            # A child started now inherits fd and closes it at exec: the kernel sends a flush
            # whose answer reaches nobody. The failure must still reach this writer.
            assert bucket.cat("shared.txt") == b"second writer\n"
            assert err(lambda: os.fsync(fd)) in (errno.ESTALE, errno.EIO)
    finally:
        e = err(lambda: os.close(fd))
    assert e in (errno.ESTALE, errno.EIO)
    assert bucket.cat("shared.txt") == b"second writer\n"
    lost = _lost_found(mounts, m1)
    assert list(lost.values()) == [b"first writer\n"], lost
    assert "shared.txt" in list(lost)[0]
    assert open(f"{m1}/shared.txt", "rb").read() == b"second writer\n"
    # the next open for writing starts from the winner's generation and succeeds
    with open(f"{m1}/shared.txt", "ab") as f:
        f.write(b"third\n")
    assert bucket.cat("shared.txt") == b"second writer\nthird\n"


def test_two_mounts_create_same_new_file(bucket, mounts):
    m1 = mounts.mount(bucket.src(), "--metadata-ttl", "0")
    m2 = mounts.mount(bucket.src(), "--metadata-ttl", "0")
    fd = os.open(f"{m1}/n.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"one")
    with open(f"{m2}/n.txt", "xb") as f:
        f.write(b"two")
    assert err(lambda: os.close(fd)) in (errno.ESTALE, errno.EIO)
    assert bucket.cat("n.txt") == b"two"
    assert list(_lost_found(mounts, m1).values()) == [b"one"]


@pytest.fixture(params=["embedded", "testbench"])
def race_bucket(request, tmp_path, mounts):
    """A bucket whose server holds uploads to their preconditions, so that two mounts can race on
    a name: the embedded one, and a prefix of storage-testbench's (gcp-storage-emulator ignores
    preconditions, fake-gcs-server those of resumable and media uploads: GAPS in conftest.py)."""
    if request.param == "embedded":
        b = Bucket(tmp_path / "bucket")
        run("mb", b.src())
        return b
    srv = server("testbench")
    mounts.gs_options = list(srv.options)
    b = GSBucket(srv, f"race-{uuid.uuid4().hex[:10]}")
    b.server = srv
    return b


def test_a_lost_race_is_kept_complete_and_recover_puts_it_beside_the_winner(race_bucket, mounts):
    """Two mounts of one bucket each open shared.txt, write and close; the first close wins. The
    loser gets ESTALE and its whole data is in lost+found as complete, for the lost race; after
    its unmount, `bucketfs recover` puts it beside the winner's, as shared.txt.recovered-TIME,
    leaves the winner's as it is, and has nothing left to do."""
    b = race_bucket
    b.put("shared.txt", b"original\n")
    m1 = mounts.mount(b.src(), "--metadata-ttl", "0")
    m2 = mounts.mount(b.src(), "--metadata-ttl", "0")
    winner, loser = b"the winner's content\n" * 3, b"the loser's content, every byte of it\n" * 2
    fd1 = os.open(f"{m1}/shared.txt", os.O_WRONLY | os.O_TRUNC)
    fd2 = os.open(f"{m2}/shared.txt", os.O_WRONLY | os.O_TRUNC)
    os.write(fd1, winner)
    os.write(fd2, loser)
    os.close(fd1)
    assert err(lambda: os.close(fd2)) == errno.ESTALE
    assert b.cat("shared.txt") == winner
    [(entry, data)] = _lost_found(mounts, m2).items()
    assert data == loser
    cache = mounts.cache_dir(m2)
    side = json.load(open(os.path.join(cache, "lost+found", entry + ".json")))
    assert side["complete"] is True and not entry.endswith(".cut-off"), side
    assert side["reason"].startswith("lost a race"), side
    mounts.unmount(m2)

    # (the endpoint given again: the tier's STORAGE_EMULATOR_HOST names another server, and the
    # environment wins over what the mount recorded)
    rec = run("recover", cache, *b.extra)
    out = rec.stdout.decode()
    m = re.search(r"uploaded beside: 'shared\.txt' is now generation \d+, .*it is in '(shared\.txt\.recovered-\d{8}T\d{6}Z)'", out)
    assert m, out
    assert "1 beside a name that had moved on" in out and "0 left" in out, out
    assert b.cat(m.group(1)) == loser
    assert b.cat("shared.txt") == winner
    assert not _lost_found(mounts, m2)
    # Beside the winner's in a listing, through the first mount.
    assert sorted(n for n in os.listdir(m1) if n.startswith("shared.txt")) == ["shared.txt", m.group(1)]
    again = run("recover", cache, *b.extra).stdout.decode()
    assert "recovered 0 file(s)" in again, again


# --- refusals --------------------------------------------------------------------------------


def test_name_too_long_and_newline(any_bucket, mounts):
    mnt = mounts.mount(any_bucket.src())
    long = "x" * 256
    assert err(lambda: open(f"{mnt}/{long}", "w")) == errno.ENAMETOOLONG
    assert err(lambda: os.mkdir(f"{mnt}/{long}")) == errno.ENAMETOOLONG
    assert err(lambda: open(f"{mnt}/bad\nname", "w")) == errno.EINVAL
    assert err(lambda: os.mkdir(f"{mnt}/bad\nname")) == errno.EINVAL
    open(f"{mnt}/{'y' * 255}", "w").close()  # 255 is fine
    assert any_bucket.exists("y" * 255)
    with open(f"{mnt}/ok", "w") as f:
        f.write("ok")
    assert err(lambda: os.rename(f"{mnt}/ok", f"{mnt}/{long}")) == errno.ENAMETOOLONG
    assert err(lambda: os.rename(f"{mnt}/ok", f"{mnt}/bad\nname")) == errno.EINVAL
    assert sorted(os.listdir(mnt)) == sorted(["ok", "y" * 255])
    assert run("ls", any_bucket.src(), *any_bucket.extra).stdout.decode().split() == sorted(["ok", "y" * 255])


def test_read_only_refuses_every_change(bucket, mounts):
    bucket.put("f.txt", b"f")
    bucket.put("d/inner", b"i")
    bucket.put("e/", b"", exact=True)
    mnt = mounts.mount(bucket.src(), "--read-only")
    assert err(lambda: open(f"{mnt}/f.txt", "w")) == errno.EROFS
    assert err(lambda: open(f"{mnt}/f.txt", "a")) == errno.EROFS
    assert err(lambda: open(f"{mnt}/new", "w")) == errno.EROFS
    assert err(lambda: os.mkdir(f"{mnt}/nd")) == errno.EROFS
    assert err(lambda: os.unlink(f"{mnt}/f.txt")) == errno.EROFS
    assert err(lambda: os.rmdir(f"{mnt}/e")) == errno.EROFS
    assert err(lambda: os.rename(f"{mnt}/f.txt", f"{mnt}/g.txt")) == errno.EROFS
    assert err(lambda: os.truncate(f"{mnt}/f.txt", 0)) == errno.EROFS
    assert err(lambda: os.utime(f"{mnt}/f.txt", (1, 1))) == errno.EROFS
    p = sh(["rm", "-rf", f"{mnt}/d"], check=False)
    assert p.returncode != 0 and b"Read-only file system" in p.stderr
    assert bucket.cat("f.txt") == b"f" and bucket.cat("d/inner") == b"i" and bucket.exists("e/")
    assert open(f"{mnt}/f.txt", "rb").read() == b"f"


def test_rmdir_non_empty(any_bucket, mounts):
    any_bucket.put("full/x", b"x")
    any_bucket.put("full/", b"", exact=True)
    any_bucket.put("nested/sub/", b"", exact=True)
    mnt = mounts.mount(any_bucket.src())
    assert err(lambda: os.rmdir(f"{mnt}/full")) == errno.ENOTEMPTY
    assert err(lambda: os.rmdir(f"{mnt}/nested")) == errno.ENOTEMPTY
    # a file created here and not yet closed makes its directory non-empty too
    os.mkdir(f"{mnt}/fresh")
    with open(f"{mnt}/fresh/pending", "w") as f:
        f.write("p")
        assert err(lambda: os.rmdir(f"{mnt}/fresh")) == errno.ENOTEMPTY
    assert any_bucket.exists("full/") and any_bucket.cat("full/x") == b"x"
    p = sh(["rmdir", f"{mnt}/full"], check=False)
    assert p.returncode != 0 and b"not empty" in p.stderr
