#!/usr/bin/env bash
# Cold `ls -l` of one directory of N objects (BENCH_LS, default "10000 100000"; add 1000000 where
# the machine allows) behind DELAY_MS per request (BENCH_DELAY_MS, default 20): bucketfs (which
# lists name ranges at once, docs/SEMANTICS.md §6) vs `rclone mount`, in the same run, printed as
# the ratio rclone time / bucketfs time, with each one's list requests (counted by the proxy),
# bucketfs's memory (VmHWM peak and VmRSS after), and whether every name showed.
#
# The objects come from a formula (Tests/e2e/formula_server.py: a JSON API server whose listings
# of N objects are made, never uploaded; checked against fake-gcs-server by
# Tests/e2e/test_listing.py), behind Tests/e2e/latencyproxy.py. Target: ≥ 3 at 100,000 with
# bucketfs's RSS ≤ 150 MB.
#
# Ports: LISTING_PORT (default 9150, the formula server) and LISTING_PORT + 1 (the proxy).
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_DIR (a fresh temp dir),
# BENCH_BFS_OPTS (extra bucketfs options, e.g. "--list-concurrency 8"), FORMULA_PROCESSES (the
# formula server's processes, default 2). Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${BENCH_LS:-10000 100000}"
REPS="${BENCH_REPS:-3}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
PORT="${LISTING_PORT:-9150}"
PROXY_PORT=$((PORT + 1))
PROXY="http://127.0.0.1:$PROXY_PORT"
BUCKET=bench-listing

command -v rclone >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null; }
. Scripts/bench/lib.sh bench-listing
rclone_remote formula "$PROXY"

families=()
for n in $SIZES; do families+=(--family "ls$n/:$n"); done
"$PY" Tests/e2e/formula_server.py --port "$PORT" --bucket "$BUCKET" --processes "${FORMULA_PROCESSES:-2}" "${families[@]}" \
  >"$WORK/formula.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/storage/v1/b/$BUCKET" && break; sleep 0.1; done
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS"
declare -A RES

# One cold listing: prints "seconds names list-requests"; for bucketfs also sets RES[hwm_N], RES[rss_N].
ls_once() {  # KIND N
  local kind="$1" n="$2" mnt t0 t1 lines pid counts
  if [ "$kind" = bucketfs ]; then mnt=$(mount_bucketfs "gs://$BUCKET" --endpoint "$PROXY" --anonymous --read-only --metadata-ttl 600)
  else mnt=$(mount_rclone "formula:$BUCKET"); fi
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  t0=$(now); lines=$(ls -l "$mnt/ls$n" | grep -c '^-' || true); t1=$(now)
  counts=$(proxy_counts "$PROXY")
  if [ "$kind" = bucketfs ]; then
    pid=$(mount_pid "$mnt")
    echo "$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$pid/status") $(awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status")" >"$WORK/mem-$n"
  fi
  unmount "$mnt"
  echo "$(elapsed "$t0" "$t1") $lines $(echo "$counts" | awk '{print $2}')"
}

for n in $SIZES; do
  declare -A runs=()
  for _ in $(seq 1 "$REPS"); do
    # Kinds take turns, so a slow spell of the machine falls on both.
    for kind in bucketfs rclone; do
      read -r secs shown lists < <(ls_once "$kind" "$n")
      runs[$kind]+=" $secs"
      RES[shown_${kind}_$n]=$shown
      RES[lists_${kind}_$n]=$lists
      [ "$kind" = bucketfs ] && read -r RES[hwm_$n] RES[rss_$n] <"$WORK/mem-$n"
      echo "bench: ls -l of $n, $kind: $secs s, $shown names, $lists list requests" >&2
    done
  done
  for kind in bucketfs rclone; do
    # shellcheck disable=SC2086
    RES[ls_${kind}_$n]=$(median ${runs[$kind]})
  done
  unset runs
done

echo
echo "== bucketfs listing benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS cold runs, ${DELAY_MS} ms per request)"
echo
for n in $SIZES; do
  printf '  N=%-8s bucketfs %8.3f s (%s lists, %s/%s names)   rclone %8.3f s (%s lists, %s/%s names)   ratio rclone/bucketfs %s   bucketfs memory: peak %s MB, after %s MB\n' \
    "$n" "${RES[ls_bucketfs_$n]}" "${RES[lists_bucketfs_$n]}" "${RES[shown_bucketfs_$n]}" "$n" \
    "${RES[ls_rclone_$n]}" "${RES[lists_rclone_$n]}" "${RES[shown_rclone_$n]}" "$n" \
    "$(ratio "${RES[ls_rclone_$n]}" "${RES[ls_bucketfs_$n]}")" "${RES[hwm_$n]}" "${RES[rss_$n]}"
done
for n in $SIZES; do
  [ "${RES[shown_bucketfs_$n]}" -eq "$n" ] || { echo "bench: bucketfs showed ${RES[shown_bucketfs_$n]} of $n names" >&2; exit 1; }
done
