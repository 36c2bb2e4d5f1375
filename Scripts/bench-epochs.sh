#!/usr/bin/env bash
# Datasets read every epoch, behind a link of slow streams: every connection through the bench's
# proxy (Tests/e2e/latencyproxy.py --conn-rate) carries at most CONN_MBPS MB/s and every request
# waits DELAY_MS first, as one TCP stream over a long round trip (or one request to Cloud Storage)
# does. RATIOS against limits measured in the same run:
#
#  (1) epochs: N files of SIZE_MIB MiB and one of BIG_MIB MiB, read whole by 4 readers at once
#      (`xargs -P4`, the big file first, each file by `dd bs=1M` into memory as the plain client
#      reads; `cat | wc -c` beside it), fresh mount, page cache dropped before each epoch.
#      The limit: the plain client (Scripts/bench/ranged_read.py) reading the same objects with
#      16 ranged requests of 8 MiB at once. Target: bucketfs epoch 1 >= 0.8 of it.
#      With the read cache (when this build has --read-cache-dir): epoch 2 from the cache, against
#      the same 4 readers reading the cache directory's files straight from its disk (target
#      >= 0.8, and 0 media GETs in epoch 2). `rclone mount --vfs-cache-mode full` beside it.
#  (2) one sequential reader (`dd bs=1M`; `cat | wc -c` beside it) of the big file, cache off,
#      against the plain client's 16-way read of that file. Target: >= 0.8. When the build has
#      --direct-io, the same reader through a mount with it too (reads that bypass the page
#      cache), in the same turns.
#
# Starts its own emulator (EMULATOR_PORT, default 9571) and proxy (BENCH_PROXY_PORT, default 9572),
# unmounts everything on exit. Not part of the test suite: about 5 minutes at the defaults (2.2 GB
# in the emulator's memory).
# Without the cache, runs are repeated (medians of BENCH_REPS, 3, each beside its plain client run).
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_N (200), BENCH_SIZE_MIB (5),
# BENCH_BIG_MIB (1024), BENCH_DELAY_MS (20), BENCH_CONN_MBPS (50), BENCH_CACHE_OPTS (extra options of the
# read-cache mount, e.g. --no-kernel-reads), BENCH_BFS_OPTS (extra mount
# options), BENCH_ONLY (some of "epochs single": the sections to run), BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_N:-200}"
REPS="${BENCH_REPS:-3}"
SIZE_MIB="${BENCH_SIZE_MIB:-5}"
BIG_MIB="${BENCH_BIG_MIB:-1024}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
CONN_MBPS="${BENCH_CONN_MBPS:-50}"
PORT="${EMULATOR_PORT:-9571}"
PROXY_PORT="${BENCH_PROXY_PORT:-9572}"
BUCKET=bucketfs-epochs
ENDPOINT="http://127.0.0.1:$PORT"
PROXY="http://127.0.0.1:$PROXY_PORT"
ONLY="${BENCH_ONLY:-epochs single}"
wants() { [[ " $ONLY " == *" $1 "* ]]; }
. Scripts/bench/lib.sh bucketfs-epochs
declare -A RES
T_START=$(now)
HAS_CACHE=
# (the help read whole first: grep -q stops reading, and pipefail would count the writer's SIGPIPE)
mount_help="$("$BIN" mount --help 2>/dev/null || true)"
grep -q -- --read-cache-dir <<<"$mount_help" && HAS_CACHE=1
HAS_DIRECT=
grep -q -- --direct-io <<<"$mount_help" && HAS_DIRECT=1
HAS_RCLONE=
command -v rclone >/dev/null && HAS_RCLONE=1

