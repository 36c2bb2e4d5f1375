#!/usr/bin/env bash
# Write benchmarks ("Writes at the speed of the network"), printed as RATIOS against a
# peer or a limit measured in the same run, each case timed until every object is in the bucket
# at its full size (Scripts/bench/await_objects.py polls the server directly), whatever the
# mount's close returned:
#
#  (1) `tar -xf` of an archive of SMALL_N x 32 KiB into the mount, through a proxy the bench
#      starts (Tests/e2e/latencyproxy.py) that adds DELAY_MS to every request and counts them,
#      gcp-storage-emulator behind it (BENCH_TAR_SERVER=fake: fake-gcs-server): bucketfs (default mode) vs `rclone mount --vfs-cache-mode
#      writes --vfs-write-back 0s`, and bucketfs --write-back. Targets: default mode
#      >= 1x rclone, --write-back >= 5x rclone; one request a file is the floor. Beside them, the
#      limits of the same run: the same files uploaded straight to the server through the proxy
#      by a plain client (Scripts/bench/upload_many.py), one at a time (a close that waits for its
#      upload can do no better) and 8 at a time (BENCH_UPLOAD_CONCURRENCY, as --upload-concurrency).
#  (2) `cp` of one MIB MiB file into the mount vs one direct upload of it with curl to the same
#      server, on gcp-storage-emulator and on fake-gcs-server, a fresh server for each run (both
#      keep what earlier uploads left and slow down; fake-gcs-server is warmed by one upload):
#      `uploadType=media` (one request), and one streamed resumable
#      request (a session, then the whole file in one PUT: the request bucketfs sends). Target:
#      bucketfs >= 0.8 of curl (curl time / bucketfs time).
#  (3) the writing alone: `cp` of the MIB MiB file into a --write-back mount of gcp-storage-emulator,
#      timed until cp exits (the data staged; the upload follows, untimed), vs `cp` to a local
#      file in the work directory.
#  (4) `rsync -aX` of RSYNC_N x 4 KiB files (each with a user xattr when the work directory
#      takes one) into a directory of the mount that exists in the bucket and was never listed,
#      through the same proxy, with bucketfs's DEFAULT options: bucketfs default mode, bucketfs
#      --write-back, and `rclone mount` (writes cache, `--vfs-write-back RCLONE_RSYNC_WB`, 5 s,
#      rclone's default; `rsync -a`: rclone mount has no xattrs), timed until every object is in
#      the bucket; requests counted by the proxy (per file: target <= 1.1 with --write-back, where
#      rsync's rename moves the queued upload), then a second rsync of the same tree, which must
#      transfer nothing (its requests counted). With `--vfs-write-back 0s`, rclone 1.60 starts
#      the upload at close and rsync's utime and rename then race it: "source file is being
#      updated", and "corrupted on transfer: md5 hash differ \"\" vs ..." (rclone hashes its cache
#      file after the upload, which the rename has moved: the empty hash is the missing file's),
#      on gcp-storage-emulator and fake-gcs-server alike, and files are missing from the bucket.
#      BENCH_RSYNC_TTL (unset: bucketfs's default) and BENCH_RSYNC_LIST=1 (list the destination
#      first) give the earlier, friendlier setting. RSYNC_REPS (1) repetitions.
#  (5) mkdir's requests, through the proxy, on a fresh mount: `mkdir -p a/b/c` in its root
#      never listed, `mkdir` in a listed directory, `mkdir -p` of 3 levels in a listed directory.
#      Targets: 1, and 1 a level; in a directory never listed, one more: the kernel's lookup of
#      the first level, one list request (docs/SEMANTICS.md §6 says why no create does without).
#
# Starts its own servers and proxy on BENCH_EMU_PORT (9402), BENCH_FAKE_PORT (9403) and
# BENCH_PROXY_PORT (9404); unmounts and stops everything on exit. Not part of the test suite.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_MIB (256),
# BENCH_DELAY_MS (20), BENCH_SMALL_N (400), BENCH_BFS_OPTS (extra bucketfs mount options),
# BENCH_RSYNC_N (300), BENCH_RSYNC_TTL (unset), BENCH_RSYNC_LIST (0), BENCH_RSYNC_REPS (1), BENCH_RCLONE_RSYNC_WB (5s),
# BENCH_DIR, BENCH_KEEP, BENCH_ONLY (some of "tar cp write rsync mkdir": the
# sections to run; all by default), BENCH_FUSE_TRACE (1: section (1) also counts the default
# mode's FUSE requests per file, from the kernel's fuse tracepoints; needs root and tracefs).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
MIB="${BENCH_MIB:-256}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SMALL_N="${BENCH_SMALL_N:-400}"
RSYNC_N="${BENCH_RSYNC_N:-300}"
RSYNC_TTL="${BENCH_RSYNC_TTL:-}"
RSYNC_LIST="${BENCH_RSYNC_LIST:-0}"
RCLONE_RSYNC_WB="${BENCH_RCLONE_RSYNC_WB:-5s}"
RSYNC_REPS="${BENCH_RSYNC_REPS:-1}"
UPLOAD_CONC="${BENCH_UPLOAD_CONCURRENCY:-8}"  # the plain client's width: --upload-concurrency's default
EMU_PORT="${BENCH_EMU_PORT:-9402}"
FAKE_PORT="${BENCH_FAKE_PORT:-9403}"
PROXY_PORT="${BENCH_PROXY_PORT:-9404}"
BUCKET=bucketfs-writes
EMU="http://127.0.0.1:$EMU_PORT"
FAKE="http://127.0.0.1:$FAKE_PORT"
PROXY="http://127.0.0.1:$PROXY_PORT"
ONLY="${BENCH_ONLY:-tar cp write rsync mkdir}"
# The server behind the proxy for (1): emu (gcp-storage-emulator, threaded for the benches:
# Scripts/bench/emulator.py; its CPU alone is about the --write-back target), stock (the stock
# gcp-storage-emulator: one request at a time, its object table written out after every insert)
# or fake (fake-gcs-server, Go, concurrent).
TAR_SERVER="${BENCH_TAR_SERVER:-emu}"
wants() { [[ " $ONLY " == *" $1 "* ]]; }
command -v rclone >/dev/null || { echo "bench: rclone is not installed (Scripts/setup.sh installs it)" >&2; exit 1; }
if [[ " $ONLY " == *" rsync "* ]]; then
  command -v rsync >/dev/null || { echo "bench: rsync is not installed (apt-get install -y rsync)" >&2; exit 1; }
