#!/usr/bin/env bash
# A checkpoint written into the mount: one program writes SIZE_MIB MiB (default 2048) at
# WRITER_MBPS MB/s (default 50) in 1 MiB writes (Scripts/bench/paced_write.py), then closes the
# file. What is measured is the close: the seconds from the end of the last write to the end of
# close(2), with streamed uploads (`--stream-uploads on`: the upload goes while the file is
# written, and close sends what is left) and with the default staging (the whole upload at close).
# Target: the streamed close within 1 s of the last write; the mount's peak RSS is reported
# (memory must not grow with the file: the staged copy is on disk, a chunk at a time in memory).
#
# The link: every request waits DELAY_MS (default 20) at the bench's proxy
# (Tests/e2e/latencyproxy.py) and each connection carries at most CONN_MBPS MB/s (default 100)
# each way. A session's chunks go one request after another, each paying the delay, so a link
# whose each connection carries only the writer's own rate cannot keep up with it by any client
# (BENCH_CONN_MBPS=50 shows how far behind that leaves the upload).
#
# The server: the project's own (`gcs-test-server`), which keeps a resumable session's hashes as its
# chunks arrive and answers the last request without reading the object again, as Cloud Storage
# answers a session's last chunk. gcp-storage-emulator and fake-gcs-server spend time in
# proportion to the whole object on that last request (docs/TESTING.md, "The servers"), so on them
# no client's close can be within a second of the end of a 2 GiB upload: BENCH_CK_SERVER=fake-gcs
# runs the same rows there, to show that cost.
#
# Beside it, a writer faster than the link: `cp` of FAST_MIB MiB (default 1024) from local disk into
# a fresh mount, write and close together, each setting (streaming must not slow it).
#
# Not part of the test suite: about 3 minutes at the defaults (two 43 s writes). Environment:
# BUCKETFS_BIN (default: build release), GCS_TEST_SERVER, BENCH_SIZE_MIB, BENCH_FAST_MIB (0: no cp rows), BENCH_WRITER_MBPS,
# BENCH_DELAY_MS, BENCH_CONN_MBPS, BENCH_CK_SERVER (own, fake-gcs), BENCH_CK_PORT (the server, 9595;
# the proxy the next port), BENCH_CK_MODES ("on off": which --stream-uploads settings), BENCH_DIR,
# BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB="${BENCH_SIZE_MIB:-2048}"
WRITER_MBPS="${BENCH_WRITER_MBPS:-50}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
CONN_MBPS="${BENCH_CONN_MBPS:-100}"
SERVER_KIND="${BENCH_CK_SERVER:-own}"
PORT="${BENCH_CK_PORT:-9595}"
PROXY_PORT=$((PORT + 1))
MODES="${BENCH_CK_MODES:-on off}"
FAST_MIB="${BENCH_FAST_MIB:-1024}"
. Scripts/bench/lib.sh bucketfs-checkpoint

case "$SERVER_KIND" in
  own)
    if [ -z "${GCS_TEST_SERVER:-}" ] && [ "$(dirname "$BIN")" = "$(swift build -c release --show-bin-path 2>/dev/null)" ]; then
      swift build -c release --product gcs-test-server 2>&1 | tail -n 1 >&2
    fi
    SERVER="${GCS_TEST_SERVER:-$(dirname "$BIN")/gcs-test-server}"
    [ -x "$SERVER" ] || SERVER="$ROOT/.build/debug/gcs-test-server"
    [ -x "$SERVER" ] || { echo "bench: no gcs-test-server: swift build --build-tests builds it" >&2; exit 1; }
    BUCKET=bucketfs-checkpoint
    "$SERVER" --port "$PORT" --bucket "$BUCKET" >"$WORK/server.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 100); do grep -q "listening on" "$WORK/server.log" && break; sleep 0.1; done
    grep -q "listening on" "$WORK/server.log" || { echo "bench: gcs-test-server did not start" >&2; cat "$WORK/server.log" >&2; exit 1; }
    ;;
  fake-gcs)
    export FAKE_GCS_PORT="$PORT"
    eval "$(Scripts/fake-gcs.sh start)"
    trap 'Scripts/fake-gcs.sh stop >/dev/null 2>&1; bench_cleanup' EXIT
    BUCKET="$BUCKETFS_FAKE_GCS_BUCKET"
    ;;
  *) echo "bench: BENCH_CK_SERVER is own or fake-gcs" >&2; exit 2 ;;