echo "bench: $N x $SIZE_MIB MiB + $BIG_MIB MiB behind +$DELAY_MS ms and $CONN_MBPS MB/s a connection; $BIN_LABEL; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS" --conn-rate "$((CONN_MBPS * 1000000))"
echo "bench: filling the emulator" >&2
# The big object through a resumable session in 32 MiB chunks (one multipart request of 1 GiB
# outlasts the emulator's patience).
head -c "$((BIG_MIB * 1048576))" /dev/urandom >"$WORK/big.bin"
"$PY" - "$ENDPOINT" "$BUCKET" "$WORK/big.bin" <<'PYEOF'
import sys
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
endpoint, bucket, path = sys.argv[1:]
client = storage.Client(project="bench", client_options={"api_endpoint": endpoint}, credentials=AnonymousCredentials())
blob = client.bucket(bucket).blob("bench/epochs/big/f000000")
blob.chunk_size = 32 << 20
blob.upload_from_filename(path, content_type="application/octet-stream")
PYEOF
rm -f "$WORK/big.bin"
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/epochs/set "$N" "$((SIZE_MIB * 1048576))"
NAMES=(bench/epochs/big/f000000)
for i in $(seq 0 $((N - 1))); do NAMES+=("$(printf 'bench/epochs/set/f%06d' "$i")"); done
TOTAL_MIB=$((BIG_MIB + N * SIZE_MIB))
if [ -n "$HAS_RCLONE" ]; then rclone_remote emuproxy "$PROXY"; fi

plain() {  # NAME... -> seconds of the plain 16-way ranged read through the proxy
  local line; line=$("$PY" Scripts/bench/ranged_read.py "$PROXY" "$BUCKET" 16 8 "$@")
  echo "${line%% *}"
}
media_gets() { curl -sf "$PROXY/__stats" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["media"])'; }
# The readers. `dd` (the target's): reads each file in 1 MiB reads into its memory and drops the
# bytes, as the plain client does and a data loader reading into tensors would. `cat`: `cat | wc -c`,
# as from a shell; its bytes cross a pipe into a second process, a copy and a reader the plain client
# does not pay for (on 2 cores, measured beside the dd rows). Each prints every file's byte count.
READER=dd
printf '#!/bin/sh\nfor f; do LC_ALL=C dd if="$f" of=/dev/null bs=1M 2>&1 | awk %s; done\n' "'/ bytes /{print \$1}'" >"$WORK/read-dd"
printf '#!/bin/sh\nfor f; do cat "$f" | wc -c; done\n' >"$WORK/read-cat"
chmod +x "$WORK/read-dd" "$WORK/read-cat"
read4() {  # FILE... on stdin -> seconds for 4 readers reading them whole (READER, 8 files a turn);
  # checks that the bytes read are the dataset's. The caller drops the page cache first, before
  # the files are listed: a drop while `find` lists them makes the kernel forget the directories
  # just listed, and builds before b11f551 dropped their listings with them (every name then asked
  # of the bucket one by one: 201 list requests in epoch 2, in 7 of 12 runs before this order).
  local t0 t1 got
  t0=$(now)
  got=$(xargs -P4 -n8 "$WORK/read-$READER" | awk '{s += $1} END {print s}')
  t1=$(now)
  [ "$got" = "$((TOTAL_MIB * 1048576))" ] || { echo "bench: read $got bytes, expected $((TOTAL_MIB * 1048576))" >&2; exit 1; }
  elapsed "$t0" "$t1"
}
epoch() {  # DIR -> seconds for 4 readers reading every file of DIR, the big one first
  drop_caches
  { find "$1" -type f -path '*big*'; find "$1" -type f ! -path '*big*' | sort; } | read4
}
two_epochs() {  # KEY DIR: RES[KEY_e1], RES[KEY_e2] and their media GETs (RES[KEY_e1_gets]...), one mount
  local e
  for e in e1 e2; do
    if [ "$e" = e2 ] && [ -n "${BETWEEN_EPOCHS:-}" ]; then eval "$BETWEEN_EPOCHS"; fi
    curl -sf -o /dev/null "$PROXY/__reset"
    RES[$1_$e]=$(epoch "$2")
    RES[$1_${e}_gets]=$(media_gets)
    RES[$1_${e}_reqs]=$(curl -sf "$PROXY/__stats" | "$PY" -c 'import json, sys; s = json.load(sys.stdin); print("%d (list %d, metadata %d)" % (s["total"], s["list"], s["metadata"]))')
  done
}
peak_kib() { awk '$1 == "VmHWM:" {print $2}' "/proc/$1/status"; }

