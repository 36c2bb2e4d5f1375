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
ROOT=$PWD

N="${BENCH_N:-5000}"
MIB="${BENCH_MIB:-256}"
REPS="${BENCH_REPS:-5}"
export EMULATOR_PORT="${EMULATOR_PORT:-9311}"
export EMULATOR_BUCKET="${EMULATOR_BUCKET:-bucketfs-bench}"
ENDPOINT="http://127.0.0.1:$EMULATOR_PORT"
PY="$ROOT/.venv/bin/python"

if [ -z "${BUCKETFS_BIN:-}" ]; then
  echo "bench: building bucketfs (release)" >&2
  swift build -c release --product bucketfs 2>&1 | tail -n 1 >&2
  BUCKETFS_BIN="$(swift build -c release --show-bin-path)/bucketfs"
fi
BIN="$BUCKETFS_BIN"
command -v rclone >/dev/null || { echo "bench: rclone is not installed (Scripts/setup.sh installs it)" >&2; exit 1; }

WORK="${BENCH_DIR:-$(mktemp -d /tmp/bucketfs-bench.XXXXXX)}"
mkdir -p "$WORK"
MOUNTS=()
RCLONE_PIDS=()
cleanup() {
  set +e
  for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -uz "$m" 2>/dev/null; done
  for p in "${RCLONE_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "${EMULATOR_PID:-}" ] && kill "$EMULATOR_PID" 2>/dev/null && wait "$EMULATOR_PID" 2>/dev/null
  [ -z "${BENCH_KEEP:-}" ] && rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
mbps() { awk -v s="$1" -v m="$MIB" 'BEGIN { printf "%.1f", m * 1048576 / s / 1e6 }'; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || DROP_FAILED=1; }
DROP_FAILED=

# --- mounts -------------------------------------------------------------------------------------
mount_bucketfs() {  # SOURCE [options...] -> prints the mount point
  local src="$1"; shift
  local mnt; mnt="$(mktemp -d "$WORK/mnt-bfs.XXXX")"
  MOUNTS+=("$mnt")
  "$BIN" mount "$src" "$mnt" --cache-dir "$mnt.cache" --log-file "$mnt.log" "$@" >&2
  echo "$mnt"
}
RCLONE_CONF="$WORK/rclone.conf"
cat >"$RCLONE_CONF" <<CONF
[emu]
type = google cloud storage
endpoint = $ENDPOINT
anonymous = true
no_check_bucket = true
bucket_policy_only = true
CONF
mount_rclone() {  # PATH-IN-BUCKET -> prints the mount point
  local mnt; mnt="$(mktemp -d "$WORK/mnt-rclone.XXXX")"
  MOUNTS+=("$mnt")
  rclone --config "$RCLONE_CONF" mount "emu:$EMULATOR_BUCKET/$1" "$mnt" --read-only \
    --log-file "$mnt.log" >/dev/null 2>&1 &
  RCLONE_PIDS+=("$!")
  for _ in $(seq 1 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { echo "bench: rclone mount failed; see $mnt.log" >&2; tail -5 "$mnt.log" >&2; return 1; }
  echo "$mnt"
}
unmount() { fusermount3 -u "$1" 2>/dev/null || fusermount3 -uz "$1"; for _ in $(seq 1 100); do mountpoint -q "$1" || break; sleep 0.05; done; }

# --- data ---------------------------------------------------------------------------------------
echo "bench: N=$N objects, ${MIB} MiB file, $REPS repetitions, work dir $WORK" >&2
# The emulator Scripts/emulator.sh runs (same package, flags and in-memory store), started through
# Scripts/bench/emulator.py, which only skips the stock emulator's O(N) re-serialisation after
# every insert so that filling it with N objects takes seconds instead of minutes.
if curl -s -o /dev/null "$ENDPOINT/"; then
  echo "bench: something already answers on $ENDPOINT; set EMULATOR_PORT" >&2; exit 1
fi
"$PY" "$ROOT/Scripts/bench/emulator.py" start --host=127.0.0.1 --port="$EMULATOR_PORT" --in-memory \
  --default-bucket="$EMULATOR_BUCKET" >"$WORK/emulator.log" 2>&1 &
EMULATOR_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "$ENDPOINT/" && break; sleep 0.1; done
curl -s -o /dev/null "$ENDPOINT/" || { echo "bench: the emulator did not start" >&2; tail "$WORK/emulator.log" >&2; exit 1; }
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
    rclone-gcs) mnt="$(mount_rclone bench)" ;;
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
read_secs() {  # FILE -> seconds for a cold sequential read (dd, 1 MiB blocks)
  drop_caches
  local t0 t1
  t0=$(now)
  dd if="$1" of=/dev/null bs=1M status=none
  t1=$(now)
  elapsed "$t0" "$t1"
}
check_md5() {  # FILE -> fails unless it reads back byte-identical (untimed)
  local sum; sum=$(md5sum <"$1" | cut -d' ' -f1)
  [ "$sum" = "$BIG_MD5" ] || { echo "bench: $1 read back with md5 $sum, want $BIG_MD5" >&2; exit 1; }
}
BIG_URL="$ENDPOINT/storage/v1/b/$EMULATOR_BUCKET/o/bench%2Fread%2Fbig.bin?alt=media"
curl_secs() {
  drop_caches
  local t0 t1
  t0=$(now)
  curl -sf -o /dev/null "$BIG_URL"
  t1=$(now)
  elapsed "$t0" "$t1"
}
read_kind() {  # KIND FIRST -> seconds (fresh mount per run; the first run also checks the md5)
  local mnt s
  case "$1" in
    local) read_secs "$BIG"; return ;;
    curl-gcs) [ "$2" = 1 ] && { curl -sf "$BIG_URL" >"$WORK/curl.bin"; check_md5 "$WORK/curl.bin"; rm -f "$WORK/curl.bin"; }
              curl_secs; return ;;
    bucketfs-embedded) mnt="$(mount_bucketfs "$EMB" --read-only)" ;;
    bucketfs-gcs) mnt="$(mount_bucketfs "gs://$EMULATOR_BUCKET/bench" "${GS[@]}" --read-only)" ;;
    rclone-gcs) mnt="$(mount_rclone bench)" ;;
  esac
  s=$(read_secs "$mnt/read/big.bin")
  [ "$2" = 1 ] && check_md5 "$mnt/read/big.bin"
  unmount "$mnt"
  echo "$s"
}
for kind in local bucketfs-embedded curl-gcs bucketfs-gcs "${RCLONE_KINDS[@]}"; do
  runs=()
  for i in $(seq 1 "$REPS"); do runs+=("$(read_kind "$kind" "$i")"); done
  RES[rd_$kind]=$(median "${runs[@]}")
  echo "bench: read $kind runs (s): ${runs[*]}" >&2
