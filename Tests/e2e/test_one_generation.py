"""What the shell does, the bucket sees once (docs/SEMANTICS.md §3.3, "One generation per written
file"): each common writer, through a mount in the default mode, makes exactly one generation of
the file it writes, on a versioned embedded bucket, a versioned bucket of fake-gcs-server and one
of the project's own Cloud Storage server, and one finalized upload on firebase:// (which keeps
no versions: the test server counts what it stored). bash's `>` closes its first descriptor
before it writes; that close must not upload an empty object."""
import os
import subprocess

import pytest

from conftest import run, sh
from test_restore import versioned  # noqa: F401  (the fixture: embedded, fake-gcs, own)
from test_firebase import SRC as FIREBASE_SRC, BUCKET as FIREBASE_BUCKET, fb  # noqa: F401

CONTENT = b"one generation\n"


def writers(src_dir, mnt_dir, work):
    """Each writer writes one file named after it into `mnt_dir`; returns {name: content}."""
    src = os.path.join(work, "source.txt")
    with open(src, "wb") as f:
        f.write(CONTENT)
    os.makedirs(os.path.join(work, "tree"), exist_ok=True)
    with open(os.path.join(work, "tree", "tar.txt"), "wb") as f:
        f.write(CONTENT)
    sh(["tar", "-cf", os.path.join(work, "t.tar"), "-C", os.path.join(work, "tree"), "tar.txt"])
    d = mnt_dir
    sh(["bash", "-c", f"echo 'one generation' > '{d}/bash.txt'"])
    sh(["bash", "-c", f"printf 'one generation\\n' > '{d}/printf.txt'"])
    sh(["dash", "-c", f"echo 'one generation' > '{d}/dash.txt'"])
    sh(["cp", src, f"{d}/cp.txt"])
    sh(["tar", "-xf", os.path.join(work, "t.tar"), "-C", d])
    sh(["rsync", src, f"{d}/rsync.txt"])
    sh(["touch", f"{d}/touch.txt"])
    subprocess.run(["python3", "-c", f"f = open('{d}/python.txt', 'w'); f.write('one generation\\n'); f.close()"], check=True)
    # GNU tar --xattrs makes each file with mknod, sets its xattrs, then opens and writes it.
    xtree = os.path.join(work, "xtree")
    os.makedirs(xtree, exist_ok=True)
    with open(os.path.join(xtree, "tar-xattrs.txt"), "wb") as f:
        f.write(CONTENT)
    os.setxattr(os.path.join(xtree, "tar-xattrs.txt"), "user.color", b"red")
    sh(["tar", "--xattrs", "-cf", os.path.join(work, "x.tar"), "-C", xtree, "tar-xattrs.txt"])
    sh(["tar", "--xattrs", "-xf", os.path.join(work, "x.tar"), "-C", d])
    assert os.getxattr(f"{d}/tar-xattrs.txt", "user.color") == b"red"
    subprocess.run(["python3", "-c", f"import os, stat; os.mknod('{d}/mknod.txt', 0o644 | stat.S_IFREG); "
                    f"f = open('{d}/mknod.txt', 'w'); f.write('one generation\\n'); f.close()"], check=True)
    expected = {n: CONTENT for n in ["bash.txt", "printf.txt", "dash.txt", "cp.txt", "tar.txt", "rsync.txt", "python.txt",
                                     "tar-xattrs.txt", "mknod.txt"]}
    expected["touch.txt"] = b""
    return expected


def table(counts):
    return "\n".join(f"{name:12} {n} generation(s)" for name, n in sorted(counts.items()))


def test_each_writer_makes_one_generation_on_a_versioned_bucket(versioned, mounts, tmp_path):  # noqa: F811
    b = versioned
    mnt = mounts.mount(b.src())
    os.makedirs(f"{mnt}/w")
    expected = writers(None, f"{mnt}/w", str(tmp_path))
    mounts.unmount(mnt)
    counts = {}
    for name, data in expected.items():
        lines = run("versions", b.src(f"w/{name}"), *b.extra).stdout.decode().splitlines()
        counts[name] = len(lines)
        assert b.cat(f"w/{name}") == data, name
    print("\n" + table(counts))
    assert all(n == 1 for n in counts.values()), table(counts)


def test_each_writer_makes_one_finalized_upload_on_firebase(fb, mounts):  # noqa: F811
    fb.login_email()
    home = mounts.mount(f"{FIREBASE_SRC}/{fb.home()}")
    os.makedirs(f"{home}/w", exist_ok=True)
    work = str(mounts.tmp / "work")
    os.makedirs(work, exist_ok=True)
    with fb.server.lock:
        fb.server.finalized.clear()
    expected = writers(None, f"{home}/w", work)
    mounts.unmount(home)
    with fb.server.lock:
        stored = dict(fb.server.finalized)
    counts = {name: stored.get((FIREBASE_BUCKET, fb.home(f"w/{name}")), 0) for name in expected}
    print("\n" + table(counts))
    assert all(n == 1 for n in counts.values()), table(counts)
    for name, data in expected.items():
        assert fb.server.get_object(FIREBASE_BUCKET, fb.home(f"w/{name}")).data == data, name