fi
. Scripts/bench/lib.sh bucketfs-writes
# rclone's client puts its paths under the endpoint it is given: fake-gcs-server serves the JSON
# API only under /storage/v1/ (gcp-storage-emulator answers at the root too).
if [ "$TAR_SERVER" = fake ]; then rclone_remote emuproxy "$PROXY/storage/v1/"; else rclone_remote emuproxy "$PROXY"; fi
declare -A RES
T_START=$(now)
next_run() { echo "r$(date +%s%N)"; }  # a fresh prefix per run (runs are made in subshells)

echo "bench: tar -x of $SMALL_N x 32 KiB at +$DELAY_MS ms, cp of $MIB MiB on two servers; $REPS repetitions; work dir $WORK" >&2
start_emulator "$EMU_PORT" "$BUCKET" "$([ "$TAR_SERVER" = stock ] && echo stock)"
if wants cp || [ "$TAR_SERVER" = fake ]; then
  FAKE_GCS_PORT="$FAKE_PORT" FAKE_GCS_BUCKET="$BUCKET" Scripts/fake-gcs.sh start >/dev/null
  stop_fake() { FAKE_GCS_PORT="$FAKE_PORT" Scripts/fake-gcs.sh stop 2>/dev/null || true; }
  trap 'stop_fake; bench_cleanup' EXIT
fi
case "$TAR_SERVER" in
  emu|stock) TAR_EP="$EMU"; TAR_PID="$EMU_PID"; TAR_LABEL=gcp-storage-emulator
       [ "$TAR_SERVER" = stock ] && TAR_LABEL="the stock gcp-storage-emulator"
       start_latency_proxy "$EMU_PORT" "$PROXY_PORT" "$DELAY_MS" --timing-log "$WORK/timing.log" ;;
  fake) TAR_EP="$FAKE"; TAR_PID="$(cat "/tmp/bucketfs-fake-gcs-$FAKE_PORT.pid")"; TAR_LABEL=fake-gcs-server
        start_latency_proxy "$FAKE_PORT" "$PROXY_PORT" "$DELAY_MS" --timing-log "$WORK/timing.log" ;;
  *) echo "bench: BENCH_TAR_SERVER is emu, stock or fake" >&2; exit 2 ;;