esac
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS" --conn-rate "$((CONN_MBPS * 1000000))"
PROXY="http://127.0.0.1:$PROXY_PORT"
echo "bench: $SIZE_MIB MiB written at $WRITER_MBPS MB/s; link +$DELAY_MS ms a request, $CONN_MBPS MB/s a connection; server $SERVER_KIND; $BIN_LABEL; work dir $WORK" >&2

declare -A CLOSE WRITE RSS REQS OK
for mode in $MODES; do
  mnt=$(mount_bucketfs "gs://$BUCKET/ckpt-$mode" --endpoint "$PROXY" --anonymous --stream-uploads "$mode")
  pid=$(mount_pid "$mnt")
  curl -sf -o /dev/null "$PROXY/__reset"
  read -r w c md5 < <("$PY" Scripts/bench/paced_write.py "$mnt/checkpoint.bin" "$((SIZE_MIB * 1048576))" "${WRITER_MBPS}e6")
  WRITE[$mode]=$w; CLOSE[$mode]=$c
  RSS[$mode]=$(( $(awk '$1 == "VmHWM:" {print $2}' "/proc/$pid/status") / 1024 ))
  REQS[$mode]=$(proxy_counts | awk '{print $1}')
  # The object the server keeps: its md5 must be the bytes written.
  got=$("$BIN" stat --json "gs://$BUCKET/ckpt-$mode/checkpoint.bin" --endpoint "$PROXY" --anonymous 2>/dev/null \
    | "$PY" -c 'import base64, json, sys; print(base64.b64decode(json.load(sys.stdin)["md5Hash"]).hex())' || echo none)
  OK[$mode]=$([ "$got" = "$md5" ] && echo yes || echo "NO ($got, wrote $md5)")
  unmount "$mnt"
  # The next mount starts once this one's process has ended (nothing of it still uploading).
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  echo "bench: --stream-uploads $mode: writing ${WRITE[$mode]} s, close ${CLOSE[$mode]} s after the last write, peak RSS ${RSS[$mode]} MiB, ${REQS[$mode]} requests, object md5 matches: ${OK[$mode]}" >&2
done

declare -A CP
if [ "$FAST_MIB" -gt 0 ]; then
  head -c "$((FAST_MIB * 1048576))" /dev/urandom >"$WORK/fast.bin"
  for mode in $MODES; do
    mnt=$(mount_bucketfs "gs://$BUCKET/fast-$mode" --endpoint "$PROXY" --anonymous --stream-uploads "$mode")
    pid=$(mount_pid "$mnt")
    t0=$(now)
    cp "$WORK/fast.bin" "$mnt/fast.bin"
    CP[$mode]=$(elapsed "$t0" "$(now)")
    unmount "$mnt"
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "bench: --stream-uploads $mode: cp of $FAST_MIB MiB ${CP[$mode]} s" >&2
  done
fi

row() { printf '  %-50s %10s   %-36s %s\n' "$@"; }
echo
echo "== bucketfs checkpoint: $SIZE_MIB MiB written at $WRITER_MBPS MB/s, +$DELAY_MS ms a request and $CONN_MBPS MB/s a connection, $SERVER_KIND server ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), binary: $BIN_LABEL)"
echo
row "what" "close (s)" "written in (s) / peak RSS / requests" "target"
status=0
for mode in $MODES; do
  label="staged, uploaded at close (--stream-uploads off)"
  target="-"
  if [ "$mode" = on ]; then
    label="streamed while written (--stream-uploads on)"
    target=$(awk -v c="${CLOSE[$mode]}" 'BEGIN { print (c + 0 <= 1 ? "met (<= 1 s)" : "not met (<= 1 s)") }')
  fi
  row "$label" "${CLOSE[$mode]}" "${WRITE[$mode]} / ${RSS[$mode]} MiB / ${REQS[$mode]}" "$target"
  [ "${OK[$mode]}" = yes ] || { echo "  the object's md5 is not the bytes written: ${OK[$mode]}"; status=1; }
done
if [ "$FAST_MIB" -gt 0 ]; then
  for mode in $MODES; do row "cp of $FAST_MIB MiB from local disk, --stream-uploads $mode" "${CP[$mode]}" "(write and close together)" "-"; done
fi
exit "$status"
