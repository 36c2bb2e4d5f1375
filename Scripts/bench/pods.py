"""Many pods' volumes on one machine, each served as the Cloud Storage FUSE CSI driver serves it
(Tests/e2e/csi_standin.py: the node side mounts /dev/fuse with fd=N and hands it over; the
sidecar side starts the `gcsfuse` link as uid 65534 with no capabilities):
   pods.py BIN ENDPOINT BUCKET PREFIX N WORK
prints one line per volume and a summary: time from the descriptor handed over to the first
answered `ls` of the volume's root, the daemon's RSS once all N are up and idle, and the time of
one `ls -l` of PREFIX/objects (the bench fills it with 1,000 objects) on each."""
import ctypes
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "e2e"))
from csi_standin import NodePlugin, Sidecar  # noqa: E402

BIN, ENDPOINT, BUCKET, PREFIX, N, WORK = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
NOBODY = (65534, 65534)


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    root = os.path.join(WORK, "pods")
    os.makedirs(root)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"pods", root.encode(), b"tmpfs", 0, b"mode=0755") != 0:
        sys.exit(f"cannot mount a tmpfs at {root}")
    link = os.path.join(root, "gcsfuse")
    os.symlink(BIN, link)
    tmp, buffer = os.path.join(root, "tmp", ".volumes"), os.path.join(root, "buffer")
    for d in (tmp, buffer):
        os.makedirs(d, mode=0o777)
        os.chmod(d, 0o777)
    os.chmod(os.path.dirname(tmp), 0o777)
    volumes = []
    try:
        for i in range(N):
            vd = os.path.join(tmp, f"v{i:02d}")
            os.makedirs(vd)
            os.chown(vd, *NOBODY)
            node = NodePlugin(BUCKET, os.path.join(root, "targets", f"v{i:02d}"), vd,
                              [f"custom-endpoint={ENDPOINT}/storage/v1/", "anonymous-access", f"only-dir={PREFIX}",
                               "logging:severity:warning"])
            sc = Sidecar(vd, buffer, link, prometheus_port=0, run_as=NOBODY, env={"PATH": "/usr/bin:/bin"})
            volumes.append({"node": node, "sidecar": sc, "target": node.target})
        # Every sidecar at once, as N pods starting together on one node.
        # One sidecar process takes the descriptors (as sidecar_mounter does, one volume after
        # another); each volume's clock starts when its descriptor is handed over.
        handing = threading.Lock()

        def start(v):
            with handing:
                v["sidecar"].start(os.path.join(root, os.path.basename(v["target"]) + ".log"))
            while True:
                try:
                    v["listing"] = os.listdir(v["target"])
                    break
                except OSError:
                    if v["sidecar"].proc.poll() is not None:
                        v["listing"] = None
                        break
                    time.sleep(0.005)
            v["first_ls"] = time.monotonic() - v["sidecar"].handed_at
        threads = [threading.Thread(target=start, args=(v,)) for v in volumes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [v for v in volumes if v["listing"] is None]
        if failed:
            for v in failed:
                print(f"{v['target']} never answered: exit {v['sidecar'].proc.poll()}, stderr: {v['sidecar'].errors()[-1500:]}",
                      file=sys.stderr)
            sys.exit(1)
        time.sleep(2)
        for v in volumes:
            v["rss_idle"] = rss_mb(v["sidecar"].proc.pid)
        for v in volumes:
            t = time.monotonic()
            out = subprocess.run(["ls", "-l", os.path.join(v["target"], "objects")], capture_output=True, check=True).stdout
            v["ls_l"] = time.monotonic() - t
            v["ls_l_lines"] = out.count(b"\n") - 1
            v["rss_after"] = rss_mb(v["sidecar"].proc.pid)
        print(f"{'volume':8} {'first ls (s)':>13} {'idle RSS (MB)':>14} {'ls -l 1000 (s)':>15} {'RSS after (MB)':>15}")
        for v in volumes:
            print(f"{os.path.basename(v['target']):8} {v['first_ls']:13.3f} {v['rss_idle']:14.1f} {v['ls_l']:15.3f} {v['rss_after']:15.1f}")
        f = [v["first_ls"] for v in volumes]
        r = [v["rss_idle"] for v in volumes]
        ls = [v["ls_l"] for v in volumes]
        print(f"first ls: median {statistics.median(f):.3f} s, max {max(f):.3f} s (target <= 1 s each: "
              f"{sum(x <= 1 for x in f)}/{N} met)")
        print(f"idle RSS: median {statistics.median(r):.1f} MB, max {max(r):.1f} MB (target <= 40 MB: {sum(x <= 40 for x in r)}/{N} met)")
        print(f"ls -l of {volumes[0]['ls_l_lines']} objects: median {statistics.median(ls):.3f} s, max {max(ls):.3f} s")
        codes = [v["sidecar"].stop() for v in volumes]
        errors = [v["sidecar"].errors() for v in volumes if v["sidecar"].errors()]
        print(f"SIGTERM: {sum(c == 0 for c in codes)}/{N} exited 0; error files with text: {len(errors)}")
    finally:
        for v in volumes:
            if v["sidecar"].proc is not None and v["sidecar"].proc.poll() is None:
                v["sidecar"].proc.kill()
            v["node"].unmount()
        libc.umount2(root.encode(), 2)


main()
