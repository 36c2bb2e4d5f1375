"""Real-mount tests of the bucket's past (docs/RESTORE.md): a tree written through a live mount,
then overwritten, deleted from and added to, comes back exactly through `mount --at T`;
`restore -r --at T` makes the live bucket equal to it again; a restore that meets a concurrent
change refuses that name and loses nothing; `ls -l` + `getfattr -d` of an `--at` mount cost
list requests only; every write is EROFS. On the embedded bucket (`mb --versioning`), on a
versioned bucket of fake-gcs-server, and on one of the project's own Cloud Storage test server
(`gcs-test-server --versioning`, Tests/e2e/own_gcs.py), which honours `ifGenerationMatch` on a
copy as the JSON API documents: there the concurrent change is refused, as on a real bucket."""
import datetime
import errno
import os
import subprocess
import time
import uuid

import pytest

from conftest import BIN, Bucket, run, server, sh
from own_gcs import OwnServer


def rfc3339(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class VersionedGS(Bucket):
    """A bucket of its own on fake-gcs-server, made with object versioning on."""

    def __init__(self, srv):
        name = f"v-{uuid.uuid4().hex[:12]}"
        client = srv.client()
        b = client.bucket(name)
        b.versioning_enabled = True
        client.create_bucket(b)
        super().__init__(f"gs://{name}")
        self.extra = list(srv.options)
        self.server = srv


class OwnVersionedGS(Bucket):
    """A gcs-test-server of its own (one bucket per process), with object versioning on."""

    def __init__(self, srv):
        super().__init__(srv.src())
        self.extra = list(srv.options)
        self.server = srv


@pytest.fixture(params=["embedded", "fake-gcs", "own"])
def versioned(request, tmp_path, mounts):
    if request.param == "embedded":
        b = Bucket(tmp_path / "bucket")
        run("mb", b.src(), "--versioning")
        yield b
        return
    if request.param == "fake-gcs":
        srv = server("fake-gcs")
        mounts.gs_options = list(srv.options)
        yield VersionedGS(srv)
        return
    srv = OwnServer(f"v-{uuid.uuid4().hex[:12]}", versioning=True)
    mounts.gs_options = list(srv.options)
    try:
        yield OwnVersionedGS(srv)
    finally:
        mounts.cleanup()  # before the server goes: a mount a failed test left must not outlive it
        srv.stop()


def write_tree(root):
    """Files, directories, a symlink, modes, mtimes and user.* xattrs."""
    os.makedirs(f"{root}/docs/sub")
    os.makedirs(f"{root}/old")
    for rel, data in {"docs/a.txt": b"first version\n", "docs/sub/b.bin": bytes(range(256)) * 40,
                      "old/gone.txt": b"deleted later\n", "keep.txt": b"unchanged\n", "empty": b""}.items():
        with open(f"{root}/{rel}", "wb") as f:
            f.write(data)
    os.chmod(f"{root}/docs/a.txt", 0o600)
    os.chmod(f"{root}/docs/sub", 0o750)
    os.setxattr(f"{root}/docs/a.txt", "user.colour", b"blue")
    os.setxattr(f"{root}/keep.txt", "user.note", b"kept")
    os.symlink("docs/a.txt", f"{root}/link")
    os.utime(f"{root}/docs/a.txt", (1_600_000_000, 1_600_000_000))
    os.utime(f"{root}/keep.txt", (1_500_000_000.5, 1_500_000_000.5))


def change_tree(root):
    """Overwritten, deleted from, added to."""
    with open(f"{root}/docs/a.txt", "wb") as f:
        f.write(b"ransomware was here\n")
    os.setxattr(f"{root}/docs/a.txt", "user.colour", b"red")
    os.remove(f"{root}/old/gone.txt")
    os.rmdir(f"{root}/old")
    os.remove(f"{root}/docs/sub/b.bin")
    # (not a chmod, setfattr or touch of a file kept as it was: Cloud Storage patches a
    # generation's metadata in place and keeps no older metadata; docs/RESTORE.md says so)
    with open(f"{root}/new.txt", "wb") as f:
        f.write(b"created after the moment\n")


def picture(root):
    """`find -printf '%p %s %m %T@ %l'` (directories' sizes and mtimes left out: a mount shows a
    directory whose placeholder it has not read with its own start time), plus every user.*
    xattr."""
    out = sh(["find", ".", "-printf", "%p %y %m %l\n"], cwd=root).stdout.decode().splitlines()
    files = sh(["find", ".", "!", "-type", "d", "-printf", "%p %s %T@\n"], cwd=root).stdout.decode().splitlines()
    xattrs = sh(["getfattr", "-R", "-d", "-h", "-m", "^user\\.", "--absolute-names", "."], cwd=root).stdout.decode()
    # getfattr -d lists storage properties too (user.storage.*): they differ between generations
    # by design (generation, times); only the user's own keys are compared.
    blocks = ["\n".join(l for l in block.splitlines() if not l.startswith("user.storage."))
              for block in xattrs.split("\n\n") if block.strip()]
    return sorted(out), sorted(files), sorted(blocks)


def settle():
    time.sleep(1.2)


def tree_written_then_moment(b, mounts):
    """Writes the tree through a live mount, unmounts it (every upload done), and returns a
    moment after it and clearly before anything that follows (RFC 3339)."""
    live = mounts.mount(b.src())
    write_tree(live)
    mounts.unmount(live)
    settle()
    moment = rfc3339(time.time())
    settle()
    return moment


def test_the_tree_comes_back_through_mount_at_and_restore(versioned, mounts, tmp_path):
    b = versioned
    moment = tree_written_then_moment(b, mounts)
    # what the bucket held at the moment, as a live mount showed it
    live = mounts.mount(b.src())
    then = picture(live)
    copy = tmp_path / "copy"
    sh(["cp", "-a", live, str(copy)])
    change_tree(live)
    mounts.unmount(live)

    past = mounts.mount(b.src(), "--at", moment)
    assert picture(past) == then
    sh(["diff", "-r", "--no-dereference", str(copy), past])
    assert "ransomware" not in open(f"{past}/docs/a.txt").read()
    assert not os.path.exists(f"{past}/new.txt")
    with open(mounts.log_path(past)) as f:
        assert f"as it was at {moment}" in f.read()
    # today's differs
    today = mounts.mount(b.src())
    assert sh(["diff", "-r", "--no-dereference", past, today], check=False).returncode == 1
    mounts.unmount(today)

    # every change is EROFS
    for attempt in (lambda: open(f"{past}/x", "wb"), lambda: open(f"{past}/keep.txt", "ab"),
                    lambda: os.mkdir(f"{past}/d"), lambda: os.remove(f"{past}/keep.txt"),
                    lambda: os.setxattr(f"{past}/keep.txt", "user.note", b"x"),
                    lambda: os.chmod(f"{past}/keep.txt", 0o600),
                    lambda: os.rename(f"{past}/keep.txt", f"{past}/k2")):
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno == errno.EROFS

    # a restic backup of the mount at the moment restores the tree of that moment
    env = dict(os.environ, RESTIC_REPOSITORY=str(tmp_path / "repo"), RESTIC_PASSWORD="test")
    sh(["restic", "init"], env=env)
    sh(["restic", "backup", "--quiet", "."], cwd=past, env=env)
    back = tmp_path / "back"
    sh(["restic", "restore", "latest", "--target", str(back)], env=env)
    not_root = lambda lines: [l for l in lines if not l.startswith(". ")]
    got = picture(back)
    assert not_root(got[0]) == not_root(then[0]) and got[1] == then[1] and got[2] == then[2]
    sh(["diff", "-r", "--no-dereference", str(copy), str(back)])
    mounts.unmount(past)

    # restore -r makes the live bucket what it was; the name created since is left alone, then
    # removed with --delete
    r = run("restore", b.src(), "--at", moment, "-r", *b.extra)
    summary = r.stderr.decode()
    assert "1 created since, left alone" in summary and "0 refused" in summary, summary
    assert "left\tnew.txt" in r.stdout.decode()
    r = run("restore", b.src(), "--at", moment, "-r", "--delete", *b.extra)
    assert "0 restored" in r.stderr.decode() and "1 deleted" in r.stderr.decode(), r.stderr.decode()
    restored = mounts.mount(b.src())
    assert picture(restored) == then
    sh(["diff", "-r", "--no-dereference", str(copy), restored])


def test_versions_lists_generations_and_restore_refuses_a_concurrent_change(versioned, mounts):
    b = versioned
    b.put("f.txt", "one")
    settle()
    moment = rfc3339(time.time())
    settle()
    b.put("f.txt", "two")
    lines = run("versions", b.src("f.txt"), *b.extra).stdout.decode().splitlines()
    assert len(lines) == 2, lines
    old, new = (l.split("\t") for l in lines)
    assert old[0] == "f.txt" and old[2] == "3" and old[4] != "live"
    assert new[4] == "live"
    assert run("cat", b.src("f.txt"), "--at", moment, *b.extra).stdout == b"one"
    assert run("ls", b.src(), "--at", moment, *b.extra).stdout.decode().split() == ["f.txt"]
    # restore by generation, guarded by the live generation: a second writer in between wins
    run("restore", b.src("f.txt"), "--generation", old[1], *b.extra)
    assert b.cat("f.txt") == b"one"
    # nothing to do the second time
    r = run("restore", b.src("f.txt"), "--at", moment, *b.extra)
    assert "1 already equal" in r.stderr.decode()


def test_a_restore_meeting_a_concurrent_change_refuses_it_and_loses_nothing(versioned, mounts, tmp_path):
    """The concurrent writer is a mount writing into the bucket while `restore -r` copies
    thousands of names: each name the writer changed after the restore listed it is refused
    (never overwritten), every other name is restored. On the project's own server, which pages
    versioned listings as the JSON API documents, there are enough names that the restore's
    listing of their generations (two each, and the writer's) takes more than one page of 1,000;
    fake-gcs-server's versioned pages repeat (docs/TESTING.md), so there the listing stays within
    one page, as on the embedded bucket (to keep the tier's time)."""
    b = versioned
    srv = getattr(b, "server", None)
    pages = srv is not None and not srv.has("versions-paging-repeats")
    names = [f"d/{i:04d}" for i in range(600 if pages else 300)]
    live = mounts.mount(b.src())
    os.mkdir(f"{live}/d")
    for n in names:
        with open(f"{live}/{n}", "w") as f:
            f.write("then")
    mounts.unmount(live)
    settle()
    moment = rfc3339(time.time())
    settle()
    live = mounts.mount(b.src())
    for n in names:
        with open(f"{live}/{n}", "w") as f:
            f.write("bad sync")
    p = subprocess.Popen([BIN, "restore", b.src("d"), "--at", moment, "-r", "--concurrency", "1", *b.extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the concurrent writer: the last names, rewritten while the restore runs. The mount guards
    # its own writes the same way: a name the restore replaced first is ESTALE to it.
    written, stale = set(), set()
    for n in reversed(names):
        if p.poll() is not None:
            break
        try:
            with open(f"{live}/{n}", "w") as f:
                f.write("concurrent")
            written.add(n)
        except OSError as e:
            assert e.errno == errno.ESTALE, e
            stale.add(n)
    out, err = p.communicate(timeout=300)
    mounts.unmount(live)
    refused = {l.split("\t")[1] for l in out.decode().splitlines() if l.startswith("refused\t")}
    restored = {l.split("\t")[1] for l in out.decode().splitlines() if l.startswith("restored\t")}
    # every name had changed since the moment, so each is restored or refused: none is missed (as
    # by a versioned listing cut short after its first page)
    assert restored | refused == set(names), sorted(set(names) - restored - refused)[:10]
    gap = getattr(b, "server", None) is not None and b.server.has("no-preconditions")
    if gap:
        # the server ignores ifGenerationMatch on a copy: it refuses nothing, so a concurrent
        # write is overwritten; the versioned bucket still keeps it (checked below)
        assert not refused and p.returncode == 0, out.decode()
        refused = set()
    else:
        assert refused, f"no concurrent change met (the writer wrote {len(written)}): {err.decode()}"
        assert p.returncode == 1
    assert f"{len(refused)} refused by a concurrent change" in err.decode(), err.decode()
    assert refused <= written
    # what each name holds now, read through a fresh mount (one process, not one `cat` per name)
    check = mounts.mount(b.src())
    for n in names:
        with open(f"{check}/{n}", "rb") as f:
            data = f.read()
        if gap and n in written:
            assert data in (b"then", b"concurrent"), n
        elif n in refused:
            assert data == b"concurrent", n      # the change the restore did not see is kept
        elif n in written:
            # written before the restore listed it (restored over; the write stays an old
            # version) or after the restore copied it (the writer's is live)
            assert data in (b"then", b"concurrent"), n
        else:
            assert data == b"then", n            # restored (the writer's late write was refused)
    mounts.unmount(check)
    # nothing lost: every "concurrent" write is live or kept as an old version (one versioned
    # listing of the prefix, itself more than a page where the server pages)
    sizes = {}
    for line in run("versions", b.src("d"), "-r", *b.extra).stdout.decode().splitlines():
        name, _, size, *_ = line.split("\t")
        if not name.endswith("/"):  # (d/, the directory's placeholder on gs://)
            sizes.setdefault(name, []).append(size)
    assert set(sizes) == set(names), sorted(set(sizes) ^ set(names))[:10]
    for n in written:
        assert str(len("concurrent")) in sizes[n], (n, sizes[n])


def test_listing_and_xattrs_of_a_mount_at_a_moment_cost_list_requests_only(versioned, mounts, tmp_path):
    b = versioned
    moment = tree_written_then_moment(b, mounts)
    live = mounts.mount(b.src())
    change_tree(live)
    mounts.unmount(live)
    log = tmp_path / "req.log"
    past = mounts.mount(b.src(), "--at", moment, "--request-log", str(log))
    log.write_text("")
    sh(["ls", "-lR", past])
    sh(["getfattr", "-R", "-d", "-h", "--absolute-names", past])
    lines = [l.split(" ", 1) for l in log.read_text().splitlines()]
    # a small bucket: one versioned listing of it all, once, and one live listing that checks it
    # (docs/RESTORE.md, "A listing that breaks the rules"); and, as on a live mount, the one GET
    # of a symbolic link's target (its content) that `ls -l` reads (docs/SEMANTICS.md §3.8)
    assert [l[0] for l in lines].count("list") == 2, lines
    assert [l for l in lines if l[0] != "list"] == [["read", "link"]], lines
    # each read is one GET of that generation
    log.write_text("")
    assert open(f"{past}/docs/a.txt").read() == "first version\n"
    ops = [l.split(" ")[0] for l in log.read_text().splitlines()]
    assert len(ops) == 1 and ops[0] != "list", ops


def test_a_bucket_without_versions_is_refused_by_name(bucket, mounts, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    p = subprocess.run([BIN, "mount", bucket.src(), str(mnt), "--at", "1h"], capture_output=True, timeout=60)
    assert p.returncode != 0
    assert "keeps no old versions" in p.stderr.decode() and "versioning is off" in p.stderr.decode(), p.stderr
    # a gs:// bucket whose versioning is off, as its bucket resource says (the own server without
    # --versioning)
    srv = OwnServer(f"nv-{uuid.uuid4().hex[:12]}")
    try:
        p = subprocess.run([BIN, "mount", srv.src(), str(mnt), "--at", "1h", *srv.options],
                           capture_output=True, timeout=60)
        if p.returncode == 0:  # (a wrong mount is not left behind)
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    finally:
        srv.stop()
    assert p.returncode != 0
    assert "keeps no old versions" in p.stderr.decode() and "versioning is off" in p.stderr.decode(), p.stderr
    p = subprocess.run([BIN, "mount", "firebase://app.firebasestorage.app", str(mnt), "--at", "1h"],
                       capture_output=True, timeout=10)
    assert p.returncode != 0 and "has no versions" in p.stderr.decode(), p.stderr
    assert not os.path.ismount(mnt)


def test_a_versioned_listing_that_breaks_the_rules_is_reported_not_shown(mounts, tmp_path):
    """storage-testbench lists old generations without their timeDeleted, and its delete drops the
    live generation itself (docs/RESTORE.md, "A listing that breaks the rules"): read as it comes,
    a moment before a delete showed deleted files with an older content, and `restore` found them
    "already equal" while the directory stayed gone. The listing is reported, by name; the mount
    at the moment shows nothing of it (EIO, and why in its log); `restore` copies nothing."""
    srv = server("testbench")
    assert srv.has("versions-without-times")
    bucket = os.environ.get("BUCKETFS_TESTBENCH_VERSIONED_BUCKET", f"{srv.bucket_name}-versioned")
    b = Bucket(f"gs://{bucket}/r-{uuid.uuid4().hex[:10]}")
    b.extra = list(srv.options)
    mounts.gs_options = list(srv.options)
    live = mounts.mount(b.src())
    os.mkdir(f"{live}/docs")
    for name, data in (("docs/a.txt", b"first\n"), ("docs/b.txt", b"b\n"), ("docs/a.txt", b"second\n"),
                       ("notes.txt", b"one\n"), ("notes.txt", b"two\n")):
        with open(f"{live}/{name}", "wb") as f:
            f.write(data)
    settle()
    moment = rfc3339(time.time())
    settle()
    sh(["rm", "-r", f"{live}/docs"])
    mounts.unmount(live)
    assert not b.exists("docs/a.txt") and not b.exists("docs/b.txt")

    # `versions` lists what the server sent, with a note: notes.txt's two generations both
    # without a timeDeleted
    r = run("versions", b.src(), "-r", *b.extra)
    # (the library commands name objects by their full names: the prefix, then the name)
    assert "breaks the versioning rules" in r.stderr.decode() and "/notes.txt': generations" in r.stderr.decode(), r.stderr.decode()
    assert "/docs/a.txt\t" in r.stdout.decode()

    past = mounts.mount(b.src(), "--at", moment)
    with pytest.raises(OSError) as e:
        os.listdir(f"{past}/docs")
    assert e.value.errno == errno.EIO
    with pytest.raises(OSError) as e:
        open(f"{past}/docs/a.txt", "rb")
    assert e.value.errno == errno.EIO
    with open(mounts.log_path(past)) as f:
        log = f.read()
    assert "breaks the versioning rules" in log and "'docs/a.txt'" in log and "no live object" in log, log
    mounts.unmount(past)

    r = run("restore", b.src("docs"), "--at", moment, "-r", *b.extra, check=False)
    assert r.returncode == 1, r
    assert "breaks the versioning rules" in r.stderr.decode() and "/docs/a.txt': generation" in r.stderr.decode(), r.stderr.decode()
    assert "already equal" not in r.stderr.decode()
    assert not b.exists("docs/a.txt") and not b.exists("docs/b.txt")
    r = run("cat", b.src("docs/a.txt"), "--at", moment, *b.extra, check=False)
    assert r.returncode == 1 and "breaks the versioning rules" in r.stderr.decode(), r