# --- (1) epochs -------------------------------------------------------------------------------------
if wants epochs; then
  plains=(); bfss=(); cats=()
  for _ in $(seq 1 "$REPS"); do
    plains+=("$(plain "${NAMES[@]}")")
    for READER in dd cat; do
      mnt=$(mount_bucketfs "gs://$BUCKET/bench/epochs" --endpoint "$PROXY" --anonymous --read-only)
      curl -sf -o /dev/null "$PROXY/__reset"
      c0=$(cpu_secs "$(mount_pid "$mnt")")
      secs=$(epoch "$mnt")
      if [ "$READER" = dd ]; then
        bfss+=("$secs")
        RES[bfs_e1_cpu]=$(awk -v a="$c0" -v b="$(cpu_secs "$(mount_pid "$mnt")")" 'BEGIN { printf "%.2f", b - a }')
        RES[bfs_e1_gets]=$(media_gets)
        RES[bfs_rss]=$(( $(peak_kib "$(mount_pid "$mnt")") / 1024 ))
      else
        cats+=("$secs")
      fi
      unmount "$mnt"
    done
  done
  READER=dd
  RES[plain_all]=$(median "${plains[@]}"); RES[bfs_e1]=$(median "${bfss[@]}"); RES[cat_e1]=$(median "${cats[@]}")
  echo "bench: plain client, 16 ranged requests at once: ${plains[*]} s" >&2
  echo "bench: bucketfs (no cache) epoch 1, dd: ${bfss[*]} s, ${RES[bfs_e1_gets]} media GETs, peak RSS ${RES[bfs_rss]} MiB, the mount's CPU ${RES[bfs_e1_cpu]} s (the last); cat | wc -c: ${cats[*]} s" >&2
  if [ -n "$HAS_CACHE" ]; then
    cache="$WORK/read-cache"
    metrics="127.0.0.1:$((PROXY_PORT + 1))"
    mnt=$(mount_bucketfs "gs://$BUCKET/bench/epochs" --endpoint "$PROXY" --anonymous --read-only \
          --read-cache-dir "$cache" --read-cache-mb $((TOTAL_MIB * 2)) --metrics-address "$metrics" ${BENCH_CACHE_OPTS:-})
    # Between the epochs, the cache's files are read once from its disk, unmeasured: on this VM the
    # first read of blocks just written takes about twice as long as any later one (2.01 s against
    # 0.92 s for 1.1 GB, measured once), which would otherwise be charged to whichever of epoch 2
    # and the disk's own read below came first. Both measured reads find the disk in one state.
    BETWEEN_EPOCHS="drop_caches; find '$cache' -type f -size +1M -printf '%s %p\n' | sort -rn | cut -d' ' -f2- | read4 >/dev/null"
    two_epochs cache "$mnt"
    BETWEEN_EPOCHS=
    # Opens the kernel read from the cache's files itself (passthrough), and bytes bucketfs served from them.
    cache_metric() { curl -sf "http://$metrics/metrics" | awk -v m="bucketfs_read_cache_$1" '$1 == m {printf "%d", $2}'; }
    RES[cache_kernel]=$(cache_metric kernel_opens_total); RES[cache_served]=$(cache_metric read_bytes_total)
    RES[cache_rss]=$(( $(peak_kib "$(mount_pid "$mnt")") / 1024 ))
    unmount "$mnt"
    # The same reads, by the same readers, straight from the cache directory's disk: its files
    # over 1 MiB (the entries; their bytes must be the dataset's), the largest first.
    drop_caches
    RES[disk]=$(find "$cache" -type f -size +1M -printf '%s %p\n' | sort -rn | cut -d' ' -f2- | read4)
    echo "bench: bucketfs with the read cache: epoch 1 ${RES[cache_e1]} s (${RES[cache_e1_gets]} media GETs), epoch 2 ${RES[cache_e2]} s (${RES[cache_e2_gets]} media GETs); the cache's disk ${RES[disk]} s" >&2
  fi
  if [ -n "$HAS_RCLONE" ]; then
    mnt="$(mktemp -d "$WORK/mnt-rclone.XXXX")"
    rclone --config "$RCLONE_CONF" mount "emuproxy:$BUCKET/bench/epochs" "$mnt" --read-only --vfs-cache-mode full \
      --cache-dir "$WORK/rclone-cache" --vfs-cache-max-size "$((TOTAL_MIB * 2))M" --log-file "$mnt.log" >/dev/null 2>&1 &
    echo "$!" >>"$WORK/pids"
    for _ in $(seq 1 400); do mountpoint -q "$mnt" && break; sleep 0.05; done
    two_epochs rc "$mnt"
    unmount "$mnt"
    echo "bench: rclone --vfs-cache-mode full: epoch 1 ${RES[rc_e1]} s (${RES[rc_e1_gets]} media GETs), epoch 2 ${RES[rc_e2]} s (${RES[rc_e2_gets]} media GETs)" >&2
  fi
