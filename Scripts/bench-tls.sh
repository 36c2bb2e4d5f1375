#!/usr/bin/env bash
# The TLS mode of the read benchmark: the path real users take, HTTP/2 and HTTP/1.1 side by side
# against curl through the same TLS front, in the same run.
#
#  (1) cold sequential read of MIB MiB from the emulator through nginx (Scripts/tls-front.sh: a
#      private CA, HTTP/2 + HTTP/1.1 on one port): bucketfs with `--http-version 2` and with
#      `--http-version 1.1`, next to `curl --http2` and `curl --http1.1` fetching the same object
#      through the same port. Fresh mount per run, page cache dropped; kinds take turns. Target:
#      bucketfs / curl >= 0.9 (throughput) with the default protocol.
#  (2) `tar -cf -` of SMALL files of 32 KiB (a cold mount each run) next to curl listing them and
#      fetching every one, 16 at a time (`curl -Z --parallel-max 16`: streams on one connection
#      with --http2, up to 16 connections with --http1.1; bucketfs's --max-connections is 16).
#  (3) `cp` of a CP_MIB MiB file into the mount (close uploads it: a resumable upload) next to
#      `curl -T` of the same file (one uploadType=media POST, streamed).
#  (4) `ls -l` of LS objects on a cold mount next to curl fetching the same listing pages (the
#      JSON API, 1,000 a page, one after the other as the mount does).
#  Rows (2)-(4): bucketfs with `--http-version 2`, `1.1` and `auto` on the port that offers both.
#
# Starts its own emulator (EMULATOR_PORT, default 9470) and front (TLS_FRONT_PORT, default 9472,
# four ports), and stops them on exit. Not part of the test suite; a few minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_MIB (256),
# BENCH_SMALL (200), BENCH_CP_MIB (64), BENCH_LS (2000), BENCH_BFS_OPTS (extra mount options),
# BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
MIB="${BENCH_MIB:-256}"
SMALL="${BENCH_SMALL:-200}"
CP_MIB="${BENCH_CP_MIB:-64}"
LS="${BENCH_LS:-2000}"
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
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/tar "$SMALL" 32768
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/ls "$LS" 100
CP_FILE="$WORK/cp.bin"
head -c "$((CP_MIB * 1048576))" /dev/urandom >"$CP_FILE"
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

