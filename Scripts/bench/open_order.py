"""The open order of a tree walk, from `strace -f -e trace=openat,read,pread64,close` of a tool
reading DIR's files (recorded for the walk-ahead's tests, Tests/BucketFSTests/CoreWalkOrderTests.swift):
   open_order.py STRACE_FILE DIR SIZE [--inode]
-> one line of events over DIR's files, each named by its index in the sorted listing of DIR
(the bucket's order), or with --inode in DIR's inode-number order (borg's): `oN` opened, `rN` read whole (the read that brought it to SIZE bytes),
`cN` closed. A bare name (opened relative to a directory's descriptor, as borg and rsync do)
is taken to be DIR's. Lines a thread left `<unfinished ...>` are joined with their `resumed` part."""
import os
import re
import sys

path, directory, size = sys.argv[1], sys.argv[2].rstrip("/"), int(sys.argv[3])
names = sorted(os.listdir(directory), key=lambda n: n.encode())
if "--inode" in sys.argv[4:]:
    names.sort(key=lambda n: os.stat(os.path.join(directory, n)).st_ino)
index = {n: i for i, n in enumerate(names)}
base = os.path.basename(directory)
pending = {}
calls = []
for line in open(path):
    m = re.match(r"^(\d+)\s+(.*)$", line.rstrip("\n"))
    if not m:
        continue
    tid, rest = m.groups()
    if rest.endswith("<unfinished ...>"):
        pending[tid] = rest[: -len("<unfinished ...>")]
        continue
    r = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", rest)
    if r:
        rest = pending.pop(tid, r.group(1) + "(") + r.group(2)
    calls.append((tid, rest))
fds = {}  # (fd) -> [index, bytes read]
events = []
for tid, call in calls:
    m = re.match(r'^openat\([^,]+, "([^"]+)",.*\)\s+= (\d+)', call)
    if m:
        p, fd = m.group(1), int(m.group(2))
        parts = p.rstrip("/").split("/")
        # a path through DIR, or a bare name opened relative to DIR's descriptor (borg, rsync)
        if (len(parts) == 1 or parts[-2] == base) and parts[-1] in index:
            fds[fd] = [index[parts[-1]], 0]
            events.append(f"o{index[parts[-1]]}")
        else:
            fds.pop(fd, None)
        continue
    m = re.match(r"^(?:read|pread64)\((\d+),.*\)\s+= (\d+)", call)
    if m:
        fd, n = int(m.group(1)), int(m.group(2))
        if fd in fds and n > 0:
            before = fds[fd][1]
            fds[fd][1] += n
            if before < size <= fds[fd][1]:
                events.append(f"r{fds[fd][0]}")
        continue
    m = re.match(r"^close\((\d+)\)\s+= 0", call)
    if m:
        fd = int(m.group(1))
        if fd in fds:
            events.append(f"c{fds.pop(fd)[0]}")
print(" ".join(events))
