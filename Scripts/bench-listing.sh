#!/usr/bin/env bash
# Cold `ls -l` of one directory of N objects (BENCH_LS, default "10000 100000"; add 1000000 where
# the machine allows) behind DELAY_MS per request (BENCH_DELAY_MS, default 20): bucketfs (which
# lists name ranges at once, docs/SEMANTICS.md §6) vs `rclone mount`, in the same run, printed as
# the ratio rclone time / bucketfs time, with each one's list requests (counted by the proxy),
# bucketfs's memory (VmHWM peak and VmRSS after), and whether every name showed. A third row, the
# plain client (Scripts/bench/list_ranges.py: the same pages, cut where the formula says, 16
# ranges at once through the same proxy, every page parsed), is the physical limit of this setup:
# what the formula server and the proxy allow. Each row's CPU seconds are printed too: the
# lister's own (the bucketfs daemon, rclone, the plain client), the formula server's and the
# proxy's, so that a run on a loaded machine still says which part is the bound.
#
# The objects come from a formula (Tests/e2e/formula_server.py: a JSON API server whose listings
# of N objects are made, never uploaded; checked against fake-gcs-server by
# Tests/e2e/test_listing.py), behind Tests/e2e/latencyproxy.py. Target: ≥ 3 at 100,000 with
# bucketfs's RSS ≤ 150 MB.
#
# Ports: LISTING_PORT (default 9150, the formula server) and LISTING_PORT + 1 (the proxy).
# Environment: BENCH_KINDS (default "bucketfs rclone plain"; e.g. "bucketfs plain" at 1,000,000),
# BUCKETFS_BIN (default: build release, `swift build -c release`), BENCH_REPS (3), BENCH_DIR (a fresh temp dir),
# BENCH_BFS_OPTS (extra bucketfs options, e.g. "--list-concurrency 8"), FORMULA_PROCESSES (the
# formula server's processes, default 2). Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${BENCH_LS:-10000 100000}"
REPS="${BENCH_REPS:-3}"
KINDS="${BENCH_KINDS:-bucketfs rclone plain}"
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
FORMULA_PID=${PIDS[0]}
declare -A RES

# CPU seconds of the formula server (its processes) and of the proxy so far.
server_cpu() {
  local total=0 p
  for p in "$FORMULA_PID" $(pgrep -P "$FORMULA_PID"); do total=$(awk -v a="$total" -v b="$(cpu_secs "$p")" 'BEGIN { printf "%.2f", a + b }'); done
  echo "$total $(cpu_secs "$PROXY_PID")"
}
delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# One cold listing: prints "seconds names list-requests lister-cpu server-cpu proxy-cpu"; for
# bucketfs also writes WORK/mem-N (peak and current RSS).
ls_once() {  # KIND N
  local kind="$1" n="$2" mnt t0 t1 lines pid counts own=0 s0 p0 s1 p1 c0
  case "$kind" in
    bucketfs) mnt=$(mount_bucketfs "gs://$BUCKET" --endpoint "$PROXY" --anonymous --read-only --metadata-ttl 600)
              pid=$(mount_pid "$mnt") ;;
    rclone) mnt=$(mount_rclone "formula:$BUCKET"); pid=$(tail -1 "$WORK/pids") ;;
  esac
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  read -r s0 p0 < <(server_cpu)
  if [ "$kind" = plain ]; then
    # Its own time: from its first request to its last page parsed (the interpreter's start left out).
    read -r secs lines _ own < <("$PY" "$ROOT/Scripts/bench/list_ranges.py" "$PROXY" "$BUCKET" "ls$n/" "$n" 16)
    t0=0 t1=$secs
  else
    c0=$(cpu_secs "$pid")
    t0=$(now); lines=$(ls -l "$mnt/ls$n" | grep -c '^-' || true); t1=$(now)
    own=$(delta "$c0" "$(cpu_secs "$pid")")
  fi
  read -r s1 p1 < <(server_cpu)
  counts=$(proxy_counts "$PROXY")
  if [ "$kind" = bucketfs ]; then
    echo "$(awk '/VmHWM/ {print $2}' "/proc/$pid/status") $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" >"$WORK/mem-$n"
  fi
  [ "$kind" = plain ] || unmount "$mnt"
  echo "$(elapsed "$t0" "$t1") $lines $(echo "$counts" | awk '{print $2}') $own $(delta "$s0" "$s1") $(delta "$p0" "$p1")"
}

# kB -> "N MiB (M MB)": MiB as kB / 1024, MB as kB × 1,024 / 10^6 (the target is in MB).
mem_text() { awk -v k="$1" 'BEGIN { printf "%.1f MiB (%.1f MB)", k / 1024, k * 1024 / 1e6 }'; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $SIZES; do
  declare -A runs=() cpus=()
  for _ in $(seq 1 "$REPS"); do
    # Kinds take turns, so a slow spell of the machine falls on all of them.
    for kind in $KINDS; do
      read -r secs shown lists own server proxy < <(ls_once "$kind" "$n")
      runs[$kind]+=" $secs"
      cpus[own_$kind]+=" $own"; cpus[server_$kind]+=" $server"; cpus[proxy_$kind]+=" $proxy"
      RES[shown_${kind}_$n]=$shown
      RES[lists_${kind}_$n]=$lists
      if [ "$kind" = bucketfs ]; then
        # The highest of the runs: peak and after, in kB (VmHWM, VmRSS).
        read -r hwm rss <"$WORK/mem-$n"
        [ "${RES[hwm_$n]:-0}" -ge "$hwm" ] || RES[hwm_$n]=$hwm
        [ "${RES[rss_$n]:-0}" -ge "$rss" ] || RES[rss_$n]=$rss
      fi
      echo "bench: ls -l of $n, $kind: $secs s, $shown names, $lists list requests; CPU s: own $own, formula server $server, proxy $proxy (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
  for kind in $KINDS; do
    # shellcheck disable=SC2086
    RES[ls_${kind}_$n]=$(median ${runs[$kind]})
    for c in own server proxy; do
      # shellcheck disable=SC2086
      RES[${c}_${kind}_$n]=$(median ${cpus[${c}_$kind]})
    done
  done
  unset runs cpus
done

echo
echo "== bucketfs listing benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD), $(nproc) cores, load $LOAD0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end, medians of $REPS cold runs, ${DELAY_MS} ms per request)"
echo
for n in $SIZES; do
  echo "  N=$n"
  for kind in $KINDS; do
    printf '    %-9s %8.3f s  %4s lists  %s/%s names  CPU s: own %s, formula server %s, proxy %s' "$kind" "${RES[ls_${kind}_$n]}" \
      "${RES[lists_${kind}_$n]}" "${RES[shown_${kind}_$n]}" "$n" "${RES[own_${kind}_$n]}" "${RES[server_${kind}_$n]}" "${RES[proxy_${kind}_$n]}"
    case "$kind" in
      bucketfs) printf '  memory (highest of the runs): peak %s, after %s' "$(mem_text "${RES[hwm_$n]}")" "$(mem_text "${RES[rss_$n]}")" ;;
      *) printf '  time/bucketfs %s' "$(ratio "${RES[ls_${kind}_$n]}" "${RES[ls_bucketfs_$n]}")" ;;
    esac
    echo
  done
done
for n in $SIZES; do
  [ "${RES[shown_bucketfs_$n]}" -eq "$n" ] || { echo "bench: bucketfs showed ${RES[shown_bucketfs_$n]} of $n names" >&2; exit 1; }
done
