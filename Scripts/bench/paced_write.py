"""Writes SIZE bytes into PATH at RATE bytes a second, in BLOCK-byte writes, as a program
producing a checkpoint does (Scripts/bench-checkpoint.sh). Prints one line:
`<seconds writing> <seconds from the last write's end to close's end> <md5 of the bytes>`.
The bytes are random (a 64 MiB pool, each block of it offset by the block's number), so no two
blocks are alike and nothing downstream can compress them away."""
import hashlib
import os
import sys
import time

path, size, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
block = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 20
pool = os.urandom(64 << 20)
md5 = hashlib.md5()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
start = time.monotonic()
written = 0
n = 0
while written < size:
    k = min(block, size - written)
    off = (n * 4099) % (len(pool) - block)
    data = pool[off:off + k]
    # The block's number in its first bytes: every block differs even where the pool repeats.
    data = n.to_bytes(8, "little") + data[8:] if k >= 8 else data
    due = start + (written + k) / rate
    wait = due - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]
    md5.update(data)
    written += k
    n += 1
last = time.monotonic()
os.close(fd)
closed = time.monotonic()
print(f"{last - start:.3f} {closed - last:.3f} {md5.hexdigest()}")
