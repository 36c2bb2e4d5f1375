#!/usr/bin/env bash
# The mount at a moment against the live mount, in the same run (docs/RESTORE.md "What it
# costs"): a versioned embedded bucket holds N names (BENCH_NAMES, default 10000) in directories
# of 1,000, each written 3 times (3 generations: two old, one live). Measured, cold (a fresh mount
# each time), BENCH_REPS times (default 3), median:
#
#  (a) `ls -lR` of the live mount (N names, N live versions)
#  (b) `ls -lR` of a mount `--at` a moment between the second and the third write (N names shown,
#      3N versions listed)
#  (c) `getfattr -R -d` right after (b), in the same mount
#
# and the requests each made (--request-log). Prints the times and the ratio (b)/(a).
# Environment: BUCKETFS_BIN (default: build release), BENCH_NAMES, BENCH_REPS, BENCH_DIR (a fresh
# temp dir). No server and no port: the embedded bucket is a directory.
set -euo pipefail
umask 077  # the request logs stay private (bucketfs warns about readable ones)
cd "$(dirname "$0")/.."
NAMES="${BENCH_NAMES:-10000}"
REPS="${BENCH_REPS:-3}"
. Scripts/bench/lib.sh bucketfs-restore
for pkg in attr; do dpkg -s "$pkg" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null; }; done

BUCKET="$WORK/bucket"
"$BIN" mb "$BUCKET" --versioning
echo "bench: writing $NAMES names x 3 generations" >&2
for round in 1 2 3; do
  src="$WORK/src$round"
  for ((i = 0; i < NAMES; i++)); do
    d="$src/d$((i / 1000))"
    [ -d "$d" ] || mkdir -p "$d"
    printf 'round %s of name %s\n' "$round" "$i" >"$d/f$i"
  done
  "$BIN" put -r "$src" "$BUCKET/tree" >/dev/null
  rm -rf "$src"
  if [ "$round" = 2 ]; then sleep 1.1; MOMENT=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ); sleep 1.1; fi
done

declare -A RES
for kind in live at; do
  runs=(); xruns=()
  for _ in $(seq 1 "$REPS"); do
    opts=(); [ "$kind" = at ] && opts=(--at "$MOMENT")
    log="$WORK/req-$kind.log"; : >"$log"
    mnt=$(mount_bucketfs "$BUCKET" --metadata-ttl 600 --request-log "$log" "${opts[@]}")
    : >"$log"
    drop_caches
    t0=$(now); lines=$(ls -lR "$mnt/tree" | grep -c '^-'); t1=$(now)
    [ "$lines" -eq "$NAMES" ] || { echo "bench: $kind listed $lines of $NAMES" >&2; exit 1; }
    if [ "$kind" = at ]; then
      grep -q "round 2 of name 0" "$mnt/tree/d0/f0" || { echo "bench: the mount at the moment shows the wrong generation" >&2; exit 1; }
    fi
    runs+=("$(elapsed "$t0" "$t1")")
    RES[req_$kind]=$(wc -l <"$log")
    t0=$(now); getfattr -R -d "$mnt/tree" >/dev/null 2>&1; t1=$(now)
    xruns+=("$(elapsed "$t0" "$t1")")
    RES[xreq_$kind]=$(( $(wc -l <"$log") - RES[req_$kind] ))
    fusermount3 -u "$mnt"
  done
  RES[ls_$kind]=$(median "${runs[@]}")
  RES[x_$kind]=$(median "${xruns[@]}")
  echo "bench: ls -lR, $kind: ${runs[*]} s; getfattr -R -d after it: ${xruns[*]} s" >&2
done

echo "== bench-restore: $NAMES names x 3 generations, embedded bucket, cold mounts, median of $REPS (load: $(cut -d' ' -f1-3 /proc/loadavg)) =="
printf '%-44s %10s %10s\n' "" "seconds" "requests"
printf '%-44s %10s %10s\n' "ls -lR, live mount ($NAMES versions)" "${RES[ls_live]}" "${RES[req_live]}"
printf '%-44s %10s %10s\n' "ls -lR, --at mount ($((NAMES * 3)) versions)" "${RES[ls_at]}" "${RES[req_at]}"
printf '%-44s %10s %10s\n' "getfattr -R -d after it, live" "${RES[x_live]}" "${RES[xreq_live]}"
printf '%-44s %10s %10s\n' "getfattr -R -d after it, --at" "${RES[x_at]}" "${RES[xreq_at]}"
echo "ratio --at / live, ls -lR: $(ratio "${RES[ls_at]}" "${RES[ls_live]}")"
[ -n "${DROP_FAILED:-}" ] && echo "(page cache not dropped: not root)"
exit 0