esac
mount_rclone_rw() {  # REMOTE:BUCKET/PATH [WRITE_BACK] -> mount point (rclone's write cache, uploads at close: 0s)
  local mnt; mnt="$(mktemp -d "$WORK/mnt-rclone.XXXX")"
  rclone --config "$RCLONE_CONF" mount "$1" "$mnt" --vfs-cache-mode writes --vfs-write-back "${2:-0s}" \
    --cache-dir "$mnt.cache" --log-file "$mnt.log" >/dev/null 2>&1 &
  echo "$!" >>"$WORK/pids"
  for _ in $(seq 1 400); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { echo "bench: rclone mount failed; see $mnt.log" >&2; tail -5 "$mnt.log" >&2; return 1; }
  echo "$mnt"
}

# --- (1) tar -x through the latency proxy ---------------------------------------------------------
if wants tar; then
  mkdir -p "$WORK/src/t"
  for i in $(seq -f '%04g' 0 $((SMALL_N - 1))); do head -c 32768 /dev/urandom >"$WORK/src/t/s$i"; done
  tar -cf "$WORK/small.tar" -C "$WORK/src" t
  rm -rf "$WORK/src"
  tar_run() {  # KIND -> "seconds untar_seconds total list metadata media other cpu_tar cpu_mount cpu_emulator cpu_proxy"
    local run mnt t0 t1 t2 m0 e0 p0 mpid
    run=$(next_run)
    case "$1" in
      bucketfs) mnt="$(mount_bucketfs "gs://$BUCKET/tar/$run" --endpoint "$PROXY" --anonymous)" ;;
      bucketfs-wb) mnt="$(mount_bucketfs "gs://$BUCKET/tar/$run" --endpoint "$PROXY" --anonymous --write-back)" ;;
      rclone) mnt="$(mount_rclone_rw "emuproxy:$BUCKET/tar/$run")" ;;
    esac
    curl -sf -o /dev/null "$PROXY/__reset"
    [ "$1" = bucketfs ] && [ "${BENCH_FUSE_TRACE:-0}" = 1 ] && fuse_trace_start "$mnt"
    # the mount's daemon (bucketfs or rclone) by its mount point, for its CPU
    mpid=$(pgrep -f -- " $mnt( |$)" | head -1)
    m0=$(cpu_secs "$mpid"); e0=$(cpu_secs "$TAR_PID"); p0=$(cpu_secs "$PROXY_PID")
    t0=$(now)
    (tar -xf "$WORK/small.tar" -C "$mnt" && times >"$WORK/times")
    t1=$(now)
    [ "$1" = bucketfs ] && [ "${BENCH_FUSE_TRACE:-0}" = 1 ] && fuse_trace_stop "$WORK/fuse-$1"
    "$PY" Scripts/bench/await_objects.py "$TAR_EP" "$BUCKET" "tar/$run/t/" "$SMALL_N" 32768 >/dev/null
    t2=$(now)
    # where the time went: with a request of the mount's at the proxy, or none (the last run's)
    "$PY" Scripts/bench/request_gaps.py "$WORK/timing.log" "$t0" "$t1" "$SMALL_N" >"$WORK/gaps-$1" || true
    local counts cpu; counts=$(proxy_counts)
    cpu="$(children_cpu "$WORK/times")"
    for pair in "$mpid $m0" "$TAR_PID $e0" "$PROXY_PID $p0"; do
      set -- $pair
      cpu="$cpu $(awk -v a="$2" -v b="$(cpu_secs "$1")" 'BEGIN { printf "%.2f", b - a }')"
    done
    unmount "$mnt"
    echo "$(elapsed "$t0" "$t2") $(elapsed "$t0" "$t1") $counts $cpu"
  }
  # BENCH_FUSE_TRACE: the kernel's fuse_request_send/_end events of one mount's connection, in a
  # tracefs instance of this bench's own (other mounts' requests are filtered out).
  TRACE_DIR=/sys/kernel/tracing/instances/bucketfs-bench-$PROXY_PORT
  fuse_trace_start() {  # MOUNTPOINT
    mkdir -p "$TRACE_DIR" 2>/dev/null && [ -d "$TRACE_DIR/events/fuse" ] \
      || { echo "bench: no fuse tracepoints (root and tracefs needed); BENCH_FUSE_TRACE ignored" >&2; return 0; }
    echo "connection == $(mountpoint -d "$1" | cut -d: -f2)" >"$TRACE_DIR/events/fuse/filter"
    echo 20000 >"$TRACE_DIR/buffer_size_kb"; echo >"$TRACE_DIR/trace"
    echo 1 >"$TRACE_DIR/events/fuse/enable"
  }
  fuse_trace_stop() {  # OUT: fuse_trace.py's summary of the requests since fuse_trace_start
    [ -d "$TRACE_DIR/events/fuse" ] || return 0
    echo 0 >"$TRACE_DIR/events/fuse/enable"
    "$PY" Scripts/bench/fuse_trace.py "$TRACE_DIR/trace" "$SMALL_N" >"$1" || true
    rmdir "$TRACE_DIR" 2>/dev/null || true
  }
  # The limits: the same files uploaded straight to the server through the same proxy by a plain
  # client, one at a time (what a mode whose close waits for its upload can do at best) and
  # UPLOAD_CONC at a time (the write-back's default concurrency), timed until all are in.
  tar -xf "$WORK/small.tar" -C "$WORK"
  direct_run() {  # CONCURRENCY -> seconds until all are in the bucket
    local run t0 t1
    run=$(next_run)
    t0=$(now)
    "$PY" Scripts/bench/upload_many.py "$PROXY" "$BUCKET" "tar/$run/t" "$WORK/t" "$1" >/dev/null
    "$PY" Scripts/bench/await_objects.py "$TAR_EP" "$BUCKET" "tar/$run/t/" "$SMALL_N" 32768 >/dev/null
    t1=$(now)
    "$PY" Scripts/bench/request_gaps.py "$WORK/timing.log" "$t0" "$t1" "$SMALL_N" >"$WORK/gaps-direct-$1" || true
    elapsed "$t0" "$t1"
  }
  # The stock emulator writes its whole object table out after every insert, so each upload costs
  # more the more objects it holds: every run gets a fresh one (in the main shell: the runs are
  # subshells), or a run would pay for the objects of the runs before it.
  fresh_stock() {
    [ "$TAR_SERVER" = stock ] || return 0
    kill "$EMU_PID" 2>/dev/null; wait "$EMU_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do curl -s -o /dev/null "$EMU/" || break; sleep 0.05; done
    start_emulator "$EMU_PORT" "$BUCKET" stock
    TAR_PID=$EMU_PID
  }
  for _ in $(seq 1 "$REPS"); do
    for kind in direct-1 "direct-$UPLOAD_CONC"; do
      fresh_stock
      s=$(direct_run "${kind#direct-}")
      echo "bench: $kind (a plain client, ${kind#direct-} at a time): $s s" >&2
      RES[tar_runs_$kind]+=" $s"
    done
    for kind in bucketfs bucketfs-wb rclone; do
      fresh_stock
      line=$(tar_run "$kind")
      echo "bench: tar -x $kind: $line (s until in the bucket, s until tar exited, requests: total list metadata media other; CPU s: tar, the mount's daemon, emulator, proxy)" >&2
      RES[tar_runs_$kind]+=" ${line%% *}"
      read -r _ _ a b c d e f g h i <<<"$line"
      RES[req_$kind]="$a $b $c $d $e"
      RES[cpu_$kind]="$f $g $h $i"
    done
  done
  for kind in bucketfs bucketfs-wb rclone direct-1 "direct-$UPLOAD_CONC"; do
    # shellcheck disable=SC2086
    RES[tar_$kind]=$(median ${RES[tar_runs_$kind]})
  done
