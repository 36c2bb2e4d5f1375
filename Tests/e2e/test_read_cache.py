"""The read cache on local disk (docs/SEMANTICS.md §3.6, "The read cache"), through a real mount
of a Cloud Storage server: what was read is read again through a remount with no media GET and
the right bytes; an object replaced in the bucket is read anew; a cache file altered on disk is
not served; a cache disk that fills up costs the cache, never the bytes. Media GETs are counted in
the mount's --request-log ("read NAME": one line per ranged GET)."""
import os
import subprocess
import uuid

import pytest

from conftest import free_port, sh


def _reads(log):
    if not os.path.exists(log):
        return []
    return [line.partition(" ")[2] for line in open(log).read().splitlines() if line.startswith("read ")]


def _put(emulator, name, data):
    emulator.bucket().blob(name).upload_from_string(data)


def _mount(mounts, emulator, prefix, cache, log):
    return mounts.mount(emulator.src(prefix), "--read-only", "--read-cache-dir", str(cache), "--request-log", str(log))


def _read(path):
    with open(path, "rb") as f:
        return f.read()


FILES = {"a.bin": 3 << 20, "b.bin": 5 << 20, "small.txt": 3000}


def _flip(path, offset):
    """One byte of a cache file changed in place, as a disk or a person might change it."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x55]))


def _fill(emulator, prefix):
    content = {n: os.urandom(size) for n, size in FILES.items()}
    for n, data in content.items():
        _put(emulator, f"{prefix}/d/{n}", data)
    return content


@pytest.mark.one_server
def test_a_remount_reads_what_was_read_from_the_cache_with_no_media_get(emulator, prefix, mounts, tmp_path):
    content = _fill(emulator, prefix)
    cache = tmp_path / "read-cache"
    mnt = _mount(mounts, emulator, prefix, cache, tmp_path / "first.log")
    for n, data in content.items():
        assert _read(f"{mnt}/d/{n}") == data
    mounts.unmount(mnt)
    assert sorted(_reads(tmp_path / "first.log")) != []
    assert len([f for f in os.listdir(cache) if f.endswith(".json")]) == len(FILES)
    mnt = _mount(mounts, emulator, prefix, cache, tmp_path / "second.log")
    for n, data in content.items():
        assert _read(f"{mnt}/d/{n}") == data
    assert _reads(tmp_path / "second.log") == []
    mounts.unmount(mnt)


@pytest.mark.one_server
def test_an_object_replaced_in_the_bucket_is_read_anew(emulator, prefix, mounts, tmp_path):
    content = _fill(emulator, prefix)
    cache = tmp_path / "read-cache"
    mnt = _mount(mounts, emulator, prefix, cache, tmp_path / "first.log")
    assert _read(f"{mnt}/d/a.bin") == content["a.bin"]
    mounts.unmount(mnt)
    newer = os.urandom(FILES["a.bin"])
    _put(emulator, f"{prefix}/d/a.bin", newer)
    log = tmp_path / "second.log"
    mnt = _mount(mounts, emulator, prefix, cache, log)
    assert _read(f"{mnt}/d/a.bin") == newer
    assert "d/a.bin" in _reads(log)
    mounts.unmount(mnt)
    # And the new generation is what the cache keeps now.
    log = tmp_path / "third.log"
    mnt = _mount(mounts, emulator, prefix, cache, log)
    assert _read(f"{mnt}/d/a.bin") == newer
    assert _reads(log) == []


@pytest.mark.one_server
def test_a_cache_file_altered_on_disk_is_not_served(emulator, prefix, mounts, tmp_path):
    content = _fill(emulator, prefix)
    cache = tmp_path / "read-cache"
    mnt = _mount(mounts, emulator, prefix, cache, tmp_path / "first.log")
    assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
    mounts.unmount(mnt)
    [data_file] = [f for f in os.listdir(cache) if f.endswith(".data")]
    _flip(cache / data_file, 4 << 20)
    log = tmp_path / "second.log"
    mnt = _mount(mounts, emulator, prefix, cache, log)
    assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
    assert "d/b.bin" in _reads(log)
    text = open(mounts.log_path(mnt)).read()
    assert data_file in text and "changed on disk" in text, text[-2000:]
    mounts.unmount(mnt)


@pytest.mark.one_server
def test_a_cache_disk_that_fills_up_costs_the_cache_not_the_bytes(emulator, prefix, mounts, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as the cache's disk needs root")
    content = _fill(emulator, prefix)
    cache = tmp_path / "small-disk"
    cache.mkdir()
    # A 2 MiB disk under a bound of 64 MiB: the 5 MiB file cannot fit.
    sh(["mount", "-t", "tmpfs", "-o", "size=2m", f"bucketfs-test-{uuid.uuid4().hex[:6]}", str(cache)])
    try:
        log = tmp_path / "first.log"
        mnt = mounts.mount(emulator.src(prefix), "--read-only", "--read-cache-dir", str(cache), "--read-cache-mb", "64",
                           "--request-log", str(log))
        assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
        assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
        text = open(mounts.log_path(mnt)).read()
        assert "is full" in text and str(cache) in text, text[-2000:]
        assert text.count("is full") == 1
        mounts.unmount(mnt)
        assert not [f for f in os.listdir(cache) if f.endswith(".json")]
    finally:
        mounts.cleanup()
        # Lazily: the mount that just ended may still hold its lock file there for a moment.
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


@pytest.mark.one_server
def test_a_second_mount_on_the_same_cache_directory_reads_without_it(emulator, prefix, mounts, tmp_path):
    content = _fill(emulator, prefix)
    cache = tmp_path / "read-cache"
    first = _mount(mounts, emulator, prefix, cache, tmp_path / "first.log")
    second = _mount(mounts, emulator, prefix, cache, tmp_path / "second.log")
    text = open(mounts.log_path(second)).read()
    assert "in use by another mount" in text and str(cache) in text, text[-2000:]
    for mnt in (first, second):
        for n, data in content.items():
            assert _read(f"{mnt}/d/{n}") == data
    # The second reads from the bucket each time; only the first fills the directory.
    assert _read(f"{second}/d/a.bin") == content["a.bin"]
    mounts.unmount(second)
    mounts.unmount(first)
    assert len([f for f in os.listdir(cache) if f.endswith(".json")]) == len(FILES)


def _metric(port, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _passthrough_kernel():
    """Whether this kernel can read a FUSE file's backing file itself (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH)."""
    import gzip
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return "CONFIG_FUSE_PASSTHROUGH=y" in f.read()
    except OSError:
        return False


