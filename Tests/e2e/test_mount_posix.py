"""POSIX metadata (docs/SEMANTICS.md §3.7, §3.8): modes, owners, directory times and symbolic links kept
in the bucket in gsutil's / gcloud's keys, through a real mount: trees copied in with rsync -aX,
cp -a and tar, and back out, compared by find -printf and diff -r; objects written by the official
client with those keys (and gcsfuse's legacy symlink key) read through the mount; a differential
script against a local directory; request counts. Runs as root (chown to other owners)."""
import errno
import os
import stat
import subprocess

import pytest

from conftest import sh

MODE, UID, GID = "goog-reserved-posix-mode", "goog-reserved-posix-uid", "goog-reserved-posix-gid"
LINK, LEGACY = "goog-reserved-file-is-symlink", "gcsfuse_symlink_target"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to other owners needs root")


def _tree(root):
    """Files with modes 600/640/700/755/644 and owners other than root, symlinks to a file, to a
    directory, dangling and with `..`, a directory of mode 700 owned by someone else; times set."""
    os.makedirs(root / "sub" / "deep")
    os.makedirs(root / "private")
    files = {"a.txt": (0o644, 1000, 1000), "sub/run.sh": (0o755, 1001, 100), "sub/secret": (0o600, 1002, 1002),
             "sub/deep/group": (0o640, 1000, 50), "private/tool": (0o700, 0, 0)}
    for i, (rel, (mode, uid, gid)) in enumerate(files.items()):
        p = root / rel
        p.write_bytes(f"content of {rel}\n".encode() * (i + 1))
        os.setxattr(p, "user.note", f"n{i}".encode())
        os.chown(p, uid, gid)
        os.chmod(p, mode)
    os.symlink("a.txt", root / "to-file")
    os.symlink("sub/deep", root / "to-dir")
    os.symlink("nowhere/at/all", root / "dangling")
    os.symlink("../a.txt", root / "sub" / "up")
    for link in ("to-file", "to-dir", "dangling", "sub/up"):
        os.lchown(root / link, 1003, 1004)
    os.chown(root / "private", 1005, 1006)
    os.chmod(root / "private", 0o700)
    os.chmod(root / "sub", 0o750)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000 + len(n)), follow_symlinks=False)
        os.utime(dirpath, (1_600_000_000, 1_600_000_100))


def _listing(root):
    """find -printf of path, mode, owner, group, whole-second mtime and link target."""
    out = sh(["find", ".", "-mindepth", "1", "-printf", "%p %m %U %G %T@ %l\n"], cwd=root).stdout.decode()
    lines = []
    for line in out.splitlines():
        p, m, u, g, t, *rest = line.split(" ")
        lines.append(" ".join([p, m, u, g, str(int(float(t))), *rest]))
    return sorted(lines)


COPIES = {
    "rsync": lambda src, dst: sh(["rsync", "-aX", f"{src}/", f"{dst}/"]),
    "cp": lambda src, dst: sh(["cp", "-a", f"{src}/.", dst]),
    "tar": lambda src, dst: sh(f"tar -C {src} --xattrs -cf - . | tar -C {dst} --xattrs -xpf -"),
}


@pytest.mark.parametrize("tool", list(COPIES))
def test_tree_round_trips_through_the_mount(any_bucket, mounts, tmp_path, tool):
    src = tmp_path / "src"
    _tree(src)
    mnt = mounts.mount(any_bucket.src(), "--metadata-ttl", "30")
    dst = os.path.join(mnt, tool)
    os.mkdir(dst)
    COPIES[tool](src, dst)
    want = _listing(src)
    assert _listing(dst) == want
    back = tmp_path / "back"
    back.mkdir()
    COPIES[tool](dst, back)
    assert _listing(back) == want
    sh(["diff", "-r", "--no-dereference", str(src), str(back)])
    for rel in ("a.txt", "sub/run.sh", "private/tool"):
        assert os.getxattr(back / rel, "user.note") == os.getxattr(src / rel, "user.note")
        # the POSIX keys never show as xattrs
        assert not any(x.startswith("user.goog-reserved") for x in os.listxattr(os.path.join(dst, rel)))
    # what bucketfs wrote, in gsutil's / gcloud's format
    meta = any_bucket.stat(f"{tool}/sub/secret")["customMetadata"]
    assert (meta[MODE], meta[UID], meta[GID]) == ("600", "1002", "1002"), meta
    link = any_bucket.stat(f"{tool}/sub/up")
    assert link["customMetadata"][LINK] == "true" and int(link["size"]) == len("../a.txt"), link
    assert any_bucket.cat(f"{tool}/sub/up") == b"../a.txt"
    placeholder = any_bucket.stat(f"{tool}/private/")["customMetadata"]
    assert (placeholder[MODE], placeholder[UID]) == ("700", "1005"), placeholder
    if tool == "rsync":
        # a second rsync -aX moves nothing, not even for directories, on every bucket: the
        # default contentType the servers give every upload is not listed (docs/SEMANTICS.md §4.1).
        again = sh(["rsync", "-aXi", f"{src}/", f"{dst}/"]).stdout.decode().strip()
        assert again == "", again


