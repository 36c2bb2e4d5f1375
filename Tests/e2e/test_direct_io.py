"""`--direct-io` (docs/SEMANTICS.md §3.6, "Reads that bypass the page cache"), through a real mount
of a Cloud Storage server: a reader's bytes come to bucketfs at every read, so a second read of a
file asks the bucket again where the default mount answers it from the kernel's page cache; the
bytes are the object's either way, and a shared `mmap` of a file open that way reads them too.
Media GETs are counted in the mount's --request-log ("read NAME": one line per ranged GET)."""
import mmap
import os
import platform

import pytest


def _reads(log):
    if not os.path.exists(log):
        return 0
    return len([line for line in open(log).read().splitlines() if line.startswith("read ")])


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.one_server
@pytest.mark.parametrize("direct", [False, True], ids=["page-cache", "direct-io"])
def test_a_second_read_asks_the_bucket_again_only_with_direct_io(emulator, prefix, mounts, tmp_path, direct):
    data = os.urandom(3 << 20)
    emulator.bucket().blob(f"{prefix}/set/a.bin").upload_from_string(data)
    log = tmp_path / "requests.log"
    mnt = mounts.mount(emulator.src(prefix), "--read-only", "--request-log", str(log), *(["--direct-io"] if direct else []))
    assert _read(f"{mnt}/set/a.bin") == data
    first = _reads(log)
    assert first >= 1
    assert _read(f"{mnt}/set/a.bin") == data
    again = _reads(log) - first
    if direct:
        assert again >= 1, "a re-read under --direct-io was answered without bucketfs"
    else:
        assert again == 0, f"a re-read of the same generation cost {again} media GETs (the page cache kept nothing)"


def _kernel_at_least(major, minor):
    try:
        got = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return got >= (major, minor)


@pytest.mark.one_server
@pytest.mark.skipif(not _kernel_at_least(6, 6), reason="shared mmaps of FOPEN_DIRECT_IO files need Linux 6.6")
def test_a_shared_mmap_of_a_direct_io_file_reads_its_bytes(emulator, prefix, mounts, tmp_path):
    data = os.urandom((1 << 20) + 12345)
    emulator.bucket().blob(f"{prefix}/m/a.bin").upload_from_string(data)
    mnt = mounts.mount(emulator.src(prefix), "--read-only", "--direct-io")
    with open(f"{mnt}/m/a.bin", "rb") as f:
        # Python's mmap is MAP_SHARED: refused with ENODEV unless the mount said the kernel may.
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            assert m[:] == data
        # and read(2) through the same open still gives the bytes
        assert f.read() == data
