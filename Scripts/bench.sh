#!/usr/bin/env bash
# Benchmarks that print RATIOS against a peer or a physical limit measured in the same run:
#
#  (a) `ls -l` of a directory of N objects on a cold mount: bucketfs vs `rclone mount`, both against
#      the same Cloud Storage emulator (plus, for bucketfs only, `getfattr -d` over every entry —
#      rclone has no xattrs); and bucketfs over the embedded bucket for reference. When rclone
#      cannot talk to the emulator the script says so and shows the bucketfs rows only.
#  (b) sequential read of a 256 MiB file: bucketfs over the embedded bucket vs `dd` of the same
#      bytes from local disk (the physical limit), page cache dropped before each run; and through
#      the emulator: bucketfs vs rclone vs `curl` straight from the emulator (the server's limit).
#
# Starts and stops its own emulator (EMULATOR_PORT, default 9311; see below), unmounts everything on exit.
# Environment: BUCKETFS_BIN (default: build release), BENCH_N (5000), BENCH_MIB (256), BENCH_REPS (5),
# BENCH_DIR (a fresh temp dir). Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_N:-5000}"
MIB="${BENCH_MIB:-256}"
REPS="${BENCH_REPS:-5}"
export EMULATOR_PORT="${EMULATOR_PORT:-9311}"
export EMULATOR_BUCKET="${EMULATOR_BUCKET:-bucketfs-bench}"
ENDPOINT="http://127.0.0.1:$EMULATOR_PORT"
command -v rclone >/dev/null || { echo "bench: rclone is not installed (Scripts/setup.sh installs it)" >&2; exit 1; }
. Scripts/bench/lib.sh bucketfs-bench
rclone_remote emu "$ENDPOINT"

# --- data ---------------------------------------------------------------------------------------
echo "bench: N=$N objects, ${MIB} MiB file, $REPS repetitions, work dir $WORK" >&2
start_emulator "$EMULATOR_PORT" "$EMULATOR_BUCKET"
BIG="$WORK/big.bin"
head -c "$((MIB * 1048576))" /dev/urandom >"$BIG"
BIG_MD5="$(md5sum "$BIG" | cut -d' ' -f1)"
echo "bench: filling the emulator ($N objects + ${MIB} MiB)" >&2
"$PY" "$ROOT/Scripts/bench/populate.py" "$ENDPOINT" "$EMULATOR_BUCKET" bench "$N" "$BIG"
echo "bench: filling an embedded bucket" >&2
EMB="$WORK/embedded"
"$BIN" mb "$EMB" >/dev/null
mkdir -p "$WORK/tree/ls" "$WORK/tree/read"
"$PY" - "$WORK/tree/ls" "$N" <<'PYEOF'
import sys
for i in range(int(sys.argv[2])):
    open(f"{sys.argv[1]}/f{i:05d}.txt", "wb").write(b"x" * (i % 97))
PYEOF
ln "$BIG" "$WORK/tree/read/big.bin"
"$BIN" put -r "$WORK/tree" "$EMB" --metadata k=v >/dev/null
rm -rf "$WORK/tree"

GS=(--endpoint "$ENDPOINT" --anonymous)
RCLONE_KINDS=(rclone-gcs)
if ! timeout 30 rclone --config "$RCLONE_CONF" lsf "emu:$EMULATOR_BUCKET/bench/read" 2>"$WORK/rclone-check.log" | grep -qx big.bin; then
  echo "bench: rclone cannot talk to the emulator ($(tail -1 "$WORK/rclone-check.log")); comparing with the embedded bucket only" >&2
  RCLONE_KINDS=()
fi
declare -A RES

# --- (a) ls -l of N entries, cold mount each run ------------------------------------------------
time_ls() {  # KIND -> seconds for ls -l (and sets GETFATTR_SECS for bucketfs)
  local kind="$1" mnt t0 t1 t2 lines
  case "$kind" in
    bucketfs-gcs) mnt="$(mount_bucketfs "gs://$EMULATOR_BUCKET/bench" "${GS[@]}" --metadata-ttl 60)" ;;
    bucketfs-embedded) mnt="$(mount_bucketfs "$EMB" --metadata-ttl 60)" ;;
    rclone-gcs) mnt="$(mount_rclone "emu:$EMULATOR_BUCKET/bench")" ;;
  esac
  drop_caches
  t0=$(now)
  lines=$(ls -l "$mnt/ls" | wc -l)
  t1=$(now)
  [ "$lines" -eq $((N + 1)) ] || { echo "bench: $kind listed $((lines - 1)) of $N entries" >&2; exit 1; }
  GETFATTR_SECS=
  if [ "${kind#bucketfs}" != "$kind" ]; then
    local found
    found=$(cd "$mnt/ls" && getfattr -d -- * 2>/dev/null | grep -c '^user.k="v"')
    t2=$(now)
    [ "$found" -eq "$N" ] || { echo "bench: getfattr saw $found of $N xattrs on $kind" >&2; exit 1; }
    GETFATTR_SECS=$(elapsed "$t1" "$t2")
  fi
  unmount "$mnt"
  LS_SECS=$(elapsed "$t0" "$t1")
}

