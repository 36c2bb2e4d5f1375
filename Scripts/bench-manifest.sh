#!/usr/bin/env bash
# A dataset loader's reads: files opened by name from an index (a manifest), by W workers at once,
# in a directory nothing has listed, behind DELAY_MS per request, as a PyTorch DataLoader's workers
# open the paths a dataset's index names. Each name costs bucketfs a lookup (one request, the
# directory unlisted) and its read; the kernel sends one directory's lookups one at a time unless
# the filesystem says FUSE_PARALLEL_DIROPS (docs/SEMANTICS.md §6). RATIO against the limit measured
# in the same run: the plain client (Scripts/bench/ranged_read.py) reading the same objects with W
# requests at once, one GET each (its metadata GETs left out of its time).
#
# Starts its own emulator (EMULATOR_PORT, default 9581) and proxy (BENCH_PROXY_PORT, default 9582).
# Not part of the test suite: about a minute at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_N (400), BENCH_SIZE_KIB (64),
# BENCH_WORKERS (8), BENCH_REPS (3), BENCH_DELAY_MS (20), BENCH_BFS_OPTS, BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_N:-400}"
SIZE_KIB="${BENCH_SIZE_KIB:-64}"
W="${BENCH_WORKERS:-8}"
REPS="${BENCH_REPS:-3}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
PORT="${EMULATOR_PORT:-9581}"
PROXY_PORT="${BENCH_PROXY_PORT:-9582}"
BUCKET=bucketfs-manifest
PROXY="http://127.0.0.1:$PROXY_PORT"
. Scripts/bench/lib.sh bucketfs-manifest
T_START=$(now)

echo "bench: $N files of $SIZE_KIB KiB read by name by $W workers behind +$DELAY_MS ms; $BIN_LABEL; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS"
"$PY" Scripts/bench/fill.py "http://127.0.0.1:$PORT" "$BUCKET" bench/manifest/set "$N" "$((SIZE_KIB * 1024))"
NAMES=()
for i in $(seq 0 $((N - 1))); do NAMES+=("$(printf 'bench/manifest/set/f%06d' "$i")"); done

plains=(); bfss=(); reqs=
for _ in $(seq 1 "$REPS"); do
  line=$("$PY" Scripts/bench/ranged_read.py "$PROXY" "$BUCKET" "$W" 8 "${NAMES[@]}")
  plains+=("${line%% *}")
  mnt=$(mount_bucketfs "gs://$BUCKET/bench/manifest" --endpoint "$PROXY" --anonymous --read-only)
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  t0=$(now)
  got=$(for i in $(seq 0 $((N - 1))); do printf '%s/set/f%06d\n' "$mnt" "$i"; done \
    | xargs -P "$W" -n 8 sh -c 'for f; do wc -c <"$f"; done' sh | awk '{s += $1} END {print s}')
  t1=$(now)
  [ "$got" = "$((N * SIZE_KIB * 1024))" ] || { echo "bench: read $got bytes, expected $((N * SIZE_KIB * 1024))" >&2; exit 1; }
  bfss+=("$(elapsed "$t0" "$t1")")
  reqs=$(proxy_counts)
  unmount "$mnt"
done
plain=$(median "${plains[@]}"); bfs=$(median "${bfss[@]}")
echo "bench: plain client, $W GETs at once: ${plains[*]} s; bucketfs: ${bfss[*]} s (requests of the last: total list metadata media other = $reqs)" >&2

echo
echo "== bucketfs manifest reads behind +$DELAY_MS ms (medians of $REPS; $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), binary: $BIN_LABEL)"
echo
printf '  %-52s %10s   %-26s %7s\n' "what" "seconds" "against (seconds)" "ratio"
printf '  %-52s %10s   %-26s %7s\n' "$N x $SIZE_KIB KiB by name, $W workers, cold mount" "$bfs" "plain $W-way $plain" "$(ratio "$plain" "$bfs")"
printf '  %-52s %s\n' "  requests (total list metadata media other)" "$reqs"
echo "   total $(elapsed "$T_START" "$(now)") s"
