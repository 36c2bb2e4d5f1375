"""The bucketfs process serving a mount point, found by its command line (`bucketfs mount …
MOUNTPOINT … --foreground`, which a background mount re-executes itself as). Shared by the tests
and by the stress and soak scripts."""
import os


def daemon_of(mnt):
    """(pid, command line as bytes) of the process serving `mnt`, or None."""
    want = str(mnt).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and want in args and b"--foreground" in args:
            return int(pid), b" ".join(args)
    return None


def daemon_pid(mnt):
    """The pid of the process serving `mnt`, or None."""
    found = daemon_of(mnt)
    return found[0] if found else None
