#!/usr/bin/env bash
# The TLS mode of the read benchmark: the path real users take, HTTP/2 and HTTP/1.1 side by side
# against curl through the same TLS front, in the same run.
#
#  (1) cold sequential read of MIB MiB from the emulator through nginx (Scripts/tls-front.sh: a
#      private CA, HTTP/2 + HTTP/1.1 on one port): bucketfs with `--http-version 2` and with
#      `--http-version 1.1`, next to `curl --http2` and `curl --http1.1` fetching the same object
#      through the same port. Fresh mount per run, page cache dropped; kinds take turns. Target:
#      bucketfs / curl >= 0.9 (throughput) with the default protocol.
#
# Starts its own emulator (EMULATOR_PORT, default 9470) and front (TLS_FRONT_PORT, default 9472,
# four ports), and stops them on exit. Not part of the test suite; a few minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_MIB (256),
# BENCH_BFS_OPTS (extra mount options), BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
MIB="${BENCH_MIB:-256}"
PORT="${EMULATOR_PORT:-9470}"
FRONT_PORT="${TLS_FRONT_PORT:-9472}"
BUCKET=bucketfs-tls
ENDPOINT="http://127.0.0.1:$PORT"
. Scripts/bench/lib.sh bucketfs-tls
declare -A RES

echo "bench: ${MIB} MiB cold reads through a TLS front, HTTP/2 and HTTP/1.1; $REPS repetitions; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
FRONT_ENV=(env TLS_FRONT_PORT="$FRONT_PORT" TLS_FRONT_DIR="$WORK/front")
eval "$("${FRONT_ENV[@]}" Scripts/tls-front.sh start "127.0.0.1:$PORT")"
stop_front() { "${FRONT_ENV[@]}" Scripts/tls-front.sh stop >/dev/null 2>&1 || true; bench_cleanup; }
trap stop_front EXIT

BIG="$WORK/big.bin"
head -c "$((MIB * 1048576))" /dev/urandom >"$BIG"
BIG_MD5="$(md5sum "$BIG" | cut -d' ' -f1)"
"$PY" Scripts/bench/populate.py "$ENDPOINT" "$BUCKET" bench 0 "$BIG"
URL="$BUCKETFS_TLS_H2/storage/v1/b/$BUCKET/o/bench%2Fread%2Fbig.bin?alt=media"

run_kind() {  # KIND FIRST -> seconds
  local mnt s t0 t1
  case "$1" in
    curl-h2|curl-h1)
      local v=--http2; [ "$1" = curl-h1 ] && v=--http1.1
      [ "$2" = 1 ] && { curl -sf $v --cacert "$BUCKETFS_TLS_CA" "$URL" >"$WORK/curl.bin"; check_md5 "$WORK/curl.bin" "$BIG_MD5"; rm -f "$WORK/curl.bin"; }
      drop_caches
      t0=$(now); curl -sf $v --cacert "$BUCKETFS_TLS_CA" -o /dev/null "$URL"; t1=$(now)
      elapsed "$t0" "$t1"; return ;;
    bucketfs-h2) mnt="$(mount_bucketfs "gs://$BUCKET/bench" --endpoint "$BUCKETFS_TLS_H2" --ca-file "$BUCKETFS_TLS_CA" --anonymous --read-only --http-version 2)" ;;
    bucketfs-h1) mnt="$(mount_bucketfs "gs://$BUCKET/bench" --endpoint "$BUCKETFS_TLS_H2" --ca-file "$BUCKETFS_TLS_CA" --anonymous --read-only --http-version 1.1)" ;;
    bucketfs-auto) mnt="$(mount_bucketfs "gs://$BUCKET/bench" --endpoint "$BUCKETFS_TLS_H2" --ca-file "$BUCKETFS_TLS_CA" --anonymous --read-only)" ;;
  esac
  s=$(read_secs "$mnt/read/big.bin")
  [ "$2" = 1 ] && check_md5 "$mnt/read/big.bin" "$BIG_MD5"
  unmount "$mnt"
  echo "$s"
}

KINDS=(curl-h2 bucketfs-h2 curl-h1 bucketfs-h1 bucketfs-auto)
declare -A runs=()
for i in $(seq 1 "$REPS"); do
  for k in "${KINDS[@]}"; do runs[$k]+=" $(run_kind "$k" "$i")"; done
done
for k in "${KINDS[@]}"; do
  # shellcheck disable=SC2086
  RES[$k]=$(median ${runs[$k]})
  echo "bench: $k runs (s):${runs[$k]}" >&2
done

echo
echo "Cold sequential read of $MIB MiB through nginx with TLS (median of $REPS; MB/s; bucketfs / curl as throughput)"
echo
echo "| protocol | curl | bucketfs | bucketfs / curl |"
echo "|---|---|---|---|"
echo "| HTTP/2 (\`--http-version 2\`) | ${RES[curl-h2]} s ($(mbps "$MIB" "${RES[curl-h2]}")) | ${RES[bucketfs-h2]} s ($(mbps "$MIB" "${RES[bucketfs-h2]}")) | $(ratio "${RES[curl-h2]}" "${RES[bucketfs-h2]}") |"
echo "| HTTP/1.1 (\`--http-version 1.1\`) | ${RES[curl-h1]} s ($(mbps "$MIB" "${RES[curl-h1]}")) | ${RES[bucketfs-h1]} s ($(mbps "$MIB" "${RES[bucketfs-h1]}")) | $(ratio "${RES[curl-h1]}" "${RES[bucketfs-h1]}") |"
best=$(printf '%s\n' "${RES[curl-h2]}" "${RES[curl-h1]}" | sort -g | head -1)
echo "| default (\`auto\`) | ${best} s (the faster curl) | ${RES[bucketfs-auto]} s ($(mbps "$MIB" "${RES[bucketfs-auto]}")) | $(ratio "$best" "${RES[bucketfs-auto]}") |"
[ -n "$DROP_FAILED" ] && echo && echo "(the page cache could not be dropped: not root?)"
echo
echo "runs (s): $(for k in "${KINDS[@]}"; do printf '%s:%s; ' "$k" "${runs[$k]}"; done)"
