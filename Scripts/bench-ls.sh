#!/usr/bin/env bash
# gcsfuse's listing bench, here: `ls -R` of a flat directory of N files and of a nested tree
# (D directories of F files each), cold and warm, behind DELAY_MS per request, for bucketfs,
# `rclone mount` and a plain client, printed as ratios measured in the same run.
#
# The shape is gcsfuse's own (GoogleCloudPlatform/gcsfuse, perfmetrics/scripts/ls_metrics/:
# listing_benchmark.py runs `ls -R` on each test folder of its config.json, folders named like
# 1KB_100000files_0subdir and 1KB_4files_3subdir, NUM_SAMPLES times on one mount, and reports the
# latency's median and percentiles). Here the first sample on a fresh mount is "cold" (page cache
# dropped; the mount has seen nothing) and the next BENCH_SAMPLES - 1 on the same mount are "warm";
# each cold sample takes a fresh mount, BENCH_REPS times (medians). gcsfuse publishes its numbers
# from its own machines against real Cloud Storage: they are not comparable with these in
# absolute terms, and this script prints none of them.
#
# The objects come from a formula (Tests/e2e/formula_server.py), behind Tests/e2e/latencyproxy.py.
# The plain client is the limit of this setup: Scripts/bench/list_ranges.py for a flat directory
# (16 name ranges at once, cut where the formula says) and Scripts/bench/list_tree.py for a tree
# (16 directories at once, each directory's pages in turn). It has no cache: cold and warm alike.
# Every row checks that every name showed.
#
# Ports: LS_PORT (default 9160, the formula server) and LS_PORT + 1 (the proxy).
# Environment: BENCH_FLAT (default "10000 100000": files in one directory), BENCH_NESTED (default
# "100x100 1000x100": DxF, at most 1,000 files a directory), BENCH_KINDS (default "bucketfs rclone
# plain"), BENCH_REPS (3), BENCH_SAMPLES (5: one cold, four warm), BENCH_DELAY_MS (20),
# BUCKETFS_BIN (default: build release), BENCH_BFS_OPTS, BENCH_DIR, BENCH_KEEP. Not part of the
# test suite; about 5 minutes at the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
FLAT="${BENCH_FLAT:-10000 100000}"
NESTED="${BENCH_NESTED:-100x100 1000x100}"
KINDS="${BENCH_KINDS:-bucketfs rclone plain}"
REPS="${BENCH_REPS:-3}"
SAMPLES="${BENCH_SAMPLES:-5}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
PORT="${LS_PORT:-9160}"
PROXY_PORT=$((PORT + 1))
PROXY="http://127.0.0.1:$PROXY_PORT"
BUCKET=bench-ls

command -v rclone >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null; }
. Scripts/bench/lib.sh bench-ls
rclone_remote formula "$PROXY"