fi

# --- (2) cp of one large file vs one direct upload ------------------------------------------------
restart_emulator() {
  kill "$EMU_PID" 2>/dev/null; wait "$EMU_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do curl -s -o /dev/null "$EMU/" || break; sleep 0.05; done
  start_emulator "$EMU_PORT" "$BUCKET"
}
restart_fake() {  # a fresh fake-gcs-server, warmed by one upload of the file (a fresh Go process's
  # first upload this large was the slowest of every kind: 2.5-4.7 s against 1.4-2.3 s after it)
  stop_fake
  FAKE_GCS_PORT="$FAKE_PORT" FAKE_GCS_BUCKET="$BUCKET" Scripts/fake-gcs.sh start >/dev/null 2>&1
  curl -sf -o /dev/null -X POST -H "Expect:" -H "Content-Type: application/octet-stream" --data-binary "@$BIG" \
    "$FAKE/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=warmup.bin"
  curl -sf -o /dev/null -X DELETE "$FAKE/storage/v1/b/$BUCKET/o/warmup.bin" || true
}
if wants cp || wants write; then
  BIG="$WORK/big.bin"
  head -c "$((MIB * 1048576))" /dev/urandom >"$BIG"
fi
if wants cp; then
  # curl's uploads send no `Expect: 100-continue`: gcp-storage-emulator (HTTP/1.0) never answers
  # one, and curl then waits a second before sending the body.
  cp_run() {  # SERVER(emu|fake) KIND(bucketfs|curl|curl-resumable) -> seconds until the object is complete
    local ep run mnt t0 t1
    case "$1" in emu) ep="$EMU" ;; fake) ep="$FAKE" ;; esac
    run=$(next_run)
    if [ "$2" = bucketfs ]; then
      mnt="$(mount_bucketfs "gs://$BUCKET/cp/$run" --endpoint "$ep" --anonymous)"
      t0=$(now)
      cp "$BIG" "$mnt/big.bin"
    elif [ "$2" = curl ]; then
      t0=$(now)
      curl -sf -o /dev/null -X POST -H "Expect:" -H "Content-Type: application/octet-stream" --data-binary "@$BIG" \
        "$ep/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=cp/$run/big.bin"
    else  # curl-resumable: a session, then the whole file in one PUT (the request bucketfs sends)
      local loc
      t0=$(now)
      loc=$(curl -sf -D - -o /dev/null -X POST -H "Content-Type: application/json" -d '{}' \
        "$ep/upload/storage/v1/b/$BUCKET/o?uploadType=resumable&name=cp/$run/big.bin" \
        | awk 'tolower($1) == "location:" { print $2 }' | tr -d '\r')
      curl -sf -o /dev/null -X PUT -H "Expect:" -H "Content-Type: application/octet-stream" --data-binary "@$BIG" "$loc"
    fi
    "$PY" Scripts/bench/await_objects.py "$ep" "$BUCKET" "cp/$run/" 1 "$((MIB * 1048576))" >/dev/null
    t1=$(now)
    [ "$2" = bucketfs ] && unmount "$mnt"
    # free the server's memory for the next run
    curl -sf -o /dev/null -X DELETE "$ep/storage/v1/b/$BUCKET/o/cp%2F$run%2Fbig.bin" || true
    elapsed "$t0" "$t1"
  }
  for server in emu fake; do
    for _ in $(seq 1 "$REPS"); do
      for kind in bucketfs curl curl-resumable; do
        # gcp-storage-emulator keeps the bytes of every resumable upload after it completes (its
        # RSS grew 256 MiB a run, DELETE or not, and each run was slower); fake-gcs-server's
        # memory backend grows too (6.7 GB after a dozen runs), and the same request then took
        # 1.2-3.6 s: a fresh server each run, for every kind alike.
        if [ "$server" = emu ]; then restart_emulator; else restart_fake; fi
        s=$(cp_run "$server" "$kind")
        echo "bench: cp $MIB MiB, $server, $kind: $s s" >&2
        RES[cp_runs_${server}_$kind]+=" $s"
      done
    done
    for kind in bucketfs curl curl-resumable; do
      # shellcheck disable=SC2086
      RES[cp_${server}_$kind]=$(median ${RES[cp_runs_${server}_$kind]})
    done
  done
