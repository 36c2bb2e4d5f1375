#!/usr/bin/env bash
# mountpoint-s3's fio jobs through bucketfs, beside rclone and the limit, so a bucketfs number can
# be put next to the rows mountpoint-s3 publishes. The jobs are mountpoint-s3's own
# (github.com/awslabs/mountpoint-s3, mountpoint-s3/scripts/fio/, run by its
# scripts/fs_bench.sh and described in its doc/BENCHMARKING.md), written out with their names in
# Scripts/bench/fio_jobs.py, scaled to this machine: `size=100G` becomes BENCH_FIO_SIZE (default
# 1g: the test servers keep objects in memory) and `runtime=30s` becomes BENCH_FIO_RUNTIME
# (default 10s). Every row says so. Their published charts come from their machines and S3:
# they are not comparable in absolute terms, and no ratio to them is printed.
#
# Each job runs once per target (BENCH_FIO_TARGETS):
#   local         fio on local disk (WORK): the limit for the embedded bucket (without direct=1,
#                 which local disk refuses for 1-byte reads; the page cache is dropped instead)
#   embedded      bucketfs on an embedded bucket (WORK)
#   gs            bucketfs on gs:// (the threaded gcp-storage-emulator the other benches use)
#   gs-fake       bucketfs on gs:// on fake-gcs-server (Go, concurrent, in memory too)
#   rclone-off    `rclone mount --vfs-cache-mode off` on the same bucket and prefix
#   rclone-full   `rclone mount --vfs-cache-mode full` (its recommended mode for random reads and writes)
#   plain         a plain JSON-API client reading (or writing) the same objects with the same
#                 concurrency (Scripts/bench/fio_jobs.py plain): the limit for the gs rows
#   plain-fake    the same on fake-gcs-server: the limit for the gs-fake rows
# A read job's files are laid out once per job through a bucketfs mount (fio's own names,
# SECTION.THREAD.0), then each target reads them on a fresh mount, page cache dropped. Each row:
# the job's number as fio reports it (MiB/s for reads, writes and the mix, summed over threads as
# mountpoint-s3's fs_bench.sh sums them; ms for the latency jobs; files/s for the create jobs,
# timed on a bucket until every file is in it, each target in a directory of its own),
# the ratio to rclone-off and rclone-full (for gs) and to the limit (local for embedded, plain for
# gs, plain-fake for gs-fake; for ms, limit / it: 1 is as fast), the daemon's CPU seconds and peak RSS (VmHWM), and the
# server's CPU seconds. Not part of the test suite. At the defaults about 20-30 minutes.
#
# Environment: BUCKETFS_BIN (default: build release), BENCH_FIO_JOBS (default: a job of each
# kind: seq_read seq_read_4t seq_read_small seq_read_4t_small rand_read rand_read_small ttfb
# ttfb_small seq_write time_to_write_one_byte_file create_files_1000 mix_2r2w; `all`: every job in
# fio_jobs.py), BENCH_FIO_TARGETS (default: all eight), BENCH_FIO_SIZE, BENCH_FIO_RUNTIME,
# EMULATOR_PORT (default 9541; fake-gcs-server on the next), BENCH_BFS_OPTS, BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${BENCH_FIO_SIZE:-1g}"
RUNTIME="${BENCH_FIO_RUNTIME:-10s}"
PORT="${EMULATOR_PORT:-9541}"
BUCKET=bucketfs-fio
ENDPOINT="http://127.0.0.1:$PORT"
JOBS="${BENCH_FIO_JOBS:-seq_read seq_read_4t seq_read_small seq_read_4t_small rand_read rand_read_small ttfb ttfb_small seq_write time_to_write_one_byte_file create_files_1000 mix_2r2w}"
TARGETS="${BENCH_FIO_TARGETS:-local embedded gs gs-fake rclone-off rclone-full plain plain-fake}"
FAKE_PORT=$((PORT + 1))
FAKE_ENDPOINT="http://127.0.0.1:$FAKE_PORT"
need=()
command -v fio >/dev/null || need+=(fio)
command -v rclone >/dev/null || need+=(rclone)
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
. Scripts/bench/lib.sh bucketfs-fio
JOBSPY=(python3 "$ROOT/Scripts/bench/fio_jobs.py")
[ "$JOBS" = all ] && JOBS="$("${JOBSPY[@]}" names | tr '\n' ' ')"
T_START=$(now)
echo "bench: fio jobs ($JOBS) on $TARGETS; size=100G as $SIZE, runtime=30s as $RUNTIME; work dir $WORK" >&2