# Trees: "flatN" (N files) and "nestDxF" (D directories of F files), each a formula family.
TREES=() families=()
declare -A EXPECT
for n in $FLAT; do TREES+=("flat$n"); families+=(--family "flat$n/:$n"); EXPECT[flat$n]=$n; done
for s in $NESTED; do
  d=${s%x*} f=${s#*x}
  TREES+=("nest$s"); families+=(--family "nest$s/:$d:1:$f"); EXPECT[nest$s]=$((d + d * f))
done
"$PY" Tests/e2e/formula_server.py --port "$PORT" --bucket "$BUCKET" --processes "${FORMULA_PROCESSES:-2}" "${families[@]}" \
  >"$WORK/formula.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/storage/v1/b/$BUCKET" && break; sleep 0.1; done
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS"
declare -A RES

# `ls -R DIR` once: prints "seconds names" (names: the entries it printed, headers and blank
# lines left out).
ls_r() {
  local t0 t1 names
  t0=$(now); names=$(ls -R "$1" | awk 'NF && !/:$/' | wc -l); t1=$(now)
  echo "$(elapsed "$t0" "$t1") $names"
}

# One mount's samples: prints "cold warm1 warm2 ... names lists-cold".
samples_once() {  # KIND TREE
  local kind="$1" tree="$2" mnt out="" names lists secs i
  case "$kind" in
    bucketfs) mnt=$(mount_bucketfs "gs://$BUCKET" --endpoint "$PROXY" --anonymous --read-only) ;;
    rclone) mnt=$(mount_rclone "formula:$BUCKET") ;;
  esac
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  for i in $(seq 1 "$SAMPLES"); do
    if [ "$kind" = plain ]; then
      case "$tree" in
        flat*) read -r secs names _ < <("$PY" Scripts/bench/list_ranges.py "$PROXY" "$BUCKET" "$tree/" "${EXPECT[$tree]}" 16) ;;
        *) read -r secs names _ < <("$PY" Scripts/bench/list_tree.py "$PROXY" "$BUCKET" "$tree/" 16) ;;
      esac
    else
      read -r secs names < <(ls_r "$mnt/$tree")
    fi
    out+="$secs "
    [ "$i" -gt 1 ] || lists=$(proxy_counts "$PROXY" | awk '{print $2}')
    [ "$names" -eq "${EXPECT[$tree]}" ] || { echo "bench: $kind showed $names of ${EXPECT[$tree]} names in $tree" >&2; exit 1; }
  done
  [ "$kind" = plain ] || unmount "$mnt"
  echo "$out$names $lists"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for tree in "${TREES[@]}"; do
  declare -A cold=() warm=()
  for _ in $(seq 1 "$REPS"); do
    # Kinds take turns, so a slow spell of the machine falls on all of them.
    for kind in $KINDS; do
      read -r -a s < <(samples_once "$kind" "$tree")
      cold[$kind]+=" ${s[0]}"
      warm[$kind]+=" ${s[*]:1:$((SAMPLES - 1))}"
      RES[lists_${kind}_$tree]=${s[$((SAMPLES + 1))]}
      echo "bench: ls -R of $tree, $kind: cold ${s[0]} s, warm ${s[*]:1:$((SAMPLES - 1))} s, ${s[$SAMPLES]} names, ${s[$((SAMPLES + 1))]} list requests cold (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
  for kind in $KINDS; do
    # shellcheck disable=SC2086
    RES[cold_${kind}_$tree]=$(median ${cold[$kind]})
    # shellcheck disable=SC2086
    RES[warm_${kind}_$tree]=$(median ${warm[$kind]})
    # shellcheck disable=SC2086
    RES[p90_${kind}_$tree]=$(printf '%s\n' ${warm[$kind]} | sort -g | awk '{a[NR]=$1} END {i=int(NR*0.9+0.999); if (i<1) i=1; print a[i]}')
  done
  unset cold warm
done

echo
echo "== gcsfuse's listing bench, ls -R ($(date -u +%Y-%m-%dT%H:%M:%SZ), $BIN_LABEL, $(nproc) cores, load $LOAD0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end, ${DELAY_MS} ms per request; cold: median of $REPS fresh mounts; warm: median (p90) of $((REPS * (SAMPLES - 1))) samples on those mounts)"
echo
printf '  %-14s %-9s %9s %9s %9s %6s %16s %16s\n' tree kind "cold s" "warm s" "warm p90" lists "rclone÷bucketfs" "bucketfs÷plain"
for tree in "${TREES[@]}"; do
  for kind in $KINDS; do
    r1="" r2=""
    if [ "$kind" = bucketfs ]; then
      case " $KINDS " in *" rclone "*) r1="$(ratio "${RES[cold_rclone_$tree]}" "${RES[cold_bucketfs_$tree]}") / $(ratio "${RES[warm_rclone_$tree]}" "${RES[warm_bucketfs_$tree]}")" ;; esac
      case " $KINDS " in *" plain "*) r2="$(ratio "${RES[cold_bucketfs_$tree]}" "${RES[cold_plain_$tree]}") cold" ;; esac
    fi
    printf '  %-14s %-9s %9.3f %9.3f %9.3f %6s %16s %16s\n' "$tree" "$kind" "${RES[cold_${kind}_$tree]}" "${RES[warm_${kind}_$tree]}" \
      "${RES[p90_${kind}_$tree]}" "${RES[lists_${kind}_$tree]}" "$r1" "$r2"
  done
done
echo
echo "  (rclone÷bucketfs: cold / warm, time over time: above 1 bucketfs is faster; bucketfs÷plain: above 1 bucketfs is slower than the limit)"
