#!/usr/bin/env bash
# Tail tolerance: `tar -cf -` of SMALL_N x 32 KiB files through a gs:// mount, behind a proxy that
# adds DELAY_MS to every request, without stalls and with STALL_PCT % of media GETs held back
# STALL_MS more (the rare slow answer of a real network: Tests/e2e/latencyproxy.py
# --stall-fraction), same run. Rows: no stalls; stalls with the default hedging (--walk-hedge 2);
# stalls with --walk-hedge 0. Each: median time of REPS fresh mounts (page cache dropped), its
# ratio to the no-stall time (target: at most 1.2 with hedging), media GETs per small object,
# stalled GETs, and hedges (sent / won, from the mount's metrics). Every archive is checked file
# by file (Scripts/bench/tarcheck.py).
#
# Starts its own emulator (EMULATOR_PORT, default 9551) and two proxies (BENCH_PROXY_PORT, default
# 9552: no stalls; the next port: stalls, each run with its own seed). Not part of the test suite;
# about 2 minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (5), BENCH_DELAY_MS (20),
# BENCH_SMALL_N (400), BENCH_STALL_PCT (1), BENCH_STALL_MS (1000), BENCH_BFS_OPTS, BENCH_DIR,
# BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-5}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SMALL_N="${BENCH_SMALL_N:-400}"
STALL_PCT="${BENCH_STALL_PCT:-1}"
STALL_MS="${BENCH_STALL_MS:-1000}"
PORT="${EMULATOR_PORT:-9551}"
PROXY_PORT="${BENCH_PROXY_PORT:-9552}"
STALL_PORT=$((PROXY_PORT + 1))
METRICS_PORT=$((PROXY_PORT + 2))
BUCKET=bucketfs-tail
ENDPOINT="http://127.0.0.1:$PORT"
. Scripts/bench/lib.sh bucketfs-tail
T_START=$(now)
echo "bench: tar of $SMALL_N x 32 KiB at +$DELAY_MS ms, $STALL_PCT % of media GETs held $STALL_MS ms more; $REPS repetitions; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS"
make_small_tree "$WORK/tree/tail" "$SMALL_N" ""
"$PY" Scripts/bench/tarcheck.py --manifest "$WORK/tree/tail" >"$WORK/tail.manifest"
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/tail --from "$WORK/tree/tail"
rm -rf "$WORK/tree"

start_stall_proxy() {  # SEED: the stalling proxy, its draws seeded (a new one each run)
  [ -n "${STALL_PID:-}" ] && kill "$STALL_PID" 2>/dev/null && wait "$STALL_PID" 2>/dev/null || true
  "$PY" "$ROOT/Tests/e2e/latencyproxy.py" --upstream "127.0.0.1:$PORT" --port "$STALL_PORT" --delay-ms "$DELAY_MS" \
    --stall-fraction "$(awk -v p="$STALL_PCT" 'BEGIN { print p / 100 }')" --stall-ms "$STALL_MS" --seed "$1" \
    >>"$WORK/proxy-$STALL_PORT.log" 2>&1 &
  STALL_PID=$!
  PIDS+=("$STALL_PID")
  for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$STALL_PORT/__stats" && break; sleep 0.1; done
}

declare -A RUNS GETS STALLS HEDGES
one_run() {  # ROW PROXY_PORT [mount options...]
  local row="$1" port="$2"; shift 2
  local mnt t0 t1 stats
  mnt="$(mount_bucketfs "gs://$BUCKET/bench" --endpoint "http://127.0.0.1:$port" --anonymous --read-only \
    --metrics-address "127.0.0.1:$METRICS_PORT" "$@")"
  drop_caches
  curl -sf "http://127.0.0.1:$port/__reset" >/dev/null
  t0=$(now)
  tar -cf "$WORK/tail.tar" -C "$mnt" tail
  t1=$(now)
  stats=$(curl -sf "http://127.0.0.1:$port/__stats")
  local sent won
  sent=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^bucketfs_walk_hedges_total\{outcome="sent"\}/ { print $2 }')
  won=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^bucketfs_walk_hedges_total\{outcome="won"\}/ { print $2 }')
  unmount "$mnt"
  "$PY" Scripts/bench/tarcheck.py "$WORK/tail.manifest" <"$WORK/tail.tar" >/dev/null \
    || { echo "bench: the archive of $row does not match the tree" >&2; exit 1; }
  RUNS[$row]+=" $(elapsed "$t0" "$t1")"
  GETS[$row]+=" $(echo "$stats" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["media"])')"
  STALLS[$row]+=" $(echo "$stats" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["stalled"])')"
  HEDGES[$row]+=" ${sent:-0}/${won:-0}"
  echo "bench: $row run: $(elapsed "$t0" "$t1") s" >&2
}

for i in $(seq 1 "$REPS"); do
  one_run none "$PROXY_PORT"
  start_stall_proxy "$i"
  one_run hedged "$STALL_PORT"
  start_stall_proxy "$i"
  one_run unhedged "$STALL_PORT" --walk-hedge 0
done

echo
echo "== bucketfs tail-tolerance benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS runs, binary: $BIN_LABEL)"
echo "   tar -cf of $SMALL_N x 32 KiB, +$DELAY_MS ms a request, fresh mount, page cache dropped; stalls: $STALL_PCT % of media GETs +$STALL_MS ms"
echo
printf '| %-30s | %-40s | %-10s | %-14s | %-22s | %-16s |\n' row "time (runs)" "÷ no stalls" "media GETs / N" "stalled GETs (runs)" "hedges sent/won"
printf '|%s|\n' "--------------------------------|------------------------------------------|------------|----------------|------------------------|-----------------"
base=""
for row in none hedged unhedged; do
  # shellcheck disable=SC2086
  med=$(median ${RUNS[$row]})
  [ "$row" = none ] && base=$med
  # shellcheck disable=SC2086
  gets=$(median ${GETS[$row]})
  case "$row" in none) label="no stalls" ;; hedged) label="stalls, --walk-hedge 2 (default)" ;; *) label="stalls, --walk-hedge 0" ;; esac
  printf '| %-30s | %-40s | %-10s | %-14s | %-22s | %-16s |\n' "$label" "$med s (${RUNS[$row]# })" "$(ratio "$med" "$base")" \
    "$(ratio "$gets" "$SMALL_N")" "${STALLS[$row]# }" "${HEDGES[$row]# }"
done
echo "   target: with stalls and hedging, at most 1.2x the time without stalls"
echo "   (whole bench $(elapsed "$T_START" "$(now)") s)"
