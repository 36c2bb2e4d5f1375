#!/usr/bin/env bash
# Two epochs over a data set with the read cache (docs/SEMANTICS.md §3.6, "The read cache"):
# epoch 1 through a mount with --read-cache-dir, epoch 2 through a remount with the same
# directory, then the same reads straight from the cache directory's files. Prints each one's
# MiB/s and epoch 2's media GETs (its --request-log).
#
#   Scripts/bench-read-cache.sh gs://BUCKET/PREFIX [mount options…]
#
# The data set is what PREFIX holds (e.g. 200 files of 5 MiB and one of 1 GiB); 4 readers take
# its files from one queue (READERS), reading 1 MiB at a time. Before epoch 2 and before the
# direct reads the cache files leave the page cache (posix_fadvise DONTNEED, those files only):
# both read the cache directory's disk.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE="$1"; shift
BIN="${BUCKETFS_BIN:-$PWD/.build/release/bucketfs}"
WORK="$(mktemp -d /tmp/bench-read-cache.XXXXXX)"
trap 'fusermount3 -uz "$WORK/mnt" 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/mnt"

read_all() {  # DIR: every file under it, READERS at once; prints "bytes seconds"
  python3 - "$1" "${READERS:-4}" <<'EOF'
import os, sys, time, threading, queue
root, readers = sys.argv[1], int(sys.argv[2])
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if not f.startswith("."))
# The largest file first, so that it is not the last one left while the others are done.
files.sort(key=lambda p: -os.path.getsize(p))
q = queue.Queue()
for p in files: q.put(p)
total = [0]
lock = threading.Lock()
def work():
    while True:
        try: p = q.get_nowait()
        except queue.Empty: return
        n = 0
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b: break
                n += len(b)
        with lock: total[0] += n
t = time.monotonic()
ts = [threading.Thread(target=work) for _ in range(readers)]
for x in ts: x.start()
for x in ts: x.join()
print(total[0], time.monotonic() - t)
EOF
}

mount() {
  local name="$1"; shift
  "$BIN" mount "$SOURCE" "$WORK/mnt" --read-only --read-cache-dir "$WORK/cache" --cache-dir "$WORK/staging" \
    --request-log "$WORK/$name.log" --log-file "$WORK/bucketfs.log" "$@"
}

rate() { python3 -c "import sys; b, s = map(float, sys.argv[1:]); print(f'{b / 2**20:.0f} MiB in {s:.2f} s: {b / 2**20 / s:.0f} MiB/s')" $1 $2; }

mount epoch1 "$@"
r1=$(read_all "$WORK/mnt"); echo "epoch 1 (fills the cache): $(rate $r1)"
fusermount3 -u "$WORK/mnt"; while mountpoint -q "$WORK/mnt"; do sleep 0.1; done
uncache() {  # the cache files' pages, dropped (sync first: dirty pages are not dropped)
  sync
  python3 -c '
import os, sys
for f in os.listdir(sys.argv[1]):
    fd = os.open(os.path.join(sys.argv[1], f), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$WORK/cache"
}

uncache
mount epoch2 "$@"
r2=$(read_all "$WORK/mnt"); echo "epoch 2 (from the cache):  $(rate $r2), media GETs: $(grep -c '^read ' "$WORK/epoch2.log" || true)"
fusermount3 -u "$WORK/mnt"; while mountpoint -q "$WORK/mnt"; do sleep 0.1; done
uncache
rd=$(cd "$WORK/cache" && read_all .); echo "the cache files directly:  $(rate $rd)"
python3 -c "import sys; print(f'epoch 2 / direct: {float(sys.argv[1]) / float(sys.argv[2]):.2f}')" \
  "$(echo $r2 | awk '{print $1/$2}')" "$(echo $rd | awk '{print $1/$2}')"
