"""Files a firebase:// mount's rules refused, as a new user meets them (docs/OPERATING.md, "The
recovery runbook"; docs/FIREBASE.md): `recover --dry-run` says which would be refused again and
why, and exits 1, instead of "would upload"; the real run refuses the same ones; a new mount that
finds them in another cache directory names `recover --to` for them."""
import os
import re
import time

from conftest import run, sh
from firebase_http import BUCKET
from test_firebase import SRC, fb, lost_entries, seed  # noqa: F401 (fb: fixture)


def refused_files(fb, mounts):
    """Two files the emulator's rules refused at their close (shared/ is read-only): one mount's
    lost+found, complete and marked refused. Returns the mount point and its cache directory."""
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(SRC)
    for name in ("a.txt", "b.txt"):
        # The emulator checks the rules only at finalize: the first create of a type there opens,
        # its close is refused (bash ignores it) and the data is kept; later ones fail at open.
        sh(["bash", "-c", f"echo {name} > {mnt}/shared/{name}"], check=False)
    kept = lost_entries(mounts, mnt)
    assert list(kept.values()) == [b"a.txt\n"], kept
    # A second type (its own question): refused at close too.
    sh(["bash", "-c", f"echo data > {mnt}/shared/c.bin"], check=False)
    assert len(lost_entries(mounts, mnt)) == 2, lost_entries(mounts, mnt)
    cache = mounts.cache_dir(mnt)
    mounts.unmount(mnt)
    return mnt, cache


def test_a_dry_run_says_what_would_be_refused_and_why(fb, mounts):
    _, cache = refused_files(fb, mounts)
    dry = run("recover", cache, "--dry-run", check=False)
    out = dry.stdout.decode()
    assert dry.returncode == 1, out + dry.stderr.decode()
    assert "would upload:" not in out, out
    assert len(re.findall(r"^would be refused: 'shared/(a\.txt|c\.bin)' .*refused at its close", out, re.M)) == 2, out
    assert "dry run: would upload 0 file(s)" in out and "2 would be refused" in out and f"--to {SRC}/PREFIX" in out, out
    # The real run refuses the same two, and keeps them.
    rec = run("recover", cache, check=False)
    assert rec.returncode == 1 and "recovered 0 file(s)" in rec.stdout.decode(), rec.stdout.decode() + rec.stderr.decode()
    assert fb.server.get_object(BUCKET, "shared/a.txt") is None
    # --to a folder the rules allow: the dry run sees nothing against it.
    dry = run("recover", cache, "--dry-run", "--to", f"{SRC}/{fb.home()}", check=False)
    assert dry.returncode == 0 and "would upload 2 file(s)" in dry.stdout.decode(), dry.stdout.decode()


def test_a_new_mount_names_recover_to_for_refused_files_elsewhere(fb, mounts):
    mnt, cache = refused_files(fb, mounts)
    second = mounts.mount(SRC, name="second")
    log = open(mounts.log_path(second)).read()
    mounts.unmount(second)
    line = [l for l in log.splitlines() if f"another cache directory, {cache} " in l]
    assert line and f"bucketfs recover {cache} --to {SRC}/PREFIX" in line[0], log[-3000:]
    assert f"`bucketfs recover {cache}` uploads" not in line[0], line[0]


def wait_for_line(path, words, timeout=60):
    """The first line of the log at `path` holding `words` (a release's upload ends after close returned)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in open(path).read().splitlines() if words in l]
        if lines or time.monotonic() > deadline:
            return lines[0] if lines else ""
        time.sleep(0.05)


def test_a_first_refused_shell_create_is_said_where_the_user_looks(fb, mounts):
    """Against a server that checks the rules only when an upload finishes (the emulator, and the
    test server's default flavour) nothing can learn the refusal before the close without making
    a generation: the first `echo >` (and `touch`) of a type in a read-only folder exits 0 with no
    message, since bash and touch ignore close's error. The log line says so and where to look,
    `bucketfs status` lists the kept data, and the next create there fails at open."""
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(SRC)
    p = sh(["bash", "-c", f"echo x > {mnt}/shared/new.txt"], check=False)
    assert p.returncode == 0 and p.stderr == b"", p  # what the shell shows: nothing
    p = sh(["touch", f"{mnt}/shared/t.bin"], check=False)  # another type: asked again, allowed again
    assert p.returncode == 0, p
    log = mounts.log_path(mnt)
    line = wait_for_line(log, "upload of 'shared/new.txt' refused")
    assert "kept in" in line and "allowed when asked at open" in line and "bucketfs status" in line, line
    assert "later creates of text/plain there fail at open with EACCES" in line, line
    empty = wait_for_line(log, "upload of 'shared/t.bin' refused")
    assert "none to keep: the file is empty" in empty and "allowed when asked at open" in empty, empty
    p = sh(["bash", "-c", f"echo y > {mnt}/shared/other.txt"], check=False)
    assert p.returncode != 0 and b"Permission denied" in p.stderr, p
    cache = mounts.cache_dir(mnt)
    mounts.unmount(mnt)
    st = run("status", SRC, check=False)
    [row] = [l for l in st.stdout.decode().splitlines() if l.split("\t")[1:2] == [cache]]
    assert st.returncode == 1 and "1 refused by the store" in row, st.stdout.decode()