done

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
printf '  %-34s %8s MB/s\n' "local disk (dd), physical limit" "$(mbps "${RES[rd_local]}")"
printf '  %-34s %8s MB/s   = %s of local disk\n' "bucketfs, embedded bucket" "$(mbps "${RES[rd_bucketfs-embedded]}")" "$(ratio "${RES[rd_local]}" "${RES[rd_bucketfs-embedded]}")"
printf '  %-34s %8s MB/s   (the emulator'\''s own limit)\n' "curl straight from the emulator" "$(mbps "${RES[rd_curl-gcs]}")"
printf '  %-34s %8s MB/s   = %s of curl\n' "bucketfs, emulator" "$(mbps "${RES[rd_bucketfs-gcs]}")" "$(ratio "${RES[rd_curl-gcs]}" "${RES[rd_bucketfs-gcs]}")"
if [ ${#RCLONE_KINDS[@]} -gt 0 ]; then
  printf '  %-34s %8s MB/s   = %s of curl\n' "rclone mount, emulator" "$(mbps "${RES[rd_rclone-gcs]}")" "$(ratio "${RES[rd_curl-gcs]}" "${RES[rd_rclone-gcs]}")"
  printf '  %-34s %8s   (> 1 means bucketfs is faster)\n' "ratio bucketfs/rclone" "$(ratio "${RES[rd_rclone-gcs]}" "${RES[rd_bucketfs-gcs]}")"
fi
