"""A directory the kernel forgets keeps its fresh listing (docs/SEMANTICS.md §6, "A listing
outlives the kernel's forgetting"): after `find` lists a directory, the kernel may forget it and
its files (memory pressure; here its caches are dropped, as `echo 2 > drop_caches` does), and the
files opened by name right after are found in the mount's listing, with no list request, as a
training loader that lists a dataset and then opens its files expects. Run on the embedded bucket
(its request log counts the store's calls)."""
import os
import subprocess

from test_emptied_directory import drop_kernel_caches

N = 40


def test_files_opened_by_name_after_the_kernel_forgot_their_directory_cost_no_listing(bucket, tmp_path, mounts):
    for i in range(N):
        bucket.put(f"set/f{i:03d}", f"sample {i}\n")
    log = tmp_path / "requests.log"
    # A TTL no step of the test outlasts: what is measured is the FORGET, not an expiry.
    mnt = mounts.mount(bucket.src(), "--request-log", str(log), "--metadata-ttl", "600")
    names = subprocess.run(["find", mnt, "-type", "f"], capture_output=True, text=True, check=True,
                           timeout=60).stdout.split()
    assert len(names) == N
    listed = log.read_text().splitlines()
    assert any(line.startswith("list ") for line in listed), listed
    drop_kernel_caches()
    log.write_text("")
    for name in sorted(names):
        with open(name) as f:
            assert f.read() == f"sample {int(os.path.basename(name)[1:])}\n"
    lines = log.read_text().splitlines()
    lists = [line for line in lines if line.startswith("list ")]
    assert lists == [], f"{len(lists)} list requests for {N} files opened by name: {lists[:3]}"
    assert len([line for line in lines if line.startswith("read ")]) <= N, lines[:5]
