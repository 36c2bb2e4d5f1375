"""A prefix-only directory emptied through the mount (docs/SEMANTICS.md §3.2, "A directory
emptied here"): kept, empty, for --metadata-ttl after the rm of its last file, whether the
kernel still holds its entry or not (the kernel's caches dropped between the steps, as memory
pressure would); after the TTL, gone both ways. On the embedded bucket and each Cloud Storage
server the environment names (the `any_bucket` fixture)."""
import os
import subprocess
import time

import pytest

from conftest import sh

TTL = 2


def drop_kernel_caches():
    """The kernel forgets the dentries and inodes it holds (root only; the test needs it)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def ls_a(path):
    p = subprocess.run(["ls", "-A", path], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.split(), p.stderr


@pytest.mark.parametrize("late", [False, True], ids=["looked-up-early", "looked-up-late"])
def test_an_emptied_directory_is_kept_for_the_ttl_whatever_the_kernel_holds(any_bucket, mounts, late):
    """`late`: the lookup after the caches are dropped comes half a TTL after the rm, so the
    kernel holds an entry granted then past the directory's end and reaches it by opendir, not
    by a lookup (readdir's ENOENT would read to glibc as the directory's end: an empty `ls`)."""
    any_bucket.put("dir/old.txt", b"old")
    any_bucket.put("keep.txt", b"k")
    mnt = mounts.mount(any_bucket.src(), "--metadata-ttl", str(TTL))
    d = f"{mnt}/dir"
    assert os.listdir(d) == ["old.txt"]
    sh(["rm", f"{d}/old.txt"])
    removed = time.monotonic()
    assert not any_bucket.exists("dir/old.txt")
    # Within the TTL: an empty directory, held by the kernel or not.
    assert ls_a(d) == (0, [], "")
    drop_kernel_caches()
    if late:
        time.sleep(max(0.0, removed + TTL / 2 - time.monotonic()))
    assert ls_a(d) == (0, [], "")
    assert time.monotonic() - removed < TTL, "the steps took longer than the TTL: the test shows nothing"
    # After it: gone, held by the kernel or not.
    time.sleep(max(0.0, removed + TTL + 0.5 - time.monotonic()))
    held = ls_a(d)
    drop_kernel_caches()
    dropped = ls_a(d)
    assert held[0] != 0 and "No such file or directory" in held[2], held
    assert dropped[0] != 0 and "No such file or directory" in dropped[2], dropped
    assert "dir" not in os.listdir(mnt)
