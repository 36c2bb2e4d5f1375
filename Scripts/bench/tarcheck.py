"""Checks every regular file of a tar stream on standard input against a manifest, so a broken
read cannot look fast. Prints the bytes of the stream; fails unless every file of the manifest
came whole and right, and no other. (bench-reads.sh runs it on the saved output of the timed
`tar`, not as the timed consumer: Python would add a second to every run on a busy machine.)
   tarcheck.py MANIFEST <ARCHIVE
   tarcheck.py --manifest DIR >MANIFEST     # "md5 size path" lines, paths as tar names them from DIR's parent
"""
import hashlib
import os
import sys
import tarfile


class Counting:
    def __init__(self, f):
        self.f = f
        self.n = 0

    def read(self, size=-1):
        d = self.f.read(size)
        self.n += len(d)
        return d


def manifest(root):
    base = os.path.dirname(os.path.abspath(root))
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            h = hashlib.md5()
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            print(h.hexdigest(), os.path.getsize(p), os.path.relpath(p, base))


def check(path):
    want = {}
    with open(path) as f:
        for line in f:
            md5, size, name = line.rstrip("\n").split(" ", 2)
            want[name] = (md5, int(size))
    src = Counting(sys.stdin.buffer)
    seen = {}
    with tarfile.open(fileobj=src, mode="r|") as tar:
        for m in tar:
            if not m.isfile():
                continue
            h = hashlib.md5()
            r = tar.extractfile(m)
            while chunk := r.read(1 << 20):
                h.update(chunk)
            seen[m.name] = (h.hexdigest(), m.size)
    while src.read(1 << 16):  # the end-of-archive blocks and padding
        pass
    bad = sorted(n for n in want.keys() | seen.keys() if want.get(n) != seen.get(n))
    if bad:
        for n in bad[:5]:
            print(f"tarcheck: {n}: want {want.get(n)}, got {seen.get(n)}", file=sys.stderr)
        print(f"tarcheck: {len(bad)} of {len(want)} files wrong or missing", file=sys.stderr)
        return 1
    print(src.n)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--manifest":
        manifest(sys.argv[2])
        sys.exit(0)
    sys.exit(check(sys.argv[1]))
