"""The read cache on local disk (docs/SEMANTICS.md §3.6, "The read cache"), through a real mount
of a Cloud Storage server: what was read is read again through a remount with no media GET and
the right bytes; an object replaced in the bucket is read anew; a cache file altered on disk is
not served; a cache disk that fills up costs the cache, never the bytes. Media GETs are counted in
the mount's --request-log ("read NAME": one line per ranged GET)."""
import os
import subprocess
import uuid

import pytest

from conftest import sh


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
    with open(cache / data_file, "r+b") as f:
        f.seek(4 << 20)
        b = f.read(1)
        f.seek(4 << 20)
        f.write(bytes([b[0] ^ 0x55]))
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
        subprocess.run(["umount", str(cache)], capture_output=True)


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