fi

# --- (3) the writing alone: cp into a --write-back mount, until cp exits --------------------------
if wants write; then
  write_run() {  # KIND(bucketfs|local) -> seconds until cp exits
    local run mnt dst t0 t1
    run=$(next_run)
    if [ "$1" = bucketfs ]; then
      mnt="$(mount_bucketfs "gs://$BUCKET/w/$run" --endpoint "$EMU" --anonymous --write-back)"
      dst="$mnt/big.bin"
    else
      dst="$WORK/local-copy.bin"
    fi
    t0=$(now)
    cp "$BIG" "$dst"
    t1=$(now)
    if [ "$1" = bucketfs ]; then
      # the upload that follows is not timed, but ends before the next run
      "$PY" Scripts/bench/await_objects.py "$EMU" "$BUCKET" "w/$run/" 1 "$((MIB * 1048576))" >/dev/null
      unmount "$mnt"
    else
      rm -f "$dst"
    fi
    elapsed "$t0" "$t1"
  }
  for _ in $(seq 1 "$REPS"); do
    restart_emulator
    for kind in bucketfs local; do
      s=$(write_run "$kind")
      echo "bench: writing $MIB MiB, $kind: $s s" >&2
      RES[w_runs_$kind]+=" $s"
    done
  done
  for kind in bucketfs local; do
    # shellcheck disable=SC2086
    RES[w_$kind]=$(median ${RES[w_runs_$kind]})
  done
fi

