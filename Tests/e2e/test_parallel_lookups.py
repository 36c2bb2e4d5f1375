"""Lookups of one directory run at once (docs/SEMANTICS.md §6): the kernel serializes
a FUSE filesystem's lookups in one directory unless its INIT reply says FUSE_PARALLEL_DIROPS,
which libfuse 3.14 leaves out; bucketfs adds it. Eight `stat`s of names in a directory nothing
has listed, behind a proxy that holds every request 300 ms: the requests that answer them are
seen in flight together at the proxy (serialized, never more than one is)."""
import os
import threading

from latencyproxy import LatencyProxy


def _most_at_once(spans):
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_lookups_of_one_directory_reach_the_bucket_at_once(emulator, prefix, mounts, tmp_path):
    for i in range(8):
        emulator.bucket().blob(f"{prefix}/d/f{i}").upload_from_string(b"x" * (i + 1))
    timing = tmp_path / "timing.log"
    proxy = LatencyProxy(emulator.hostport, delay=0.3, timing_file=str(timing)).start()
    try:
        mnt = mounts.mount(emulator.src(prefix), "--endpoint", proxy.endpoint, "--anonymous")
        assert os.path.isdir(f"{mnt}/d")
        open(timing, "w").close()
        sizes, errors = {}, []

        def stat(i):
            try:
                sizes[i] = os.stat(f"{mnt}/d/f{i}").st_size
            except OSError as e:
                errors.append(e)

        threads = [threading.Thread(target=stat, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and sizes == {i: i + 1 for i in range(8)}
        spans = [(float(a), float(b)) for a, b, *_ in (line.split() for line in open(timing).read().splitlines())]
        assert len(spans) >= 2, spans
        assert _most_at_once(spans) >= 2, f"the lookups' requests never overlapped: {spans}"
        mounts.unmount(mnt)
    finally:
        proxy.stop()
