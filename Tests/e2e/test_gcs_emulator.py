"""docs/SEMANTICS.md §2-§4 through a real `gs://` mount of each Cloud Storage server (gcp-storage-emulator
and fake-gcs-server), checked from the other side with the official Python client
(google-cloud-storage): listings, xattrs <-> object metadata, byte-identical reads and writes in
both directions, a 300 MiB read.

Needs BUCKETFS_EMULATOR / BUCKETFS_FAKE_GCS (Scripts/test.sh starts both servers and exports them);
skipped otherwise. Every test works under its own unique prefix of the shared bucket. Where a
server's own gap shows, the test asserts the gap under `emulator.has(...)` (conftest.GAPS)."""
import base64
import hashlib
import os
import time

from conftest import run, sh


def mount_gs(mounts, emulator, *options):
    return mounts.mount(emulator.src(), *emulator.options, *options)


def test_listing_shows_prefixes_and_items(emulator, mounts, prefix):
    b = emulator.bucket()
    names = {
        f"{prefix}/a.txt": b"a",
        f"{prefix}/b.json": b"{}",
        f"{prefix}/sub/c.txt": b"cc",
        f"{prefix}/sub/deeper/d.txt": b"ddd",
        f"{prefix}/only/e.bin": b"eeee",
        f"{prefix}/empty/": b"",  # a placeholder: an empty directory
    }
    for name, data in names.items():
        b.blob(name).upload_from_string(data)
    # What the JSON API itself says, for comparison.
    it = emulator.client().list_blobs(emulator.bucket_name, prefix=f"{prefix}/", delimiter="/")
    items = sorted(x.name.rsplit("/", 1)[1] for x in it)
    prefixes = sorted(p.rstrip("/").rsplit("/", 1)[1] for p in it.prefixes)
    assert items == ["a.txt", "b.json"] and prefixes == ["empty", "only", "sub"]

    mnt = mount_gs(mounts, emulator)
    top = f"{mnt}/{prefix}"
    assert sorted(os.listdir(top)) == sorted(items + prefixes)
    for p in prefixes:
        assert os.path.isdir(f"{top}/{p}")
    for i in items:
        assert os.path.isfile(f"{top}/{i}")
    assert os.listdir(f"{top}/empty") == []
    assert sorted(os.listdir(f"{top}/sub")) == ["c.txt", "deeper"]
    assert os.listdir(f"{top}/sub/deeper") == ["d.txt"]
    ls = sh(["ls", "-l", top]).stdout.decode().splitlines()
    assert len(ls) == 1 + 5  # "total" + entries
    sizes = {l.split()[-1]: int(l.split()[4]) for l in ls[1:] if l.startswith("-")}
    assert sizes == {"a.txt": 1, "b.json": 2}
    found = sorted(sh(["find", top, "-type", "f"]).stdout.decode().split())
    assert found == sorted(f"{mnt}/{n}" for n in names if not n.endswith("/"))

    # The same bucket mounted at the prefix: the prefix is the root.
    sub = mounts.mount(emulator.src(prefix), *emulator.options)
    assert sorted(os.listdir(sub)) == sorted(items + prefixes)
    assert open(f"{sub}/sub/deeper/d.txt", "rb").read() == b"ddd"


