#!/usr/bin/env bash
# Pods on one machine: BENCH_PODS (20) volumes served at once, each as the Cloud Storage FUSE CSI
# driver serves one (its own /dev/fuse descriptor mounted by a stand-in of the node plugin, its
# own bucketfs process started through a `gcsfuse` link as uid 65534 with no capabilities:
# Tests/e2e/csi_standin.py). Prints per volume: time from the descriptor handed over to the first
# answered `ls` (target: at most 1 s each), the daemon's RSS once all are up and idle (target: at
# most 40 MB), one `ls -l` of 1,000 objects on each; then SIGTERM ends each. Needs root.
#
# Starts its own emulator (EMULATOR_PORT, default 9561). Not part of the test suite; about a minute.
# Environment: BUCKETFS_BIN (default: build release), BENCH_PODS (20), BENCH_OBJECTS (1000),
# BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
PODS="${BENCH_PODS:-20}"
OBJECTS="${BENCH_OBJECTS:-1000}"
PORT="${EMULATOR_PORT:-9561}"
BUCKET=bucketfs-pods
ENDPOINT="http://127.0.0.1:$PORT"
[ "$(id -u)" -eq 0 ] || { echo "bench-pods: needs root (it mounts /dev/fuse as the node plugin does)" >&2; exit 1; }
. Scripts/bench/lib.sh bucketfs-pods
echo "bench: $PODS pods' volumes at once, $OBJECTS objects each; $BIN_LABEL; $(nproc) cores" >&2
start_emulator "$PORT" "$BUCKET"
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/pods/objects "$OBJECTS" 1024
chmod 755 "$WORK"
"$PY" Scripts/bench/pods.py "$BIN" "$ENDPOINT" "$BUCKET" bench/pods "$PODS" "$WORK"
