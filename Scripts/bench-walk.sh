#!/usr/bin/env bash
# Metadata-walk benchmarks, printed as RATIOS against a peer measured in the same run:
#
#  (a) cold `ls -l` of a directory of N objects (BENCH_LS, default "20000 100000"): bucketfs vs
#      `rclone mount`, both on the same Cloud Storage emulator; and the bucketfs mount's memory
#      (VmHWM peak and VmRSS) right after each listing.
#  (b) a metadata walk, `ls -lR` then `getfattr -d -R`, of a tree of W files (BENCH_WALK, default
#      "10000 20000", in directories of 100 files, each with a user.k xattr): bucketfs over the
#      embedded bucket vs `bindfs` (a C FUSE filesystem) over the same tree on local disk; the
#      time per file as W doubles shows whether the cost is linear.
#  (c) requests per file of `tar -cf -` over a directory of 400 small objects whose listing has
#      expired (--metadata-ttl 2, then 3 s idle), counted with --request-log.
#
# Starts its own emulator (EMULATOR_PORT, default 9312), unmounts everything on exit. Not part of
# the test suite: it takes several minutes (filling 100,000 objects alone takes about 2-3).
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_DIR (a fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
LS_SIZES="${BENCH_LS:-20000 100000}"
WALK_SIZES="${BENCH_WALK:-10000 20000}"
REPS="${BENCH_REPS:-3}"
PORT="${EMULATOR_PORT:-9312}"
BUCKET=bucketfs-walk
ENDPOINT="http://127.0.0.1:$PORT"

Scripts/setup.sh >/dev/null
for pkg in bindfs; do dpkg -s "$pkg" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null; }; done
. Scripts/bench/lib.sh bucketfs-walk
rclone_remote emu "$ENDPOINT"

# --- data ------------------------------------------------------------------------------------------
start_emulator "$PORT" "$BUCKET"
for n in $LS_SIZES; do
  echo "bench: filling ls$n/ ($n objects)" >&2
  "$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" "ls$n" "$n" 0 --metadata k=v
done
echo "bench: filling tar/ (400 x 32 KiB)" >&2
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" tar 400 32768
declare -A RES

# --- (a) ls -l of N, cold ---------------------------------------------------------------------------
for n in $LS_SIZES; do
  for kind in bucketfs rclone; do
    runs=()
    for _ in $(seq 1 "$REPS"); do
      if [ "$kind" = bucketfs ]; then mnt=$(mount_bucketfs "gs://$BUCKET" --endpoint "$ENDPOINT" --anonymous --metadata-ttl 60)
      else mnt=$(mount_rclone "emu:$BUCKET"); fi
      drop_caches
      t0=$(now); lines=$(ls -l "$mnt/ls$n" | wc -l); t1=$(now)
      [ "$lines" -eq $((n + 1)) ] || { echo "bench: $kind listed $((lines - 1)) of $n" >&2; exit 1; }
      runs+=("$(elapsed "$t0" "$t1")")
      if [ "$kind" = bucketfs ]; then
        pid=$(mount_pid "$mnt")
        RES[hwm_$n]=$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$pid/status")
        RES[rss_$n]=$(awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status")
      fi
      unmount "$mnt"
    done
    RES[ls_${kind}_$n]=$(median "${runs[@]}")
    echo "bench: ls -l of $n, $kind: ${runs[*]}" >&2
  done
done

# --- (b) metadata walk: bucketfs (embedded) vs bindfs (local disk) --------------------------------
for w in $WALK_SIZES; do
  tree="$WORK/tree$w"; emb="$WORK/emb$w"
  "$PY" - "$tree" "$w" <<'PYEOF'
import os, sys
root, w = sys.argv[1], int(sys.argv[2])
for i in range(w):
    d = f"{root}/d{i // 100:04d}"
    os.makedirs(d, exist_ok=True)
    p = f"{d}/f{i % 100:03d}"
    open(p, "wb").write(b"x" * (i % 97))
    os.setxattr(p, "user.k", b"v")
PYEOF
  "$BIN" mb "$emb" >/dev/null
  (cd "$tree" && "$BIN" put -r . "$emb" --metadata k=v >/dev/null)
  for kind in bucketfs bindfs; do
    runs=()
    for _ in $(seq 1 "$REPS"); do
      if [ "$kind" = bucketfs ]; then mnt=$(mount_bucketfs "$emb" --metadata-ttl 60)
      else mnt="$(mktemp -d "$WORK/mnt-bindfs.XXXX")"; bindfs "$tree" "$mnt"; fi
      drop_caches
      t0=$(now)
      ls -lR "$mnt" >/dev/null
      found=$(getfattr -d -R "$mnt" 2>/dev/null | grep -c '^user.k="v"')
      t1=$(now)
      [ "$found" -eq "$w" ] || { echo "bench: $kind walk saw $found of $w xattrs" >&2; exit 1; }
      runs+=("$(elapsed "$t0" "$t1")")
      unmount "$mnt"
    done
    RES[walk_${kind}_$w]=$(median "${runs[@]}")
    echo "bench: walk of $w, $kind: ${runs[*]}" >&2
  done
  rm -rf "$tree" "$emb"
done

# --- (c) tar after the TTL: requests per file -------------------------------------------------------
log="$WORK/tar-requests.log"
mnt=$(mount_bucketfs "gs://$BUCKET" --endpoint "$ENDPOINT" --anonymous --metadata-ttl 2 --request-log "$log")
ls -l "$mnt/tar" >/dev/null
sleep 3
: >"$log"
tar -cf - -C "$mnt" tar | wc -c >/dev/null
unmount "$mnt"
RES[tar_requests]=$(wc -l <"$log")
RES[tar_lists]=$(grep -c '^list ' "$log" || true)
RES[tar_reads]=$(grep -c '^read ' "$log" || true)

# --- report -----------------------------------------------------------------------------------------
echo
echo "== bucketfs metadata-walk benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, medians of $REPS cold runs)"
echo
echo "(a) cold ls -l of N objects, same emulator"
for n in $LS_SIZES; do
  printf '  N=%-7s bucketfs %7.3f s   rclone %7.3f s   ratio rclone/bucketfs %s (> 1: bucketfs faster)   bucketfs memory: peak %s MB, after %s MB\n' \
    "$n" "${RES[ls_bucketfs_$n]}" "${RES[ls_rclone_$n]}" "$(ratio "${RES[ls_rclone_$n]}" "${RES[ls_bucketfs_$n]}")" "${RES[hwm_$n]}" "${RES[rss_$n]}"
done
echo
echo "(b) ls -lR + getfattr -d -R of W files (100 per directory): bucketfs on the embedded bucket vs bindfs on local disk"
for w in $WALK_SIZES; do
  printf '  W=%-7s bucketfs %7.3f s   bindfs %7.3f s   ratio bindfs/bucketfs %s   bucketfs per file %s ms\n' \
    "$w" "${RES[walk_bucketfs_$w]}" "${RES[walk_bindfs_$w]}" "$(ratio "${RES[walk_bindfs_$w]}" "${RES[walk_bucketfs_$w]}")" \
    "$(awk -v t="${RES[walk_bucketfs_$w]}" -v w="$w" 'BEGIN { printf "%.3f", t * 1000 / w }')"
done
echo
echo "(c) tar -cf - of 400 objects after their listing expired: ${RES[tar_requests]} requests (${RES[tar_lists]} list, ${RES[tar_reads]} read) = $(awk -v r="${RES[tar_requests]}" 'BEGIN { printf "%.2f", r / 400 }') per file"
