"""What an embedded bucket keeps of its past, through the command line: `bucketfs mb DIR
--versioning` keeps overwritten and deleted generations (rows and blob files), `--keep-versions`
and `--keep-for` bound them, set at creation or later, and a bucket made without keeps only the
live generation (docs/SEMANTICS.md §10.2). The bucket's own database is read with sqlite3, as a
second reader of what the store wrote. The gs:// store's versioned listing is cross-checked with
the official client in the Swift tier (FakeGCSVersionsTests)."""
import os
import sqlite3

from conftest import run


def rows(directory, sql, *args):
    con = sqlite3.connect(f"file:{directory}/bucket.sqlite?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def blobs(directory):
    return sorted(os.listdir(os.path.join(directory, "blobs")))


def put(directory, name, data):
    run("put", "-", f"{directory}/{name}", input=data)


def test_versioning_keeps_overwritten_and_deleted_generations_under_keep_versions(tmp_path):
    d = str(tmp_path / "b")
    run("mb", d, "--versioning", "--keep-versions", "2")
    assert rows(d, "SELECT key, value FROM settings ORDER BY key") == [("keep_versions", 2), ("versioning", 1)]
    for i in range(4):
        put(d, "docs/f.txt", f"v{i}".encode())
    assert run("cat", f"{d}/docs/f.txt").stdout == b"v3"
    # The live one and the 2 newest noncurrent ones (v1, v2), each with its blob and its times.
    kept = rows(d, "SELECT size, created_us, deleted_us, blob FROM versions WHERE name = 'docs/f.txt' ORDER BY generation")
    assert len(kept) == 2
    assert all(created < deleted for _, created, deleted, _ in kept)
    assert len(blobs(d)) == 3
    assert {b for *_, b in kept} <= set(blobs(d))
    # A delete keeps the deleted generation; the oldest kept one goes, its blob with it.
    run("rm", f"{d}/docs/f.txt")
    assert run("stat", f"{d}/docs/f.txt", check=False).returncode == 2
    assert len(rows(d, "SELECT 1 FROM versions WHERE name = 'docs/f.txt'")) == 2
    assert len(blobs(d)) == 2
    # Changed later: the retention applies at once.
    run("mb", d, "--keep-versions", "0")
    assert rows(d, "SELECT COUNT(*) FROM versions") == [(0,)]
    assert blobs(d) == []


def test_keep_for_and_no_versioning_are_set_later_and_checked(tmp_path):
    d = str(tmp_path / "b")
    run("mb", d)
    put(d, "f", b"1")
    put(d, "f", b"2")
    assert rows(d, "SELECT COUNT(*) FROM versions") == [(0,)], "a bucket made without --versioning keeps nothing"
    assert len(blobs(d)) == 1
    run("mb", d, "--versioning", "--keep-for", "30d")
    assert dict(rows(d, "SELECT key, value FROM settings")) == {"versioning": 1, "keep_for_s": 30 * 86400}
    put(d, "f", b"3")
    assert rows(d, "SELECT size FROM versions WHERE name = 'f'") == [(1,)]
    run("mb", d, "--no-versioning", "--keep-for", "forever")
    assert dict(rows(d, "SELECT key, value FROM settings")) == {"versioning": 0}
    put(d, "f", b"4")
    assert len(rows(d, "SELECT 1 FROM versions WHERE name = 'f'")) == 1, "what was kept stays; nothing new is kept"
    for bad, words in [(["--keep-for", "soon"], "--keep-for takes a duration"),
                       (["--keep-versions=-1"], "--keep-versions takes a number"),
                       (["--versioning", "--no-versioning"], "contradict")]:
        p = run("mb", d, *bad, check=False)
        assert p.returncode != 0 and words in p.stderr.decode(), p.stderr.decode()