for kind in bucketfs-gcs "${RCLONE_KINDS[@]}" bucketfs-embedded; do
  ls_runs=(); gf_runs=()
  for _ in $(seq 1 "$REPS"); do
    time_ls "$kind"
    ls_runs+=("$LS_SECS"); [ -n "$GETFATTR_SECS" ] && gf_runs+=("$GETFATTR_SECS")
  done
  RES[ls_$kind]=$(median "${ls_runs[@]}")
  [ ${#gf_runs[@]} -gt 0 ] && RES[gf_$kind]=$(median "${gf_runs[@]}")
  echo "bench: ls -l $kind runs: ${ls_runs[*]}${gf_runs:+; getfattr -d runs: ${gf_runs[*]}}" >&2
done

# --- (b) sequential read of MIB MiB -----------------------------------------------------------
BIG_URL="$ENDPOINT/storage/v1/b/$EMULATOR_BUCKET/o/bench%2Fread%2Fbig.bin?alt=media"
BFS_GCS="gs://$EMULATOR_BUCKET/bench"; RCLONE_GCS="emu:$EMULATOR_BUCKET/bench"
read_rows local bucketfs-embedded curl-gcs bucketfs-gcs "${RCLONE_KINDS[@]}"

# --- report -------------------------------------------------------------------------------------
echo
echo "== bucketfs benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, medians of $REPS cold runs)"
[ -n "$DROP_FAILED" ] && echo "   (could not drop the page cache: local-disk reads may be warm)"
echo
echo "(a) ls -l of $N objects, cold mount"
printf '  %-34s %8.3f s\n' "bucketfs, emulator" "${RES[ls_bucketfs-gcs]}"
if [ ${#RCLONE_KINDS[@]} -gt 0 ]; then
  printf '  %-34s %8.3f s\n' "rclone mount, same emulator" "${RES[ls_rclone-gcs]}"
  printf '  %-34s %8s   (rclone time / bucketfs time; > 1 means bucketfs is faster)\n' "ratio rclone/bucketfs" "$(ratio "${RES[ls_rclone-gcs]}" "${RES[ls_bucketfs-gcs]}")"
else
  echo "  rclone mount: could not talk to the emulator (see above); no rclone rows"
fi
printf '  %-34s %8.3f s   (rclone: no xattrs)\n' "then getfattr -d on all, bucketfs" "${RES[gf_bucketfs-gcs]}"
printf '  %-34s %8.3f s\n' "bucketfs, embedded bucket" "${RES[ls_bucketfs-embedded]}"
printf '  %-34s %8.3f s\n' "then getfattr -d on all, embedded" "${RES[gf_bucketfs-embedded]}"
echo
echo "(b) sequential read of $MIB MiB (dd bs=1M), page cache dropped, md5 checked once per row"
printf '  %-34s %8s MB/s\n' "local disk (dd), physical limit" "$(mbps "$MIB" "${RES[rd_local]}")"
printf '  %-34s %8s MB/s   = %s of local disk\n' "bucketfs, embedded bucket" "$(mbps "$MIB" "${RES[rd_bucketfs-embedded]}")" "$(ratio "${RES[rd_local]}" "${RES[rd_bucketfs-embedded]}")"
printf '  %-34s %8s MB/s   (the emulator'\''s own limit)\n' "curl straight from the emulator" "$(mbps "$MIB" "${RES[rd_curl-gcs]}")"
printf '  %-34s %8s MB/s   = %s of curl\n' "bucketfs, emulator" "$(mbps "$MIB" "${RES[rd_bucketfs-gcs]}")" "$(ratio "${RES[rd_curl-gcs]}" "${RES[rd_bucketfs-gcs]}")"
if [ ${#RCLONE_KINDS[@]} -gt 0 ]; then
  printf '  %-34s %8s MB/s   = %s of curl\n' "rclone mount, emulator" "$(mbps "$MIB" "${RES[rd_rclone-gcs]}")" "$(ratio "${RES[rd_curl-gcs]}" "${RES[rd_rclone-gcs]}")"
  printf '  %-34s %8s   (> 1 means bucketfs is faster)\n' "ratio bucketfs/rclone" "$(ratio "${RES[rd_rclone-gcs]}" "${RES[rd_bucketfs-gcs]}")"
fi