fi

# --- (2) one sequential reader of the big file, cache off -------------------------------------------
one_reader() {  # KEY [mount options...]: RES[KEY_secs] of READER of the big file, RES[KEY_cpu], RES[KEY_gets]
  # (not called in a subshell: it sets RES)
  local key="$1" mnt c0 t0 got secs; shift
  mnt=$(mount_bucketfs "gs://$BUCKET/bench/epochs" --endpoint "$PROXY" --anonymous --read-only "$@")
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  c0=$(cpu_secs "$(mount_pid "$mnt")")
  t0=$(now)
  got=$("$WORK/read-$READER" "$mnt/big/f000000")
  secs=$(elapsed "$t0" "$(now)")
  RES[${key}_cpu]=$(awk -v a="$c0" -v b="$(cpu_secs "$(mount_pid "$mnt")")" 'BEGIN { printf "%.2f", b - a }')
  RES[${key}_gets]=$(media_gets)
  unmount "$mnt"
  [ "$got" = "$((BIG_MIB * 1048576))" ] || { echo "bench: read $got bytes of the big file" >&2; exit 1; }
  RES[${key}_secs]=$secs
}
if wants single; then
  plains=(); bfss=(); directs=(); cats=()
  for _ in $(seq 1 "$REPS"); do
    plains+=("$(plain bench/epochs/big/f000000)")
    READER=dd one_reader bfs_big
    bfss+=("${RES[bfs_big_secs]}")
    READER=cat one_reader cat_big
    cats+=("${RES[cat_big_secs]}")
    if [ -n "$HAS_DIRECT" ]; then
      one_reader direct_big --direct-io
      directs+=("${RES[direct_big_secs]}")
    fi
  done
  RES[plain_big]=$(median "${plains[@]}"); RES[bfs_big]=$(median "${bfss[@]}"); RES[cat_big]=$(median "${cats[@]}")
  echo "bench: one reader of $BIG_MIB MiB: bucketfs, dd: ${bfss[*]} s (${RES[bfs_big_gets]} media GETs and the mount's CPU ${RES[bfs_big_cpu]} s in the last); cat | wc -c: ${cats[*]} s; plain 16-way ${plains[*]} s" >&2
  if [ -n "$HAS_DIRECT" ]; then
    RES[direct_big]=$(median "${directs[@]}")
    echo "bench: one reader of $BIG_MIB MiB with --direct-io: ${directs[*]} s (${RES[direct_big_gets]} media GETs and the mount's CPU ${RES[direct_big_cpu]} s in the last)" >&2
  fi
fi

# --- report -------------------------------------------------------------------------------------------
row() { printf '  %-58s %10s   %-26s %6s   %s\n' "$@"; }
target() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a" || r == "") print "?"; else print (r + 0 >= t + 0 ? "met" : "not met") }'; }
mbs() { mbps "$1" "$2"; }
echo
echo "== bucketfs epochs behind +$DELAY_MS ms and $CONN_MBPS MB/s a connection (medians of $REPS without the cache; $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), binary: $BIN_LABEL)"
[ -n "$DROP_FAILED" ] && echo "   (could not drop the page cache: local-disk reads may be warm)"
# A VM that hands freed memory back to its host at once: the first touch of a page after it was
# freed is a fault in the host too, paid by the kernel's copies into fresh page-cache pages (reads
# through any FUSE mount) and not by the plain client, whose buffers stay warm.
reporting=/sys/module/page_reporting/parameters/min_free_ms
if [ -r "$reporting" ] && [ "$(cat "$reporting")" = 0 ]; then
  echo "   (this VM gives freed memory back to its host at once (page_reporting min_free_ms 0): fresh page-cache pages cost a host fault each)"