start_emulator "$PORT" "$BUCKET"
rclone_remote emu "$ENDPOINT"
GS=(--endpoint "$ENDPOINT" --anonymous)
GS_FAKE=(--endpoint "$FAKE_ENDPOINT" --anonymous)
FAKE_PID=
if [[ " $TARGETS " =~ \ (gs-fake|plain-fake)\  ]]; then
  FAKE_GCS_PORT="$FAKE_PORT" FAKE_GCS_BUCKET="$BUCKET" Scripts/fake-gcs.sh start >/dev/null
  stop_fake() { FAKE_GCS_PORT="$FAKE_PORT" Scripts/fake-gcs.sh stop >/dev/null 2>&1 || true; }
  trap 'stop_fake; bench_cleanup' EXIT
  FAKE_PID=$(cat "/tmp/bucketfs-fake-gcs-$FAKE_PORT.pid")
fi
EMB="$WORK/embedded"
"$BIN" mb "$EMB" >/dev/null
mkdir -p "$WORK/local" "$WORK/out"

mount_rclone_mode() {  # REMOTE:PATH MODE -> mount point
  local mnt; mnt="$(mktemp -d "$WORK/mnt-rclone.XXXX")"
  rclone --config "$RCLONE_CONF" mount "$1" "$mnt" --vfs-cache-mode "$2" --vfs-write-back 0s \
    --cache-dir "$mnt.cache" --log-file "$mnt.log" >/dev/null 2>&1 &
  echo "$!" >>"$WORK/pids"
  for _ in $(seq 1 400); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { echo "bench: rclone mount failed; see $mnt.log" >&2; tail -5 "$mnt.log" >&2; return 1; }
  echo "$mnt"
}
rss_kb() { [ -n "$1" ] && awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# Lays out JOB's files where TARGET reads them (untimed): fio's own layout (it writes each file
# whole) through a bucketfs mount of the same bucket (gs for the gs:// targets on the emulator,
# fake for those on fake-gcs-server), or on disk.
layout() {  # JOB TARGET_GROUP(local|embedded|gs|fake) -> nothing
  local job="$1" group="$2" mnt dir
  case "$group" in
    local) dir="$WORK/local/$job"; mkdir -p "$dir"
           fio --thread --create_only=1 --directory="$dir" --output=/dev/null "$WORK/$job.local.fio" ;;
    embedded|gs|fake)
      case "$group" in
        embedded) mnt="$(mount_bucketfs "$EMB")" ;;
        gs) mnt="$(mount_bucketfs "gs://$BUCKET" "${GS[@]}")" ;;
        fake) mnt="$(mount_bucketfs "gs://$BUCKET" "${GS_FAKE[@]}")" ;;
      esac
      mkdir -p "$mnt/$job"
      fio --thread --create_only=1 --directory="$mnt/$job" --output=/dev/null "$WORK/$job.fio"
      sync -f "$mnt/$job" 2>/dev/null || true
      unmount "$mnt" ;;
  esac
}

