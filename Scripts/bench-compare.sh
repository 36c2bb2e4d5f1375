#!/usr/bin/env bash
# Before and after in one sitting, for a change meant to change no behaviour (docs/BENCHMARKS.md,
# "Refactors are measured too"): runs each named bench script with BUCKETFS_BIN set to the
# "before" binary, then to the "after" one, taking turns script by script so that a slow spell of
# the machine falls on both, and keeps each run's whole output.
#
#   Scripts/bench-compare.sh BEFORE_BIN AFTER_BIN bench-reads.sh bench-walk.sh bench-writes.sh
#
# The scripts' own environment (BENCH_REPS, BENCH_ONLY, BENCH_LS, ...) passes through. Outputs go
# to BENCH_COMPARE_DIR (default: a fresh temp dir), one file per script and binary, and each run's
# summary (what follows the script's "== " header) is printed as it ends, with the load.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN SCRIPT..." >&2; exit 2; }
BEFORE="$1" AFTER="$2"
shift 2
OUT="${BENCH_COMPARE_DIR:-$(mktemp -d /tmp/bench-compare.XXXXXX)}"
mkdir -p "$OUT"
for s in "$@"; do
  for side in before after; do
    bin=$BEFORE
    [ "$side" = after ] && bin=$AFTER
    log="$OUT/${s%.sh}-$side.txt"
    echo "== $s, $side: $("$bin" --version 2>/dev/null | head -n 1), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%SZ)"
    BUCKETFS_BIN="$bin" "Scripts/$s" >"$log" 2>&1 || echo "   (exit $? : see $log)"
    sed -n '/^== /,$p' "$log"
    echo
  done
done
echo "outputs in $OUT"