# --- (4) rsync -aX through the latency proxy -------------------------------------------------------
if wants rsync; then
  mkdir -p "$WORK/rs/tree"
  XATTRS=yes
  for i in $(seq -f '%04g' 0 $((RSYNC_N - 1))); do
    head -c 4096 /dev/urandom >"$WORK/rs/tree/f$i.txt"
    if [ "$XATTRS" = yes ]; then setfattr -n user.origin -v "bench $i" "$WORK/rs/tree/f$i.txt" 2>/dev/null || XATTRS=no; fi
  done
  rsync_run() {  # KIND -> "seconds total list metadata media other second_total second_transferred"
    local run mnt t0 t1 opts counts second moved ttl=()
    run=$(next_run)
    opts=-aX
    [ -n "$RSYNC_TTL" ] && ttl=(--metadata-ttl "$RSYNC_TTL")
    # the destination exists in the bucket (one object), as a nightly backup's does
    curl -sf -o /dev/null -X POST -H "Content-Type: text/plain" --data-binary "kept" \
      "$TAR_EP/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=rs/$run/d/keep.txt"
    case "$1" in
      bucketfs) mnt="$(mount_bucketfs "gs://$BUCKET/rs/$run" --endpoint "$PROXY" --anonymous "${ttl[@]}")" ;;
      bucketfs-wb) mnt="$(mount_bucketfs "gs://$BUCKET/rs/$run" --endpoint "$PROXY" --anonymous "${ttl[@]}" --write-back)" ;;
      rclone) mnt="$(mount_rclone_rw "emuproxy:$BUCKET/rs/$run" "$RCLONE_RSYNC_WB")"; opts=-a ;;
    esac
    [ "$RSYNC_LIST" = 1 ] && ls "$mnt/d" >/dev/null
    curl -sf -o /dev/null "$PROXY/__reset"
    t0=$(now)
    if ! rsync "$opts" "$WORK/rs/tree/" "$mnt/d/" >"$mnt.rsync.log" 2>&1; then
      echo "bench: rsync into $1 failed: $(tail -1 "$mnt.rsync.log")" >&2
      unmount "$mnt"
      echo "failed"
      return
    fi
    if ! "$PY" Scripts/bench/await_objects.py "$TAR_EP" "$BUCKET" "rs/$run/d/f" "$RSYNC_N" 4096 120 >/dev/null; then
      echo "bench: rsync into $1: not every file reached the bucket within 120 s" >&2
      unmount "$mnt"
      echo "failed"
      return
    fi
    t1=$(now)
    counts=$(proxy_counts)
    curl -sf -o /dev/null "$PROXY/__reset"
    moved=$(rsync "$opts" --stats "$WORK/rs/tree/" "$mnt/d/" | awk -F': ' '/Number of regular files transferred/ { gsub(/,/, "", $2); print $2 }')
    second=$(proxy_counts | cut -d' ' -f1)
    unmount "$mnt"
    echo "$(elapsed "$t0" "$t1") $counts $second ${moved:-?}"
  }
  for _ in $(seq 1 "$RSYNC_REPS"); do
    for kind in bucketfs bucketfs-wb rclone; do
      line=$(rsync_run "$kind")
      echo "bench: rsync $kind: $line (s until in the bucket; requests: total list metadata media other; second run: requests, files transferred)" >&2
      [ "$line" = failed ] && { RES[rs_failed_$kind]=1; continue; }
      RES[rs_runs_$kind]+=" ${line%% *}"
      RES[rs_last_$kind]="${line#* }"
    done
  done
  for kind in bucketfs bucketfs-wb rclone; do
    # shellcheck disable=SC2086
    if [ -n "${RES[rs_runs_$kind]:-}" ]; then RES[rs_$kind]=$(median ${RES[rs_runs_$kind]}); else RES[rs_$kind]=n/a; RES[rs_last_$kind]="- - - - - - -"; fi
  done
fi