declare -A RES CPU RSS SRV
run_one() {  # JOB TARGET -> RES[JOB,TARGET] (and CPU, RSS, SRV)
  local job="$1" target="$2" kind mnt="" dir pid="" c0 s0 out="$WORK/out/$1.$2.json"
  kind="$("${JOBSPY[@]}" kind "$job")"
  # The server this target uses, and its process (for its CPU).
  local endpoint="$ENDPOINT" spid="$EMU_PID"
  case "$target" in *-fake) endpoint="$FAKE_ENDPOINT"; spid="$FAKE_PID" ;; esac
  s0=$(cpu_secs "$spid")
  if [ "$target" = plain ] || [ "$target" = plain-fake ]; then
    [ "$kind" = mix ] && return 0  # no plain client for the mix
    RES[$job,$target]=$(python3 "$ROOT/Scripts/bench/fio_jobs.py" plain "$job" "$endpoint" "$BUCKET" "$job" "$SIZE" "$RUNTIME")
    SRV[$job,$target]=$(awk -v a="$s0" -v b="$(cpu_secs "$spid")" 'BEGIN { printf "%.2f", b - a }')
    CPU[$job,$target]=-; RSS[$job,$target]=-
    return 0
  fi
  # A create job makes new files: each target its own directory (the same names would be
  # truncated, not created, on the bucket the gs and rclone targets share).
  local sub="$job"
  [ "$kind" = create ] && sub="$job.$target"
  case "$target" in
    local) dir="$WORK/local/$sub" ;;
    embedded) mnt="$(mount_bucketfs "$EMB")"; dir="$mnt/$sub" ;;
    gs) mnt="$(mount_bucketfs "gs://$BUCKET" "${GS[@]}")"; dir="$mnt/$sub" ;;
    gs-fake) mnt="$(mount_bucketfs "gs://$BUCKET" "${GS_FAKE[@]}")"; dir="$mnt/$sub" ;;
    rclone-off) mnt="$(mount_rclone_mode "emu:$BUCKET" off)"; dir="$mnt/$sub" ;;
    rclone-full) mnt="$(mount_rclone_mode "emu:$BUCKET" full)"; dir="$mnt/$sub" ;;
  esac
  mkdir -p "$dir" 2>/dev/null || true
  if [ -n "$mnt" ]; then
    case "$target" in rclone*) pid=$(pgrep -f -- "rclone .*mount .* $mnt " | head -1) ;; *) pid=$(mount_pid "$mnt") ;; esac
  fi
  c0=$(cpu_secs "$pid")
  drop_caches
  local jobfile="$WORK/$job.fio"
  [ "$target" = local ] && jobfile="$WORK/$job.local.fio"
  local t0; t0=$(now)
  if timeout 600 fio --thread --output-format=json --output="$out" --directory="$dir" --eta=never "$jobfile" >/dev/null 2>"$out.err"; then
    # Files made through a mount of the bucket are timed until they are all in it (rclone's
    # close returns before its upload; the project's rule for every write bench).
    if [ "$kind" = create ] && [ "$target" != local ] && [ "$target" != embedded ]; then
      python3 "$ROOT/Scripts/bench/await_objects.py" "$endpoint" "$BUCKET" "$sub/" "${job##*_}" 0 300 >/dev/null \
        || echo "bench: $job on $target: not every file reached the bucket in 300 s" >&2
    fi
    RES[$job,$target]=$("${JOBSPY[@]}" result "$job" "$out" "$(elapsed "$t0" "$(now)")")
  else
    RES[$job,$target]="failed"
    echo "bench: $job on $target failed: $(tail -2 "$out.err" | tr '\n' ' ')" >&2
  fi
  CPU[$job,$target]=$(awk -v a="$c0" -v b="$(cpu_secs "$pid")" 'BEGIN { printf "%.2f", b - a }')
  RSS[$job,$target]=$(awk -v k="$(rss_kb "$pid")" 'BEGIN { printf "%.0f", k / 1024 }')
  SRV[$job,$target]=$(awk -v a="$s0" -v b="$(cpu_secs "$spid")" 'BEGIN { printf "%.2f", b - a }')
  [ "$target" = local ] && { CPU[$job,$target]=-; RSS[$job,$target]=-; SRV[$job,$target]=-; }
  [ -n "$mnt" ] && unmount "$mnt"
  echo "bench: $job on $target: ${RES[$job,$target]} (daemon CPU ${CPU[$job,$target]} s, peak RSS ${RSS[$job,$target]} MiB, server CPU ${SRV[$job,$target]} s)" >&2
}

