#!/usr/bin/env bash
# The fault cases with the DEFAULT timings, as a user meets them, repeated N times:
# Tests/e2e/soak_faults.py says which cases and what is checked. Not part of Scripts/test.sh:
# one pass takes about 25 minutes.
#
#   Scripts/soak-faults.sh [N]              # N passes (default 1); prints the table at the end
#
# Environment: BUCKETFS_BIN (default: the debug build, built here), EMULATOR_PORT (the emulator
# this script starts if none answers there; default 9023), SOAK_ONLY (phase1,unmount,sigterm,crash),
# SOAK_TABLE (also write the final table to this file), SOAK_TMP (work directory, default a new
# one under /tmp). Needs root (FUSE mounts, dropping the page cache).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-1}"

BUCKETFS_NO_INSTALL=1 Scripts/setup.sh >/dev/null
BIN="${BUCKETFS_BIN:-$(swift build --show-bin-path)/bucketfs}"

started=0
if ! out="$(Scripts/emulator.sh status 2>/dev/null)"; then
  out="$(Scripts/emulator.sh start)"
  started=1
fi
eval "$out"
TMP="${SOAK_TMP:-$(mktemp -d /tmp/bucketfs-soak-XXXXXX)}"
cleanup() {
  for m in "$TMP"/mnt*; do [ -d "$m" ] && fusermount3 -uz "$m" 2>/dev/null || true; done
  if [ "$started" = 1 ]; then Scripts/emulator.sh stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

echo "soak-faults: $N pass(es), binary $BIN, emulator $BUCKETFS_EMULATOR, work dir $TMP"
args=("$N" --tmp "$TMP" --bin "$BIN")
[ -n "${SOAK_ONLY:-}" ] && args+=(--only "$SOAK_ONLY")
[ -n "${SOAK_TABLE:-}" ] && args+=(--table "$SOAK_TABLE")
.venv/bin/python Tests/e2e/soak_faults.py "${args[@]}"