def test_objects_written_by_the_official_client_show_through_the_mount(emulator, mounts, prefix):
    b = emulator.bucket()
    def put(name, data, metadata):
        blob = b.blob(f"{prefix}/{name}")
        blob.metadata = metadata
        blob.upload_from_string(data)
    put("exec.sh", b"#!/bin/sh\n", {MODE: "750", UID: "1234", GID: "4321"})
    put("bad", b"x", {MODE: "rwx", UID: "-1", GID: "many"})
    put("link", b"exec.sh", {LINK: "true", UID: "7", GID: "8"})
    put("legacy", b"", {LEGACY: "../elsewhere"})
    put("d/", b"", {MODE: "700", UID: "55", GID: "66", "goog-reserved-file-mtime": "1500000000"})
    put("d/f", b"in d", {})
    mnt = mounts.mount(emulator.src(prefix), "--uid", "10", "--gid", "20")
    st = os.stat(f"{mnt}/exec.sh")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o750, 1234, 4321)
    st = os.stat(f"{mnt}/bad")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o644, 10, 20)
    st = os.lstat(f"{mnt}/link")
    assert stat.S_ISLNK(st.st_mode) and st.st_size == 7 and (st.st_uid, st.st_gid) == (7, 8)
    assert os.readlink(f"{mnt}/link") == "exec.sh"
    assert open(f"{mnt}/link", "rb").read() == b"#!/bin/sh\n"
    st = os.lstat(f"{mnt}/legacy")
    assert stat.S_ISLNK(st.st_mode) and st.st_size == len("../elsewhere")
    assert os.readlink(f"{mnt}/legacy") == "../elsewhere"
    st = os.stat(f"{mnt}/d")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)) == (0o700, 55, 66, 1500000000)
    assert not any(x.startswith("user.goog") or x.startswith("user.gcsfuse") for x in os.listxattr(f"{mnt}/legacy", follow_symlinks=False))
    # and what the mount writes, the client reads with exactly those keys
    os.chmod(f"{mnt}/exec.sh", 0o4711)
    os.chown(f"{mnt}/exec.sh", 99, 98)
    os.symlink("d/f", f"{mnt}/new-link")
    blob = b.get_blob(f"{prefix}/exec.sh")
    assert {k: blob.metadata[k] for k in (MODE, UID, GID)} == {MODE: "711", UID: "99", GID: "98"}
    blob = b.get_blob(f"{prefix}/new-link")
    assert blob.metadata[LINK] == "true" and blob.download_as_bytes() == b"d/f"