def _kernel_mount(mounts, emulator, prefix, cache, log, port, *more):
    return mounts.mount(emulator.src(prefix), "--read-cache-dir", str(cache), "--request-log", str(log),
                        "--metrics-address", f"127.0.0.1:{port}", "--metadata-ttl", "0", *more)


@pytest.mark.one_server
@pytest.mark.parametrize("direct", [[], ["--direct-io"]], ids=["page-cache", "direct-io"])
def test_the_kernel_reads_a_complete_checked_cache_file_itself(emulator, prefix, mounts, tmp_path, direct):
    """docs/SEMANTICS.md §3.6, "The kernel reads the cache": a complete file's later opens are read by
    the kernel from the cache's file (no read reaches bucketfs, no media GET), with the right bytes,
    with `--direct-io` too (its FOPEN_DIRECT_IO would send those reads to bucketfs);
    `--no-kernel-reads` serves them through bucketfs as before."""
    if os.geteuid() != 0 or not _passthrough_kernel():
        pytest.skip("FUSE passthrough needs root and a kernel built with CONFIG_FUSE_PASSTHROUGH")
    content = _fill(emulator, prefix)
    cache, port = tmp_path / "read-cache", free_port()
    mnt = _kernel_mount(mounts, emulator, prefix, cache, tmp_path / "first.log", port, *direct)
    for n, data in content.items():
        assert _read(f"{mnt}/d/{n}") == data
    first_gets = len(_reads(tmp_path / "first.log"))
    assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 0
    for _ in range(2):
        for n, data in content.items():
            assert _read(f"{mnt}/d/{n}") == data
    assert len(_reads(tmp_path / "first.log")) == first_gets
    assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 2 * len(FILES)
    assert _metric(port, "bucketfs_read_cache_read_bytes_total") == 0
    mounts.unmount(mnt)
    # Off: the same opens come through bucketfs, which reads the cache's files itself.
    port = free_port()
    mnt = _kernel_mount(mounts, emulator, prefix, cache, tmp_path / "second.log", port, "--no-kernel-reads")
    for n, data in content.items():
        assert _read(f"{mnt}/d/{n}") == data
    assert _reads(tmp_path / "second.log") == []
    assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 0
    assert _metric(port, "bucketfs_read_cache_read_bytes_total") == sum(FILES.values())
    mounts.unmount(mnt)