first_job=1
for job in $JOBS; do
  kind="$("${JOBSPY[@]}" kind "$job")"
  # A fresh emulator for each job: it keeps growing with what its uploads held, whatever is
  # deleted (killed by the OOM killer at 14 GB in the mix once), and in-memory it starts empty.
  if [ "$first_job" = 0 ] && [[ " $TARGETS " =~ \ (gs|rclone-off|rclone-full|plain)\  ]]; then
    kill "$EMU_PID" 2>/dev/null || true
    wait "$EMU_PID" 2>/dev/null || true
    start_emulator "$PORT" "$BUCKET"
  fi
  first_job=0
  "${JOBSPY[@]}" file "$job" "$SIZE" "$RUNTIME" "$WORK/$job.fio"
  "${JOBSPY[@]}" file "$job" "$SIZE" "$RUNTIME" "$WORK/$job.local.fio" local
  if [ "$kind" = read ] || [ "$kind" = mix ] || [ "$kind" = latency ] && [ -n "$("${JOBSPY[@]}" files "$job" "$SIZE")" ]; then
    echo "bench: laying out $job's files" >&2
    [[ " $TARGETS " == *" local "* ]] && layout "$job" local
    [[ " $TARGETS " == *" embedded "* ]] && layout "$job" embedded
    [[ " $TARGETS " =~ \ (gs|rclone-off|rclone-full|plain)\  ]] && layout "$job" gs
    [[ " $TARGETS " =~ \ (gs-fake|plain-fake)\  ]] && layout "$job" fake
  fi
  for target in $TARGETS; do run_one "$job" "$target"; done
  # The servers keep objects in memory (and the disk its files): each job's go once it ran.
  "${JOBSPY[@]}" clean "$ENDPOINT" "$BUCKET" "$job" || true
  [ -n "$FAKE_PID" ] && { "${JOBSPY[@]}" clean "$FAKE_ENDPOINT" "$BUCKET" "$job" || true; }
  rm -rf "${WORK:?}/local/$job"
done

ratio_to() {  # VALUE OTHER KIND -> VALUE/OTHER (throughput) or OTHER/VALUE (ms: lower is better)
  case "$1$2" in *failed*|*-*|"") echo "-"; return ;; esac
  if [ "$3" = latency ]; then ratio "$2" "$1"; else ratio "$1" "$2"; fi
}
echo
echo "== bucketfs fio benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), binary: $BIN_LABEL)"
echo "   mountpoint-s3's fio jobs (mountpoint-s3/scripts/fio/), size=100G as $SIZE, runtime=30s as $RUNTIME; one run each"
echo "   servers: the threaded gcp-storage-emulator on this machine (gs, rclone, plain); fake-gcs-server (gs-fake, plain-fake); an embedded bucket and local disk (embedded, local)"
echo
printf '| %-28s | %-11s | %10s | %-7s | %-8s | %-8s | %-8s | %-9s | %-8s | %-10s |\n' job target value unit "÷ rclone-off" "÷ rclone-full" "÷ limit" "daemon CPU" "peak RSS" "server CPU"
printf '|%s|\n' "------------------------------|-------------|------------|---------|----------|----------|----------|-----------|----------|------------"
for job in $JOBS; do
  kind="$("${JOBSPY[@]}" kind "$job")"
  case "$kind" in latency) unit=ms ;; create) unit=files/s ;; *) unit=MiB/s ;; esac
  for target in $TARGETS; do
    v="${RES[$job,$target]:-}"
    [ -n "$v" ] || continue
    r_off=-; r_full=-; r_lim=-
    case "$target" in
      gs) r_off=$(ratio_to "$v" "${RES[$job,rclone-off]:-}" "$kind"); r_full=$(ratio_to "$v" "${RES[$job,rclone-full]:-}" "$kind")
          r_lim=$(ratio_to "$v" "${RES[$job,plain]:-}" "$kind") ;;
      gs-fake) r_lim=$(ratio_to "$v" "${RES[$job,plain-fake]:-}" "$kind") ;;
      embedded) r_lim=$(ratio_to "$v" "${RES[$job,local]:-}" "$kind") ;;
    esac
    printf '| %-28s | %-11s | %10s | %-7s | %-8s | %-8s | %-8s | %-9s | %-8s | %-10s |\n' "$job" "$target" "$v" "$unit" \
      "$r_off" "$r_full" "$r_lim" "${CPU[$job,$target]:--}" "${RSS[$job,$target]:--} MiB" "${SRV[$job,$target]:--}"
  done
done
echo "   (÷: bucketfs's number over the other's for MiB/s and files/s, the other's over bucketfs's for ms: above 1 is bucketfs ahead)"
echo "   (limit: local disk for embedded, the plain client with the same concurrency on the same server for gs and gs-fake; CPU in seconds over the job)"
echo "   (whole bench $(elapsed "$T_START" "$(now)") s)"