def _script(root):
    """The same steps on a local directory and on the mount: (step, result or errno name)."""
    out = []
    def step(name, f):
        try:
            r = f()
            out.append((name, r if r is not None else "ok"))
        except OSError as e:
            out.append((name, errno.errorcode[e.errno]))
    j = lambda *p: os.path.join(root, *p)
    step("write", lambda: open(j("f"), "w").write("data"))
    step("chmod 4755", lambda: os.chmod(j("f"), 0o4755))
    step("mode", lambda: oct(stat.S_IMODE(os.stat(j("f")).st_mode) & 0o777))
    step("chown", lambda: os.chown(j("f"), 1234, 5678))
    step("owner", lambda: (os.stat(j("f")).st_uid, os.stat(j("f")).st_gid))
    step("mkdir 0700", lambda: os.mkdir(j("d"), 0o700))
    step("dir mode", lambda: oct(stat.S_IMODE(os.stat(j("d")).st_mode)))
    step("symlink", lambda: os.symlink("f", j("l")))
    step("symlink again", lambda: os.symlink("g", j("l")))
    step("readlink", lambda: os.readlink(j("l")))
    step("lstat is link", lambda: stat.S_ISLNK(os.lstat(j("l")).st_mode))
    step("lstat size", lambda: os.lstat(j("l")).st_size)
    step("read through", lambda: open(j("l")).read())
    step("readlink of file", lambda: os.readlink(j("f")))
    step("dangling", lambda: os.symlink("../nowhere", j("d", "dl")))
    step("open dangling", lambda: open(j("d", "dl")).read())
    step("long target", lambda: os.symlink("x" * 4096, j("long")))
    step("rename link", lambda: os.rename(j("l"), j("d", "l2")))
    step("readlink moved", lambda: os.readlink(j("d", "l2")))
    step("unlink link", lambda: os.unlink(j("d", "l2")))
    step("gone", lambda: os.path.lexists(j("d", "l2")))
    step("link", lambda: os.link(j("f"), j("hard")))
    step("mkfifo", lambda: os.mkfifo(j("fifo")))
    step("mknod", lambda: os.mknod(j("node"), 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
    step("listing", lambda: sorted(os.listdir(root)))
    return out


# What a bucket cannot hold (docs/SEMANTICS.md §3.8): refused with EPERM.
REFUSALS = {"link": "EPERM", "mkfifo": "EPERM", "mknod": "EPERM"}


def test_differential_script_against_a_local_directory(bucket, mounts, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    mnt = mounts.mount(bucket.src())
    here, there = _script(str(local)), _script(mnt)
    for (name, want), (name2, got) in zip(here, there):
        assert name == name2
        if name in REFUSALS:
            assert got == REFUSALS[name], (name, got)
        elif name == "listing":
            assert got == sorted(n for n in want if n not in ("hard", "fifo", "node")), (want, got)
        else:
            assert got == want, (name, want, got)


def test_request_counts(bucket, mounts, tmp_path):
    log = tmp_path / "req.log"
    mnt = mounts.mount(bucket.src(), "--request-log", str(log), "--metadata-ttl", "30")
    with open(f"{mnt}/f", "w") as f:
        f.write("x")
    os.listdir(mnt)
    os.stat(f"{mnt}/f")
    log.write_text("")
    os.chmod(f"{mnt}/f", 0o600)
    assert [l.split(" ")[0] for l in log.read_text().splitlines()] == ["patch"], log.read_text()
    log.write_text("")
    os.symlink("f", f"{mnt}/l")
    assert [l.split(" ")[0] for l in log.read_text().splitlines()] == ["write"], log.read_text()
    log.write_text("")
    assert os.readlink(f"{mnt}/l") == "f"
    assert log.read_text() == ""


def test_restic_backup_of_the_mount_restores_the_tree(bucket, mounts, tmp_path):
    """A restic backup taken through the mount restores the tree that was copied in: bytes,
    modes, owners, times and links (restic reads them through lstat and readlink)."""
    src = tmp_path / "src"
    _tree(src)
    mnt = mounts.mount(bucket.src(), "--metadata-ttl", "30")
    dst = os.path.join(mnt, "tree")
    os.mkdir(dst)
    COPIES["rsync"](src, dst)
    # the directory that holds the tree keeps its own time too
    os.utime(dst, (1_600_000_000, 1_600_000_200))
    env = dict(os.environ, RESTIC_REPOSITORY=str(tmp_path / "repo"), RESTIC_PASSWORD="test")
    sh(["restic", "init"], env=env)
    sh(["restic", "backup", "--quiet", "."], cwd=dst, env=env)
    restored = tmp_path / "restored"
    sh(["restic", "restore", "latest", "--target", str(restored)], env=env)
    assert _listing(restored) == _listing(src)
    sh(["diff", "-r", "--no-dereference", str(src), str(restored)])


def test_ls_l_of_1000_files_with_mode_keys_costs_only_the_list_pages(bucket, mounts, tmp_path):
    """The listing carries custom metadata: modes and owners cost no request per file."""
    mnt = mounts.mount(bucket.src())
    os.mkdir(f"{mnt}/many")
    for i in range(1000):
        fd = os.open(f"{mnt}/many/f{i:04d}", os.O_WRONLY | os.O_CREAT, (0o600, 0o640, 0o755)[i % 3])
        os.close(fd)
    os.chown(f"{mnt}/many/f0000", 1234, 5678)
    mounts.unmount(mnt)
    log = tmp_path / "req.log"
    mnt = mounts.mount(bucket.src(), "--request-log", str(log))
    out = sh(["ls", "-ln", f"{mnt}/many"]).stdout.decode().splitlines()
    assert len(out) == 1001, out[:3]  # "total" and 1,000 files
    assert out[1].startswith("-rw------- 1 1234 5678 "), out[1]
    assert out[2].startswith("-rw-r----- ") and out[3].startswith("-rwxr-xr-x "), out[2:4]
    kinds = [l.split(" ")[0] for l in log.read_text().splitlines()]
    # the root's listing and ceil(1000/1000) + 1 pages of many/, and at most the placeholder
    # of many/ (a listing of the root names it without its metadata): nothing per file
    assert kinds.count("list") <= 3 and len(kinds) - kinds.count("list") <= 1, kinds


def test_the_mount_roots_times_go_to_its_prefix_placeholder_or_nowhere(emulator, mounts, prefix):
    """`touch` or `rsync -a` of the mount point (docs/SEMANTICS.md §3.2): a prefix mount keeps the
    root's mtime in the placeholder `PREFIX/`, never in `PREFIX//`; a whole bucket's root has no
    object, so the change is accepted, kept nowhere, and no object named `/` appears."""
    b = emulator.bucket()
    b.blob(f"{prefix}/f").upload_from_string(b"x")
    mnt = mounts.mount(emulator.src(prefix))
    os.utime(mnt, (1_600_000_000, 1_600_000_000))
    assert b.get_blob(f"{prefix}//") is None
    placeholder = b.get_blob(f"{prefix}/")
    assert placeholder is not None and placeholder.metadata.get("goog-reserved-file-mtime") == "1600000000"
    assert int(os.stat(mnt).st_mtime) == 1600000000
    assert sorted(os.listdir(mnt)) == ["f"]
    whole = mounts.mount(emulator.src())
    os.utime(whole, (1_600_000_000, 1_600_000_000))
    os.chmod(whole, 0o700)
    assert b.get_blob("/") is None
    with pytest.raises(OSError) as e:
        os.setxattr(whole, "user.k", b"v")
    assert e.value.errno == errno.ENOTSUP