@pytest.mark.one_server
def test_a_cache_file_changed_between_opens_is_checked_again_and_not_handed_to_the_kernel(emulator, prefix, mounts, tmp_path):
    if os.geteuid() != 0 or not _passthrough_kernel():
        pytest.skip("FUSE passthrough needs root and a kernel built with CONFIG_FUSE_PASSTHROUGH")
    content = _fill(emulator, prefix)
    cache, port, log = tmp_path / "read-cache", free_port(), tmp_path / "first.log"
    mnt = _kernel_mount(mounts, emulator, prefix, cache, log, port)
    assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
    assert _read(f"{mnt}/d/b.bin") == content["b.bin"]  # checked whole, then read by the kernel
    assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 1
    [data_file] = [f for f in os.listdir(cache) if f.endswith(".data")]
    # Changed in place, while the mount runs and has it marked as checked: its change time moves.
    _flip(cache / data_file, 1 << 20)
    gets = len(_reads(log))
    assert _read(f"{mnt}/d/b.bin") == content["b.bin"]
    assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 1
    assert len(_reads(log)) > gets
    text = open(mounts.log_path(mnt)).read()
    assert data_file in text and "changed on disk" in text, text[-2000:]
    assert text.count("changed on disk") == 1, text[-2000:]
    mounts.unmount(mnt)


@pytest.mark.one_server
def test_a_writer_beside_an_open_the_kernel_reads_is_refused_and_a_newer_generation_is_read_anew(emulator, prefix, mounts, tmp_path):
    """The kernel would map the backing file for any mmap of a file it reads itself: a writer's
    open meanwhile fails with ETXTBSY and writes nothing; a reader of a generation replaced in the
    bucket reads it through bucketfs; once every open closed, writing works as before."""
    if os.geteuid() != 0 or not _passthrough_kernel():
        pytest.skip("FUSE passthrough needs root and a kernel built with CONFIG_FUSE_PASSTHROUGH")
    import errno
    content = _fill(emulator, prefix)
    cache, port = tmp_path / "read-cache", free_port()
    mnt = _kernel_mount(mounts, emulator, prefix, cache, tmp_path / "first.log", port)
    path = f"{mnt}/d/a.bin"
    old = content["a.bin"]
    assert _read(path) == old
    r = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(r, 4096, 0) == old[:4096]
        assert _metric(port, "bucketfs_read_cache_kernel_opens_total") == 1
        with pytest.raises(OSError) as refused:
            open(path, "r+b")
        assert refused.value.errno == errno.ETXTBSY
        with pytest.raises(OSError) as refused:
            open(path, "wb")  # O_TRUNC: refused before anything is truncated
        assert refused.value.errno == errno.ETXTBSY
        assert emulator.bucket().blob(f"{prefix}/d/a.bin").download_as_bytes() == old
        newer = os.urandom(1000)
        _put(emulator, f"{prefix}/d/a.bin", newer)
        assert _read(path) == newer  # TTL 0: the open sees the new generation, through bucketfs
        assert os.pread(r, 4096, 1 << 20) == old[1 << 20:(1 << 20) + 4096]  # pinned to the generation opened
    finally:
        os.close(r)
    with open(path, "wb") as w:
        w.write(b"written here\n")
    assert emulator.bucket().blob(f"{prefix}/d/a.bin").download_as_bytes() == b"written here\n"
    assert _read(path) == b"written here\n"
    mounts.unmount(mnt)
