#!/usr/bin/env bash
# A data loader's workers reading a directory of small files in order: 4 readers, each taking a
# run of RUN files at a time (`xargs -P4 -nRUN`, as a loader's workers take batches of indices),
# behind DELAY_MS per request and CONN_MBPS MB/s a connection (the link of bench-epochs.sh). Each
# reader reads its run one file after another, so with runs of 8 their reads land eight places
# apart; runs of 1 (the four readers taking the files in turn) beside it. Fresh mount and page
# cache dropped for each run. RATIO against the limit measured in the same run: the plain client
# (Scripts/bench/ranged_read.py) reading the same objects with 16 requests at once, one GET each.
# Also printed: media GETs (one per file is the least; a file fetched ahead and not taken costs
# another).
#
# Starts its own emulator (EMULATOR_PORT, default 9601) and proxy (BENCH_PROXY_PORT, default 9602).
# Not part of the test suite: about two minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_N (600), BENCH_SIZE_KIB (1024),
# BENCH_RUNS ("8 1": the run lengths measured), BENCH_REPS (3), BENCH_DELAY_MS (20),
# BENCH_CONN_MBPS (50), BENCH_BFS_OPTS, BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_N:-600}"
SIZE_KIB="${BENCH_SIZE_KIB:-1024}"
RUNS="${BENCH_RUNS:-8 1}"
REPS="${BENCH_REPS:-3}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
CONN_MBPS="${BENCH_CONN_MBPS:-50}"
PORT="${EMULATOR_PORT:-9601}"
PROXY_PORT="${BENCH_PROXY_PORT:-9602}"
BUCKET=bucketfs-loader
PROXY="http://127.0.0.1:$PROXY_PORT"
. Scripts/bench/lib.sh bucketfs-loader
declare -A RES

echo "bench: $N files of $SIZE_KIB KiB, 4 readers taking runs of ($RUNS) behind +$DELAY_MS ms and $CONN_MBPS MB/s a connection; $BIN_LABEL; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS" --conn-rate "$((CONN_MBPS * 1000000))"
"$PY" Scripts/bench/fill.py "http://127.0.0.1:$PORT" "$BUCKET" bench/loader/set "$N" "$((SIZE_KIB * 1024))"
NAMES=()
for i in $(seq 0 $((N - 1))); do NAMES+=("$(printf 'bench/loader/set/f%06d' "$i")"); done
media_gets() { curl -sf "$PROXY/__stats" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["media"])'; }

plains=()
for run in $RUNS; do
  secs=()
  for _ in $(seq 1 "$REPS"); do
    line=$("$PY" Scripts/bench/ranged_read.py "$PROXY" "$BUCKET" 16 8 "${NAMES[@]}")
    plains+=("${line%% *}")
    mnt=$(mount_bucketfs "gs://$BUCKET/bench/loader" --endpoint "$PROXY" --anonymous --read-only)
    ls "$mnt/set" >/dev/null
    drop_caches
    curl -sf -o /dev/null "$PROXY/__reset"
    t0=$(now)
    got=$(find "$mnt/set" -type f | sort | xargs -P4 -n"$run" sh -c 'for f; do cat "$f" | wc -c; done' sh | awk '{s += $1} END {print s}')
    secs+=("$(elapsed "$t0" "$(now)")")
    RES[gets_$run]=$(media_gets)
    unmount "$mnt"
    [ "$got" = "$((N * SIZE_KIB * 1024))" ] || { echo "bench: read $got bytes, expected $((N * SIZE_KIB * 1024))" >&2; exit 1; }
  done
  RES[bfs_$run]=$(median "${secs[@]}")
  echo "bench: runs of $run: bucketfs ${secs[*]} s, ${RES[gets_$run]} media GETs (the last)" >&2
done
RES[plain]=$(median "${plains[@]}")
echo "bench: plain client, 16 requests at once: ${plains[*]} s" >&2

echo
echo "== a data loader's 4 readers over $N files of $SIZE_KIB KiB behind +$DELAY_MS ms and $CONN_MBPS MB/s a connection (medians of $REPS; $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), binary: $BIN_LABEL)"
echo
printf '  %-44s %10s   %-24s %6s   %s\n' "readers take runs of" "seconds" "plain 16-way (seconds)" "ratio" "media GETs (last run)"
for run in $RUNS; do
  printf '  %-44s %10s   %-24s %6s   %s\n' "$run file(s) (xargs -P4 -n$run)" "${RES[bfs_$run]}" "${RES[plain]}" "$(ratio "${RES[plain]}" "${RES[bfs_$run]}")" "${RES[gets_$run]} for $N files"
done