def readdirs(port):
    """How many readdir (and readdirplus) requests reached the mount, from its metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.startswith('bucketfs_fuse_operations_total{') and 'operation="readdir"' in l)


def test_the_kernel_keeps_a_fresh_listing_and_sees_every_change(emulator, mounts, prefix):
    """The kernel's readdir cache (docs/SEMANTICS.md §6): while the mount's listing of a directory
    is fresh, a warm `ls` is answered by the kernel (no readdir reaches the mount); a change made
    through the mount shows at once, one made elsewhere once --metadata-ttl has passed."""
    from test_operating import free_port
    b = emulator.bucket()
    for n in ("a", "b", "c"):
        b.blob(f"{prefix}/d/{n}").upload_from_string(n)
    port = free_port()
    mnt = mount_gs(mounts, emulator, "--metadata-ttl", "3600", "--metrics-address", f"127.0.0.1:{port}")
    d = f"{mnt}/{prefix}/d"
    assert sorted(os.listdir(d)) == ["a", "b", "c"]
    before = readdirs(port)
    for _ in range(3):
        assert sorted(os.listdir(d)) == ["a", "b", "c"]
    assert readdirs(port) == before, "the warm listings were the kernel's"
    with open(f"{d}/new", "w") as f:
        f.write("n")
    os.remove(f"{d}/b")
    assert sorted(os.listdir(d)) == ["a", "c", "new"]
    assert readdirs(port) > before, "a change through the mount makes the kernel ask again"
    # Elsewhere: seen after the TTL (a second mount of the same directory, with a short one).
    short = mount_gs(mounts, emulator, "--metadata-ttl", "1", "--metrics-address", f"127.0.0.1:{free_port()}")
    e = f"{short}/{prefix}/d"
    assert sorted(os.listdir(e)) == ["a", "c", "new"]
    b.blob(f"{prefix}/d/later").upload_from_string("x")
    time.sleep(1.5)  # past --metadata-ttl
    assert sorted(os.listdir(e)) == ["a", "c", "later", "new"]


def test_setfattr_through_mount_is_object_metadata(emulator, mounts, prefix):
    b = emulator.bucket()
    blob = b.blob(f"{prefix}/doc.txt")
    blob.metadata = {"keep": "me"}
    blob.upload_from_string(b"some text\n", content_type="text/plain")
    mnt = mount_gs(mounts, emulator)
    f = f"{mnt}/{prefix}/doc.txt"
    sh(["setfattr", "-n", "user.k", "-v", "v", f])
    sh(["setfattr", "-n", "user.storage.contentType", "-v", "text/x-test", f])
    got = b.get_blob(f"{prefix}/doc.txt")
    assert got.metadata == {"keep": "me", "k": "v"}
    assert got.content_type == "text/x-test"
    assert got.generation == blob.generation  # a PATCH, not a re-upload
    assert got.download_as_bytes() == b"some text\n"
    # and the mount shows what it wrote
    dump = sh(["getfattr", "-d", f]).stdout.decode()
    assert 'user.k="v"' in dump and 'user.keep="me"' in dump and 'user.storage.contentType="text/x-test"' in dump
    # removal is a PATCH with the key as JSON null: the client sees no value any more (GCS drops
    # the key; the emulator keeps it with a null value, which the client shows as None)
    sh(["setfattr", "-n", "user.gone", "-v", "soon", f])
    assert b.get_blob(f"{prefix}/doc.txt").metadata["gone"] == "soon"
    sh(["setfattr", "-x", "user.gone", f])
    if emulator.has("null-key-stored-as-empty"):
        # fake-gcs-server stores the null as "": the key stays, empty, and the mount shows what
        # the server holds (checked with curl: PATCH {"metadata":{"a":null}} answers "a": "")
        assert b.get_blob(f"{prefix}/doc.txt").metadata.get("gone") == ""
        assert os.getxattr(f, "user.gone") == b""
    else:
        assert b.get_blob(f"{prefix}/doc.txt").metadata.get("gone") is None
        assert "user.gone" not in os.listxattr(f)
    # a change made elsewhere is seen after the metadata TTL, not lost by the next setfattr
    got = b.get_blob(f"{prefix}/doc.txt")
    got.metadata = {"keep": "me", "k": "v", "other": "side"}  # the whole map: the emulator's PATCH replaces it
    got.patch()
    time.sleep(5.5)  # default --metadata-ttl is 5 s
    sh(["setfattr", "-n", "user.k2", "-v", "v2", f])
    now = {k: v for k, v in b.get_blob(f"{prefix}/doc.txt").metadata.items() if v is not None}
    if emulator.has("null-key-stored-as-empty"):
        assert now.pop("gone") == ""
    assert now == {"keep": "me", "k": "v", "other": "side", "k2": "v2"}


def test_unset_properties_stay_unset_after_a_patch(emulator, mounts, prefix):
    """A setfattr is a PATCH whose answer the mount keeps; an object with no cacheControl,
    contentDisposition, contentEncoding or contentLanguage shows none of them after it, as on a
    real bucket (fake-gcs-server answers a PATCH with each unset property as "": ObjectResource.property)."""
    b = emulator.bucket()
    b.blob(f"{prefix}/plain.txt").upload_from_string(b"plain\n", content_type="text/plain")
    mnt = mount_gs(mounts, emulator, "--metadata-ttl", "60")
    f = f"{mnt}/{prefix}/plain.txt"
    sh(["setfattr", "-n", "user.k", "-v", "v", f])
    listed = set(os.listxattr(f))
    # text/plain is what plain.txt's name means: readable, not listed (docs/SEMANTICS.md §4.1)
    assert "user.k" in listed and "user.storage.contentType" not in listed, listed
    assert os.getxattr(f, "user.storage.contentType") == b"text/plain"
    for prop in ("cacheControl", "contentDisposition", "contentEncoding", "contentLanguage"):
        assert f"user.storage.{prop}" not in listed, listed
        r = sh(["getfattr", "-n", f"user.storage.{prop}", f], check=False)
        assert r.returncode != 0 and b"No such attribute" in r.stderr, (prop, r.stdout, r.stderr)
    got = b.get_blob(f"{prefix}/plain.txt")
    assert got.cache_control is None and got.content_language is None


def test_client_written_object_reads_back_identical(emulator, mounts, prefix, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    b = emulator.bucket()
    blob = b.blob(f"{prefix}/data/blob.bin")
    blob.metadata = {"owner": "python", "purpose": "round trip"}
    blob.cache_control = "no-cache"
    blob.upload_from_string(data, content_type="application/x-test")
    blob.reload()

    mnt = mount_gs(mounts, emulator)
    f = f"{mnt}/{prefix}/data/blob.bin"
    assert os.stat(f).st_size == len(data)
    with open(f, "rb") as fh:
        assert fh.read() == data
    sh(["cmp", f, "-"], input=data)
    assert run("cat", emulator.src(f"{prefix}/data/blob.bin"), *emulator.options).stdout == data
    dump = sh(["getfattr", "-d", f]).stdout.decode()
    assert 'user.owner="python"' in dump and 'user.purpose="round trip"' in dump
    assert 'user.storage.contentType="application/x-test"' in dump
    assert 'user.storage.cacheControl="no-cache"' in dump
    assert os.getxattr(f, "user.storage.md5Hash").decode() == blob.md5_hash
    assert os.getxattr(f, "user.storage.generation").decode() == str(blob.generation)
    assert base64.b64decode(blob.md5_hash) == hashlib.md5(data).digest()
    meta = run("meta", "get", emulator.src(f"{prefix}/data/blob.bin"), "owner", *emulator.options).stdout
    assert meta.strip() == b"python"


def test_300mib_object_reads_through_mount(emulator, mounts, prefix, tmp_path, capsys):
    size = 300 * 1024 * 1024
    src = tmp_path / "big.bin"
    md5 = hashlib.md5()
    with open(src, "wb") as out:
        chunk = os.urandom(1 << 20)
        for i in range(size >> 20):
            block = bytes([i & 0xFF]) + chunk[1:]  # every MiB differs
            md5.update(block)
            out.write(block)
    blob = emulator.bucket().blob(f"{prefix}/big.bin")
    blob.chunk_size = 32 * 1024 * 1024
    blob.upload_from_filename(str(src), content_type="application/octet-stream")
    src.unlink()
    blob.reload()
    assert blob.size == size and base64.b64decode(blob.md5_hash) == md5.digest()

    try:
        mnt = mount_gs(mounts, emulator)
        f = f"{mnt}/{prefix}/big.bin"
        assert os.stat(f).st_size == size
        got = hashlib.md5()
        t0 = time.monotonic()
        n = 0
        with open(f, "rb", buffering=0) as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                n += len(b)
                got.update(b)
        secs = time.monotonic() - t0
        mounts.unmount(mnt)
    finally:
        blob.delete()  # the emulator keeps objects in memory
    assert n == size
    assert got.digest() == md5.digest()
    with capsys.disabled():
        print(f"\n[300 MiB through a gs:// mount of {emulator.name}: {size / secs / 1e6:.1f} MB/s, {secs:.1f} s]")


def test_file_written_through_mount_is_read_by_client(emulator, mounts, prefix, tmp_path):
    log = tmp_path / "requests.log"
    mnt = mount_gs(mounts, emulator, "--request-log", str(log))
    os.makedirs(f"{mnt}/{prefix}/out")
    # cp of a file whose type is guessed from its extension
    local = tmp_path / "report.json"
    payload = b'{"rows": [' + b",".join(b"%d" % i for i in range(50_000)) + b"]}"
    local.write_bytes(payload)
    sh(["cp", str(local), f"{mnt}/{prefix}/out/report.json"])
    # xattrs set before the first close go into the upload itself
    big = os.urandom(9 * 1024 * 1024 + 5)  # over the resumable threshold (8 MiB)
    target = f"{mnt}/{prefix}/out/photo.png"
    with open(target, "wb") as fh:
        os.setxattr(target, "user.camera", b"pinhole")
        os.setxattr(target, "user.place", b"Yosemite, CA, USA")
        fh.write(big)
    # the same with setfattr(1) while the new file is open. Starting any process copies the open
    # descriptor and closes the copy, which FUSE reports as a flush: bucketfs uploads then (an empty
    # object), PATCHes for setfattr and uploads again at the last close; only the end state is checked.
    notes = f"{mnt}/{prefix}/out/notes.txt"
    with open(notes, "wb") as fh:
        sh(["setfattr", "-n", "user.k", "-v", "v", notes])
        fh.write(b"hello\n")

    b = emulator.bucket()
    r = b.get_blob(f"{prefix}/out/report.json")
    assert r.download_as_bytes() == payload and r.content_type == "application/json"
    # the xattrs set in-process went into the upload itself: one write, no PATCH
    # (the emulator's metageneration is no witness: it reports 2 for a fresh upload)
    sent = [l.split()[0] for l in log.read_text().splitlines() if l.endswith("/out/photo.png")]
    assert sent == ["write"], log.read_text()
    p = b.get_blob(f"{prefix}/out/photo.png")
    assert p.download_as_bytes() == big and p.content_type == "image/png"
    assert base64.b64decode(p.md5_hash) == hashlib.md5(big).digest()
    user = {k: v for k, v in (p.metadata or {}).items() if not k.startswith("goog-reserved-")}
    assert user == {"camera": "pinhole", "place": "Yosemite, CA, USA"}
    n = b.get_blob(f"{prefix}/out/notes.txt")
    assert n.download_as_bytes() == b"hello\n" and n.content_type == "text/plain"
    assert {k: v for k, v in (n.metadata or {}).items() if not k.startswith("goog-reserved-")} == {"k": "v"}
    # mkdir made a placeholder
    assert b.get_blob(f"{prefix}/out/") is not None
    # the mount agrees with itself after a fresh mount
    again = mount_gs(mounts, emulator)
    assert sorted(os.listdir(f"{again}/{prefix}/out")) == ["notes.txt", "photo.png", "report.json"]
    assert open(f"{again}/{prefix}/out/photo.png", "rb").read() == big


NAMES = ["with space.txt", "plus+sign.txt", "hash#tag.txt", "q?mark.txt", "percent%41.txt", "amp&eq=.txt",
         "ünïcödé 日本.txt", "semi;colon,comma@at.txt", "tilde~(paren)'quote'.txt"]


def test_names_that_need_percent_encoding(emulator, mounts, prefix):
    b = emulator.bucket()
    for n in NAMES:
        b.blob(f"{prefix}/in/{n}").upload_from_string(n.encode())
    mnt = mount_gs(mounts, emulator)
    assert sorted(os.listdir(f"{mnt}/{prefix}/in")) == sorted(NAMES)
    for n in NAMES:
        assert open(f"{mnt}/{prefix}/in/{n}", "rb").read() == n.encode(), n
        os.setxattr(f"{mnt}/{prefix}/in/{n}", "user.name", n.encode())
        assert b.get_blob(f"{prefix}/in/{n}").metadata == {"name": n}
    os.mkdir(f"{mnt}/{prefix}/out")
    for n in NAMES:
        with open(f"{mnt}/{prefix}/out/{n}", "wb") as fh:
            fh.write(b"out:" + n.encode())
    # a fresh Blob builds its own (encoded) URL; the emulator's mediaLink is not encoded
    for n in NAMES:
        assert b.blob(f"{prefix}/out/{n}").download_as_bytes() == b"out:" + n.encode(), n
    listed = sorted(x.name for x in emulator.client().list_blobs(emulator.bucket_name, prefix=f"{prefix}/out/"))
    assert listed == sorted([f"{prefix}/out/"] + [f"{prefix}/out/{n}" for n in NAMES])