fi
[ -n "${BENCH_BFS_OPTS:-}" ] && echo "   bucketfs mount options added: $BENCH_BFS_OPTS"
echo
row "what" "seconds" "against (seconds)" "ratio" "target"
if wants epochs; then
  r=$(ratio "${RES[plain_all]}" "${RES[bfs_e1]}")
  row "epoch 1, 4 readers, no cache ($(mbs "$TOTAL_MIB" "${RES[bfs_e1]}") MB/s)" "${RES[bfs_e1]}" "plain 16-way ${RES[plain_all]}" "$r" "$(target "$r" 0.8) (>= 0.8)"
  row "  the mount's CPU in the last run (seconds)" "${RES[bfs_e1_cpu]}" "" "" ""
  row "  the same, readers \`cat | wc -c\`" "${RES[cat_e1]}" "plain 16-way ${RES[plain_all]}" "$(ratio "${RES[plain_all]}" "${RES[cat_e1]}")" ""
  if [ -n "$HAS_CACHE" ]; then
    r=$(ratio "${RES[plain_all]}" "${RES[cache_e1]}")
    row "epoch 1, 4 readers, read cache filling" "${RES[cache_e1]}" "plain 16-way ${RES[plain_all]}" "$r" "$(target "$r" 0.8) (>= 0.8)"
    r=$(ratio "${RES[disk]}" "${RES[cache_e2]}")
    row "epoch 2, 4 readers, from the read cache" "${RES[cache_e2]}" "cache dir's disk ${RES[disk]}" "$r" "$(target "$r" 0.8) (>= 0.8)"
    row "  media GETs in epoch 2 (epoch 1: ${RES[cache_e1_gets]})" "${RES[cache_e2_gets]}" "" "" "$([ "${RES[cache_e2_gets]}" = 0 ] && echo met || echo "not met") (0)"
    row "  requests in epoch 2" "${RES[cache_e2_reqs]}" "" "" ""
    row "  opens the kernel read itself / bytes bucketfs read from the cache" "${RES[cache_kernel]:-?} / ${RES[cache_served]:-?}" "" "" ""
    row "  peak RSS of the mount (MiB; no cache: ${RES[bfs_rss]})" "${RES[cache_rss]}" "" "" ""
  else
    row "read cache" "n/a" "this build has no --read-cache-dir" "" "?"
  fi
  if [ -n "$HAS_RCLONE" ]; then
    row "rclone --vfs-cache-mode full: epoch 1 / epoch 2" "${RES[rc_e1]} / ${RES[rc_e2]}" "media GETs ${RES[rc_e1_gets]} / ${RES[rc_e2_gets]}" "" ""
  fi
fi
if wants single; then
  r=$(ratio "${RES[plain_big]}" "${RES[bfs_big]}")
  row "one reader of $BIG_MIB MiB, no cache ($(mbs "$BIG_MIB" "${RES[bfs_big]}") MB/s)" "${RES[bfs_big]}" "plain 16-way ${RES[plain_big]}" "$r" "$(target "$r" 0.8) (>= 0.8)"
  row "  the mount's CPU in the last run (seconds)" "${RES[bfs_big_cpu]}" "" "" ""
  row "  the same, reader \`cat | wc -c\`" "${RES[cat_big]}" "plain 16-way ${RES[plain_big]}" "$(ratio "${RES[plain_big]}" "${RES[cat_big]}")" ""
  if [ -n "$HAS_DIRECT" ]; then
    r=$(ratio "${RES[plain_big]}" "${RES[direct_big]}")
    row "one reader of $BIG_MIB MiB, no cache, --direct-io ($(mbs "$BIG_MIB" "${RES[direct_big]}") MB/s)" "${RES[direct_big]}" "plain 16-way ${RES[plain_big]}" "$r" "$(target "$r" 0.8) (>= 0.8)"
    row "  the mount's CPU in the last run (seconds)" "${RES[direct_big_cpu]}" "" "" ""
  fi
fi
echo "   total $(elapsed "$T_START" "$(now)") s"