# --- (2)-(4): tar of small files, cp of a large file, ls -l of many objects -----------------
API="$BUCKETFS_TLS_H2/storage/v1/b/$BUCKET/o"
curl_v() { [ "$1" = curl-h1 ] && echo --http1.1 || echo --http2; }
curl_list() {  # CURL_VERSION PREFIX -> every listing page, one after the other (names on stdout)
  local token="" page
  while :; do
    page=$(curl -sf "$1" --cacert "$BUCKETFS_TLS_CA" -G "$API" --data "prefix=$2/&delimiter=%2F&maxResults=1000" \
      ${token:+--data-urlencode "pageToken=$token"})
    printf '%s' "$page" | grep -o '"name": *"[^"]*"' | sed 's/^"name": *"//; s/"$//'
    token=$(printf '%s' "$page" | grep -o '"nextPageToken": *"[^"]*"' | sed 's/^"nextPageToken": *"//; s/"$//' || true)
    [ -n "$token" ] || break
  done
}
bfs_mount() {  # KIND [options...] -> mount point of gs://BUCKET/bench with that kind's protocol
  local kind="$1"; shift
  local v=(); case "$kind" in bucketfs-h2) v=(--http-version 2) ;; bucketfs-h1) v=(--http-version 1.1) ;; esac
  mount_bucketfs "gs://$BUCKET/bench" --endpoint "$BUCKETFS_TLS_H2" --ca-file "$BUCKETFS_TLS_CA" --anonymous "${v[@]}" "$@"
}
tar_kind() {  # KIND FIRST -> seconds
  local mnt t0 t1 bytes
  drop_caches
  case "$1" in
    curl-*)
      local v; v=$(curl_v "$1")
      t0=$(now)
      curl_list "$v" bench/tar | awk -v a="$API/" '{ gsub("/", "%2F"); printf "url = \"%s%s?alt=media\"\noutput = \"/dev/null\"\n", a, $0 }' >"$WORK/urls"
      curl -sf --no-progress-meter "$v" --cacert "$BUCKETFS_TLS_CA" -Z --parallel-max 16 -K "$WORK/urls"
      t1=$(now)
      [ "$(grep -c '^url' "$WORK/urls")" = "$SMALL" ] || { echo "bench: curl listed $(grep -c '^url' "$WORK/urls") of $SMALL" >&2; exit 1; }
      elapsed "$t0" "$t1"; return ;;
  esac
  mnt=$(bfs_mount "$1" --read-only)
  t0=$(now); bytes=$(tar -cf - -C "$mnt" tar | wc -c); t1=$(now)
  [ "$bytes" -ge "$((SMALL * 32768))" ] || { echo "bench: tar of $1 gave $bytes bytes" >&2; exit 1; }
  unmount "$mnt"
  elapsed "$t0" "$t1"
}
cp_kind() {  # KIND REP -> seconds (each run writes a new object)
  local mnt t0 t1 name="cp/$1-$2.bin" size
  case "$1" in
    curl-*)
      t0=$(now)
      curl -sf "$(curl_v "$1")" --cacert "$BUCKETFS_TLS_CA" -X POST -H "Content-Type: application/octet-stream" -T "$CP_FILE" \
        -o /dev/null "$BUCKETFS_TLS_H2/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=bench%2F${name//\//%2F}"
      t1=$(now) ;;
    *)
      mnt=$(bfs_mount "$1")
      mkdir -p "$mnt/cp"
      t0=$(now); cp "$CP_FILE" "$mnt/$name"; t1=$(now)
      unmount "$mnt" ;;
  esac
  size=$(curl -sf --cacert "$BUCKETFS_TLS_CA" "$API/bench%2F${name//\//%2F}" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["size"])')
  [ "$size" = "$((CP_MIB * 1048576))" ] || { echo "bench: $name has $size bytes after $1" >&2; exit 1; }
  elapsed "$t0" "$t1"
}
ls_kind() {  # KIND -> seconds (a cold mount each run)
  local mnt t0 t1 lines
  case "$1" in
    curl-*) t0=$(now); lines=$(curl_list "$(curl_v "$1")" bench/ls | wc -l); t1=$(now) ;;
    *) mnt=$(bfs_mount "$1" --read-only); t0=$(now); lines=$(ls -l "$mnt/ls" | tail -n +2 | wc -l); t1=$(now); unmount "$mnt" ;;
  esac
  [ "$lines" = "$LS" ] || { echo "bench: ls of $1 saw $lines of $LS" >&2; exit 1; }
  elapsed "$t0" "$t1"
}
KINDS2=(curl-h2 bucketfs-h2 curl-h1 bucketfs-h1 bucketfs-auto)
declare -A runs2=()
for i in $(seq 1 "$REPS"); do
  for k in "${KINDS2[@]}"; do
    runs2[tar-$k]+=" $(tar_kind "$k" "$i")"
    runs2[cp-$k]+=" $(cp_kind "$k" "$i")"
    runs2[ls-$k]+=" $(ls_kind "$k" "$i")"
  done
done
for w in tar cp ls; do
  for k in "${KINDS2[@]}"; do
    # shellcheck disable=SC2086
    RES[$w-$k]=$(median ${runs2[$w-$k]})
    echo "bench: $w $k runs (s):${runs2[$w-$k]}" >&2
  done
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
row2() {  # WORK LABEL -> one table row: curl h2, bucketfs h2, curl h1.1, bucketfs h1.1, auto (seconds; bucketfs / curl)
  local w="$1" best
  best=$(printf '%s\n' "${RES[$w-curl-h2]}" "${RES[$w-curl-h1]}" | sort -g | head -1)
  echo "| $2 | ${RES[$w-curl-h2]} s | ${RES[$w-bucketfs-h2]} s ($(ratio "${RES[$w-curl-h2]}" "${RES[$w-bucketfs-h2]}")) | ${RES[$w-curl-h1]} s | ${RES[$w-bucketfs-h1]} s ($(ratio "${RES[$w-curl-h1]}" "${RES[$w-bucketfs-h1]}")) | ${RES[$w-bucketfs-auto]} s ($(ratio "$best" "${RES[$w-bucketfs-auto]}")) |"
}
echo
echo "Other work through the same front (median of $REPS; seconds; in brackets bucketfs / curl as throughput, auto against the faster curl)"
echo
echo "| work | curl HTTP/2 | bucketfs \`2\` | curl HTTP/1.1 | bucketfs \`1.1\` | bucketfs \`auto\` |"
echo "|---|---|---|---|---|---|"
row2 tar "\`tar -cf -\` of $SMALL files of 32 KiB (curl: list + 16 at a time)"
row2 cp "\`cp\` of a $CP_MIB MiB file into the mount (curl: one streamed POST)"
row2 ls "\`ls -l\` of $LS objects, cold mount (curl: the listing pages)"
echo
echo "runs (s): $(for w in tar cp ls; do for k in "${KINDS2[@]}"; do printf '%s:%s; ' "$w-$k" "${runs2[$w-$k]}"; done; done)"