# --- (5) mkdir's requests through the proxy ---------------------------------------------------------
if wants mkdir; then
  mkdir_counts() {  # -> "fresh_mkdir_p listed_mkdir listed_mkdir_p"
    local run mnt a b c
    run=$(next_run)
    curl -sf -o /dev/null -X POST -H "Content-Type: text/plain" --data-binary "x" \
      "$TAR_EP/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=mk/$run/old.txt"
    mnt="$(mount_bucketfs "gs://$BUCKET/mk/$run" --endpoint "$PROXY" --anonymous)"
    curl -sf -o /dev/null "$PROXY/__reset"; mkdir -p "$mnt/a/b/c"; a=$(proxy_counts | cut -d' ' -f1)
    ls "$mnt" >/dev/null
    curl -sf -o /dev/null "$PROXY/__reset"; mkdir "$mnt/d"; b=$(proxy_counts | cut -d' ' -f1)
    curl -sf -o /dev/null "$PROXY/__reset"; mkdir -p "$mnt/x/y/z"; c=$(proxy_counts | cut -d' ' -f1)
    unmount "$mnt"
    echo "$a $b $c"
  }
  read -r RES[mk_fresh] RES[mk_listed] RES[mk_listed_p] <<<"$(mkdir_counts)"
fi

# --- report -----------------------------------------------------------------------------------------
cpu_sum() { awk -v n="$(nproc)" '{ s = $1 + $2 + $3 + $4; printf "%.2f+%.2f+%.2f+%.2f = %.2f (%.2f)", $1, $2, $3, $4, s, s / n }' <<<"$1"; }
row() { printf '  %-46s %12s   %-26s %8s   %s\n' "$@"; }
target() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a") print "?"; else print (r + 0 >= t + 0 ? "met" : "not met") }'; }
echo
echo "== bucketfs write benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources || echo '+changes'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS runs, binary: $BIN_LABEL)"
[ -n "${BENCH_BFS_OPTS:-}" ] && echo "   bucketfs mount options added: $BENCH_BFS_OPTS"
echo
printf '  %-46s %12s   %-26s %8s   %s\n' "what" "bucketfs" "peer / limit" "ratio" "target"
if wants tar; then
  read -r rt rl rm rd ro <<<"${RES[req_rclone]}"
  echo "(1) tar -xf of $SMALL_N x 32 KiB, +$DELAY_MS ms a request, $TAR_LABEL, until all are in the bucket"
  for kind in bucketfs bucketfs-wb; do
    read -r bt bl bm bd bo <<<"${RES[req_$kind]}"
    r=$(ratio "${RES[tar_rclone]}" "${RES[tar_$kind]}")
    if [ "$kind" = bucketfs ]; then label="default mode"; want=1; else label="--write-back"; want=5; fi
    row "time, $label vs rclone (write-back 0s)" "${RES[tar_$kind]} s" "rclone ${RES[tar_rclone]} s" "$r" ">= $want: $(target "$r" "$want")"
    if [ "$kind" = bucketfs ]; then lim=direct-1; else lim="direct-$UPLOAD_CONC"; fi
    row "  vs the same uploads by a plain client, ${lim#direct-} at a time" "" "${RES[tar_$lim]} s" \
      "$(ratio "${RES[tar_$lim]}" "${RES[tar_$kind]}")" "(the limit for this mode)"
    row "  requests, last run (list/meta/media/other)" "$bt ($bl/$bm/$bd/$bo)" "rclone $rt ($rl/$rm/$rd/$ro)" "" ""
    row "  requests per file" "$(awk -v t="$bt" -v n="$SMALL_N" 'BEGIN { printf "%.3f", t / n }')" \
      "rclone $(awk -v t="$rt" -v n="$SMALL_N" 'BEGIN { printf "%.3f", t / n }')" "" "1 a file is the floor"
    row "  CPU s, last run: tar+daemon+emulator+proxy" "$(cpu_sum "${RES[cpu_$kind]}")" "rclone $(cpu_sum "${RES[cpu_rclone]}")" "" "(sum / $(nproc) cores: a floor)"
    if [ "$kind" = bucketfs ] && [ -s "$WORK/gaps-bucketfs" ] && [ -s "$WORK/gaps-direct-1" ]; then
      # per file, last run: ms with a request at the proxy (round trip: delay + server) + ms with none (the client's own work)
      read -r _ _ _ _ gb gbr gbi <"$WORK/gaps-bucketfs"; read -r _ _ _ _ gd gdr gdi <"$WORK/gaps-direct-1"
      row "  ms per file: at the proxy + between requests" "$gbr + $gbi = $gb" "plain $gdr + $gdi = $gd" "" "(where the gap is)"
    fi
    if [ "$kind" = bucketfs ] && [ -s "$WORK/fuse-bucketfs" ]; then
      # BENCH_FUSE_TRACE, last run: FUSE requests per file, by opcode, and the kernel's ms
      # between one close's FLUSH answered and the next FLUSH sent (median)
      read -r _ fpf fgap _ <"$WORK/fuse-bucketfs"
      row "  FUSE requests per file, last run" "$fpf: $(tail -n +2 "$WORK/fuse-bucketfs" | awk '$3 >= 0.5 { printf "%s%s %s", s, $1, $3; s = ", " }')" "" "" \
        "between closes: $fgap ms (median)"
    fi
  done
