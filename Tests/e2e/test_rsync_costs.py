"""What rsync costs through a mount, by how it is run (docs/OPERATING.md, "rsync"; docs/FIREBASE.md):
N new files rsynced into an empty folder, the requests per file and the objects stored per file,
for rsync's default (a temporary name, then a rename), `rsync --inplace`, and the default rsync
on a `--write-back` mount; on firebase:// (the test server's count of v0 requests, and of
finalized uploads) and gs:// (the project's own server; the request log's lines, one per request
for files this small). Prints the table (run with -s to see it); asserts what the docs say:
every way lands each file with its bytes; the default writes each file twice (its temporary name,
then the final name: a server-side copy on gs://, a download and an upload on firebase://, whose
v0 has no copy) and costs the most; `--inplace` writes it once, and `--write-back` (the rename
comes before the upload) once, for the fewest requests."""
import os
import time

from conftest import sh
from daemons import daemon_pid
from firebase_http import BUCKET
from own_gcs import OwnServer
from test_firebase import SRC, fb  # noqa: F401 (fb: fixture)

N = 20
WAYS = {"default": ([], []), "--inplace": ([], ["--inplace"]), "--write-back": (["--write-back"], [])}


def source_tree(tmp_path):
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    for i in range(N):
        (src / f"f{i:02d}.txt").write_bytes(f"file {i}\n".encode() * 50)
    return src


def rsync(src, dst, extra):
    sh(["rsync", "-a", *extra, f"{src}/", f"{dst}/"])


def unmount_and_wait(mounts, mnt):
    """Unmounts and waits for the daemon to exit: a --write-back mount's last uploads end then."""
    pid = daemon_pid(mnt)
    mounts.unmount(mnt)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)


def firebase_row(fb, mounts, tmp_path, way):
    mount_opts, rsync_opts = WAYS[way]
    src = source_tree(tmp_path)
    folder = fb.home(f"rsync-{way.strip('-')}")
    home = mounts.mount(f"{SRC}/{fb.home()}", *mount_opts)
    os.makedirs(f"{home}/{os.path.basename(folder)}")
    with fb.server.lock:
        before = len([r for r in fb.server.requests if r[1].startswith("/v0/")])
        fb.server.finalized.clear()
    rsync(src, f"{home}/{os.path.basename(folder)}", rsync_opts)
    unmount_and_wait(mounts, home)
    with fb.server.lock:
        requests = len([r for r in fb.server.requests if r[1].startswith("/v0/")]) - before
        stored = sum(n for (b, name), n in fb.server.finalized.items() if b == BUCKET and name.startswith(folder + "/"))
    names = [n for n in fb.server.object_names(BUCKET) if n.startswith(folder + "/") and not n.endswith("/")]
    assert len(names) == N, (folder, names, fb.server.object_names(BUCKET)[:40])
    for i in range(N):
        assert fb.server.get_object(BUCKET, f"{folder}/f{i:02d}.txt").data == f"file {i}\n".encode() * 50
    return requests / N, stored / N


def gcs_row(mounts, tmp_path, way):
    mount_opts, rsync_opts = WAYS[way]
    srv = OwnServer("rsync-costs")
    try:
        src = source_tree(tmp_path)
        log = tmp_path / "requests.log"
        mnt = mounts.mount(srv.src(), *srv.options, "--request-log", log, *mount_opts)
        os.makedirs(f"{mnt}/d")
        log.write_text("")
        rsync(src, f"{mnt}/d", rsync_opts)
        unmount_and_wait(mounts, mnt)
        lines = log.read_text().splitlines()
        writes = len([l for l in lines if l.startswith(("write ", "copy "))])
        return len(lines) / N, writes / N
    finally:
        srv.stop()


def test_rsync_costs_by_way_on_both_sources(fb, mounts, tmp_path):
    fb.login_email()
    table = {}
    for way in WAYS:
        table[("firebase://", way)] = firebase_row(fb, mounts, tmp_path / f"fb-{way.strip('-')}", way)
        table[("gs://", way)] = gcs_row(mounts, tmp_path / f"gs-{way.strip('-')}", way)
    print("\nsource       way            requests/file  objects written/file")
    for (source, way), (req, stored) in table.items():
        print(f"{source:12} {way:14} {req:13.1f}  {stored:.1f}")
    for source in ("firebase://", "gs://"):
        default, inplace, write_back = (table[(source, w)] for w in WAYS)
        assert default[1] == 2 and inplace[1] == 1 and write_back[1] == 1, (source, table)
        assert write_back[0] < inplace[0] < default[0], (source, table)