fi
if wants cp; then
  echo "(2) cp of one $MIB MiB file, until the object is complete"
  for server in emu fake; do
    label="gcp-storage-emulator"; [ "$server" = fake ] && label="fake-gcs-server"
    r=$(ratio "${RES[cp_${server}_curl]}" "${RES[cp_${server}_bucketfs]}")
    row "$label: bucketfs vs one curl uploadType=media" "${RES[cp_${server}_bucketfs]} s" "curl ${RES[cp_${server}_curl]} s" "$r" ">= 0.8: $(target "$r" 0.8)"
    r=$(ratio "${RES[cp_${server}_curl-resumable]}" "${RES[cp_${server}_bucketfs]}")
    row "  vs one streamed resumable request (curl)" "" "curl ${RES[cp_${server}_curl-resumable]} s" "$r" ">= 0.8: $(target "$r" 0.8)"
  done
fi
if wants write; then
  echo "(3) writing one $MIB MiB file: cp into a --write-back mount, until cp exits (the upload follows)"
  row "bucketfs vs cp to a local file (the limit)" "${RES[w_bucketfs]} s" "local ${RES[w_local]} s" "$(ratio "${RES[w_local]}" "${RES[w_bucketfs]}")" "(no target)"
fi
if wants rsync; then
  echo "(4) rsync of $RSYNC_N x 4 KiB (user xattrs: $XATTRS) into a directory never listed, +$DELAY_MS ms a request, $TAR_LABEL, until all are in the bucket; bucketfs --metadata-ttl ${RSYNC_TTL:-5 (default)}$([ "$RSYNC_LIST" = 1 ] && echo ', listed first'), rclone --vfs-write-back $RCLONE_RSYNC_WB, medians of $RSYNC_REPS"
  read -r rt rl rm rd ro r2 rm2 <<<"${RES[rs_last_rclone]}"
  [ -n "${RES[rs_failed_rclone]:-}" ] && echo "   rclone: rsync failed (see the bench's stderr and the rclone mount log)"
  for kind in bucketfs bucketfs-wb; do
    read -r bt bl bm bd bo b2 bm2 <<<"${RES[rs_last_$kind]}"
    if [ "$kind" = bucketfs ]; then label="default mode"; else label="--write-back"; fi
    row "time, rsync -aX, $label vs rclone (rsync -a)" "${RES[rs_$kind]} s" "rclone ${RES[rs_rclone]} s" "$(ratio "${RES[rs_rclone]}" "${RES[rs_$kind]}")" "(no target)"
    row "  requests, last run (list/meta/media/other)" "$bt ($bl/$bm/$bd/$bo)" "rclone $rt ($rl/$rm/$rd/$ro)" "" ""
    pf=$(awk -v t="$bt" -v n="$RSYNC_N" 'BEGIN { printf "%.3f", t / n }')
    if [ "$kind" = bucketfs-wb ]; then want="<= 1.1: $(awk -v r="$pf" 'BEGIN { print (r <= 1.1 ? "met" : "not met") }')"; else want=""; fi
    row "  requests per file" "$pf" "rclone $(awk -v t="$rt" -v n="$RSYNC_N" 'BEGIN { printf "%.3f", t / n }')" "" "$want"
    row "  second rsync: files moved, requests" "$bm2, $b2" "rclone $rm2, $r2" "" "0 files moved"
  done
fi
if wants mkdir; then
  echo "(5) mkdir, requests (bucketfs default options, a fresh mount)"
  row "mkdir in a listed directory" "${RES[mk_listed]}" "" "" "1: $([ "${RES[mk_listed]}" = 1 ] && echo met || echo 'not met')"
  row "mkdir -p of 3 levels in a listed directory" "${RES[mk_listed_p]}" "" "" "3: $([ "${RES[mk_listed_p]}" = 3 ] && echo met || echo 'not met')"
  row "mkdir -p of 3 levels in a directory never listed" "${RES[mk_fresh]}" "" "" "4: $([ "${RES[mk_fresh]}" = 4 ] && echo met || echo 'not met') (+1: the first level's lookup)"
fi
echo "   (whole bench $(elapsed "$T_START" "$(now)") s)"
