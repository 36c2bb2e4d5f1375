#!/usr/bin/env bash
# Read benchmarks ("Reads at the speed of the network"), printed as RATIOS against a
# peer or a physical limit measured in the same run, with the issue's targets:
#
#  (1) cold sequential read of MIB MiB from the emulator: bucketfs vs `rclone mount` vs `curl`
#      straight from the emulator (the server's limit). Targets: bucketfs/curl >= 0.5,
#      bucketfs/rclone >= 4 (as throughput ratios).
#  (2) `tar -cf -` of a directory of SMALL_N x 32 KiB files plus one 64 MiB file, bucketfs vs
#      rclone mount, both through a proxy the bench starts (Tests/e2e/latencyproxy.py) that adds
#      DELAY_MS to every request and counts the requests by kind. Fresh mount each run; the
#      archive is checked file by file (Scripts/bench/tarcheck.py) after each timed run. A second
#      row does the same with the listing already cached (`ls -l` first, page cache dropped).
#      Target: rclone time / bucketfs time >= 5 with one request per small file.
#  (3) cold sequential read of MIB MiB from the embedded bucket vs `dd` from local disk (the
#      physical limit), page cache dropped. Target: bucketfs/disk >= 0.7.
#  (4) peak memory (VmHWM) of the mount process while PAR_N files of PAR_MIB MiB are read at once
#      (PAR_N parallel `cat`), from the emulator, next to the read-ahead budget: RSS - budget is the
#      fixed overhead. rclone's peak for the same reads as the peer.
#
# Starts its own emulator (EMULATOR_PORT, default 9521) and proxy (BENCH_PROXY_PORT, default 9522),
# unmounts everything on exit. Not part of the test suite; about 5-10 minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_MIB (256),
# BENCH_DELAY_MS (20), BENCH_SMALL_N (400), BENCH_PAR_N (16), BENCH_PAR_MIB (64),
# BENCH_BFS_OPTS (extra bucketfs mount options, e.g. "--read-ahead-mb 128"), BENCH_DIR, BENCH_KEEP,
# BENCH_ONLY (some of "reads tar par": the sections to run; all by default).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
MIB="${BENCH_MIB:-256}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SMALL_N="${BENCH_SMALL_N:-400}"
PAR_N="${BENCH_PAR_N:-16}"
PAR_MIB="${BENCH_PAR_MIB:-64}"
PORT="${EMULATOR_PORT:-9521}"
PROXY_PORT="${BENCH_PROXY_PORT:-9522}"
BUCKET=bucketfs-reads
ENDPOINT="http://127.0.0.1:$PORT"
PROXY="http://127.0.0.1:$PROXY_PORT"
ONLY="${BENCH_ONLY:-reads tar par}"
wants() { [[ " $ONLY " == *" $1 "* ]]; }
command -v rclone >/dev/null || { echo "bench: rclone is not installed (Scripts/setup.sh installs it)" >&2; exit 1; }
. Scripts/bench/lib.sh bucketfs-reads
rclone_remote emu "$ENDPOINT"
rclone_remote emuproxy "$PROXY"
declare -A RES
T_START=$(now)

# --- data ------------------------------------------------------------------------------------------
echo "bench: ${MIB} MiB reads, tar of $SMALL_N x 32 KiB + 64 MiB at +$DELAY_MS ms, $PAR_N x $PAR_MIB MiB at once; $REPS repetitions; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS" --log "$WORK/proxy-requests.log"

BIG="$WORK/big.bin"
head -c "$((MIB * 1048576))" /dev/urandom >"$BIG"
BIG_MD5="$(md5sum "$BIG" | cut -d' ' -f1)"
echo "bench: filling the emulator (${MIB} MiB, tar tree, $PAR_N x $PAR_MIB MiB)" >&2
"$PY" Scripts/bench/populate.py "$ENDPOINT" "$BUCKET" bench 0 "$BIG"
if wants tar; then
make_small_tree "$WORK/tartree/tar" "$SMALL_N"
"$PY" Scripts/bench/tarcheck.py --manifest "$WORK/tartree/tar" >"$WORK/tar.manifest"
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/tar --from "$WORK/tartree/tar"
rm -rf "$WORK/tartree"
fi
if wants par; then "$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/par "$PAR_N" "$((PAR_MIB * 1048576))"; fi
echo "bench: filling an embedded bucket" >&2
EMB="$WORK/embedded"
"$BIN" mb "$EMB" >/dev/null
mkdir -p "$WORK/tree/read"
ln "$BIG" "$WORK/tree/read/big.bin"
"$BIN" put -r "$WORK/tree" "$EMB" >/dev/null
rm -rf "$WORK/tree"
timeout 30 rclone --config "$RCLONE_CONF" lsf "emuproxy:$BUCKET/bench/read" 2>"$WORK/rclone-check.log" | grep -qx big.bin \
  || { echo "bench: rclone cannot talk to the emulator through the proxy: $(tail -1 "$WORK/rclone-check.log")" >&2; exit 1; }

GS=(--endpoint "$ENDPOINT" --anonymous)
BFS_GCS="gs://$BUCKET/bench"; RCLONE_GCS="emu:$BUCKET/bench"
BIG_URL="$ENDPOINT/storage/v1/b/$BUCKET/o/bench%2Fread%2Fbig.bin?alt=media"

# --- (1) and (3): cold sequential reads -----------------------------------------------------------
if wants reads; then read_rows curl-gcs bucketfs-gcs rclone-gcs local bucketfs-embedded; fi

# --- (2) tar through the latency proxy --------------------------------------------------------------
TAR_BYTES=
tar_run() {  # KIND VARIANT -> "seconds total list metadata media other" (fresh mount; VARIANT cold|listed)
  local mnt t0 t1 counts bytes
  case "$1" in
    bucketfs) mnt="$(mount_bucketfs "$BFS_GCS" --endpoint "$PROXY" --anonymous --read-only)" ;;
    rclone) mnt="$(mount_rclone "emuproxy:$BUCKET/bench")" ;;
  esac
  # listed: the kernel and the mount keep what `ls -l` fetched (no file data was read, so no
  # page cache to drop); cold: caches dropped after the mount
  if [ "$2" = listed ]; then ls -l "$mnt/tar" >/dev/null; else drop_caches; fi
  curl -sf -o /dev/null "$PROXY/__reset"
  t0=$(now)
  tar -cf - -C "$mnt" tar >"$WORK/tar.out"
  t1=$(now)
  counts=$(proxy_counts)
  unmount "$mnt"
  bytes=$("$PY" Scripts/bench/tarcheck.py "$WORK/tar.manifest" <"$WORK/tar.out") \
    || { echo "bench: tar through $1 ($2) read wrong bytes (BENCH_KEEP=1 keeps WORK/tar.out)" >&2; exit 1; }
  [ -n "${BENCH_KEEP:-}" ] || rm -f "$WORK/tar.out"
  echo "$(elapsed "$t0" "$t1") $counts $bytes"
}
for variant in cold listed; do
  wants tar || break
  for kind in bucketfs rclone; do
    runs=(); line=
    for _ in $(seq 1 "$REPS"); do
      line=$(tar_run "$kind" "$variant")
      runs+=("${line%% *}")
      echo "bench: tar $kind ($variant): ${line% *} (s, requests: total list metadata media other)" >&2
    done
    RES[tar_${kind}_$variant]=$(median "${runs[@]}")
    read -r _ total list meta media other TAR_BYTES <<<"$line"   # requests of the last run
    RES[req_${kind}_$variant]="$total $list $meta $media $other"
  done
done

# --- (4) peak memory while PAR_N files are read at once ------------------------------------------
budget_help=$("$BIN" mount --help | awk '/--read-ahead-mb/ {f = 1; next} f && /^ *--/ {f = 0} f {sub(/^ +/, ""); printf "%s ", $0}')
BUDGET=$(sed -n 's/.*(default: \([0-9]*\)).*/\1/p' <<<"$budget_help")
opt_budget=$(sed -n 's/.*--read-ahead-mb[= ]\([0-9]*\).*/\1/p' <<<"${BENCH_BFS_OPTS:-}")
BUDGET=${opt_budget:-$BUDGET}
running_any() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
par_run() {  # KIND -> "seconds peak_kib before_kib" (VmHWM after the reads; VmRSS before)
  local mnt pid before t0 t1 i peak rss readers=()
  case "$1" in
    bucketfs) mnt="$(mount_bucketfs "$BFS_GCS" "${GS[@]}" --read-only)"; pid=$(mount_pid "$mnt") ;;
    rclone) mnt="$(mount_rclone "$RCLONE_GCS")"; pid=$(pgrep -f -- "rclone .*mount .* $mnt " | head -1) ;;
  esac
  [ -n "$pid" ] || { echo "bench: no process found for the $1 mount $mnt" >&2; exit 1; }
  ls -l "$mnt/par" >/dev/null
  drop_caches
  before=$(kib "$pid" VmRSS)
  peak=$before
  t0=$(now)
  for i in $(seq 0 $((PAR_N - 1))); do
    (n=$(cat "$mnt/par/$(printf 'f%06d' "$i")" | wc -c); echo "$n" >"$WORK/par.$i") &
    readers+=("$!")
  done
  # VmHWM is the kernel's own peak; the polled VmRSS only backs it up (rclone and bucketfs alike)
  while running_any "${readers[@]}"; do
    rss=$(kib "$pid" VmRSS); [ "${rss:-0}" -gt "$peak" ] && peak=$rss; sleep 0.05
  done
  wait "${readers[@]}"
  t1=$(now)
  rss=$(kib "$pid" VmHWM); [ "${rss:-0}" -gt "$peak" ] && peak=$rss
  for i in $(seq 0 $((PAR_N - 1))); do
    [ "$(cat "$WORK/par.$i")" -eq $((PAR_MIB * 1048576)) ] || { echo "bench: $1 read $(cat "$WORK/par.$i") bytes of par file $i" >&2; exit 1; }
  done
  unmount "$mnt"
  echo "$(elapsed "$t0" "$t1") $peak $before"
}
for kind in bucketfs rclone; do
  wants par || break
  secs=(); peaks=(); befores=()
  for _ in $(seq 1 "$REPS"); do
    line=$(par_run "$kind")
    read -r s p b <<<"$line"
    secs+=("$s"); peaks+=("$p"); befores+=("$b")
  done
  RES[par_s_$kind]=$(median "${secs[@]}")
  RES[par_peak_$kind]=$(( $(median "${peaks[@]}") / 1024 ))
  RES[par_before_$kind]=$(( $(median "${befores[@]}") / 1024 ))
  echo "bench: $PAR_N parallel reads, $kind: ${secs[*]} s; peak ${peaks[*]} KiB; before ${befores[*]} KiB" >&2
done

# --- report -----------------------------------------------------------------------------------------
row() { printf '  %-44s %12s   %-28s %8s   %s\n' "$@"; }
target() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a") print "?"; else print (r + 0 >= t + 0 ? "met" : "not met") }'; }
echo
echo "== bucketfs read benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS runs, binary: $BIN_LABEL)"
[ -n "$DROP_FAILED" ] && echo "   (could not drop the page cache: local-disk reads may be warm)"
[ -n "${BENCH_BFS_OPTS:-}" ] && echo "   bucketfs mount options added: $BENCH_BFS_OPTS"
echo
printf '  %-44s %12s   %-28s %8s   %s\n' "what" "bucketfs" "peer / limit" "ratio" "target"
if wants reads; then
r1=$(ratio "${RES[rd_curl-gcs]}" "${RES[rd_bucketfs-gcs]}"); r2=$(ratio "${RES[rd_rclone-gcs]}" "${RES[rd_bucketfs-gcs]}")
echo "(1) cold sequential read of $MIB MiB, emulator"
row "bucketfs vs curl (the emulator's limit)" "$(mbps "$MIB" "${RES[rd_bucketfs-gcs]}") MB/s" "curl $(mbps "$MIB" "${RES[rd_curl-gcs]}") MB/s" "$r1" ">= 0.5: $(target "$r1" 0.5)"
row "bucketfs vs rclone mount" "" "rclone $(mbps "$MIB" "${RES[rd_rclone-gcs]}") MB/s" "$r2" ">= 4: $(target "$r2" 4)"
cpu_med() { median $(awk -v c="$2" '{print $c}' "$WORK/cpu-$1"); }  # KIND COLUMN (1 own, 2 emulator)
row "  CPU a read: reader + emulator (medians)" "$(cpu_med bucketfs-gcs 1) + $(cpu_med bucketfs-gcs 2) s" \
  "curl $(cpu_med curl 1) + $(cpu_med curl 2) s" "" "(the $(nproc) cores are shared)"
fi
if wants tar; then
echo "(2) tar -cf - of $SMALL_N x 32 KiB + 64 MiB ($TAR_BYTES bytes, checked), +$DELAY_MS ms a request, fresh mount"
for variant in cold listed; do
  read -r bt bl bm bd bo <<<"${RES[req_bucketfs_$variant]}"
  read -r rt rl rm rd ro <<<"${RES[req_rclone_$variant]}"
  r=$(ratio "${RES[tar_rclone_$variant]}" "${RES[tar_bucketfs_$variant]}")
  label="time"; [ "$variant" = listed ] && label="time, listing already cached"
  row "$label" "${RES[tar_bucketfs_$variant]} s" "rclone ${RES[tar_rclone_$variant]} s" "$r" ">= 5: $(target "$r" 5)"
  row "  requests, last run (list/meta/media/other)" "$bt ($bl/$bm/$bd/$bo)" "rclone $rt ($rl/$rm/$rd/$ro)" "" ""
  row "  requests per small file" "$(awk -v t="$bt" -v n="$SMALL_N" 'BEGIN { printf "%.2f", t / n }')" \
    "rclone $(awk -v t="$rt" -v n="$SMALL_N" 'BEGIN { printf "%.2f", t / n }')" "" "1 a file"
done
fi
if wants reads; then
r3=$(ratio "${RES[rd_local]}" "${RES[rd_bucketfs-embedded]}")
echo "(3) cold sequential read of $MIB MiB, embedded bucket"
row "bucketfs vs local disk (dd)" "$(mbps "$MIB" "${RES[rd_bucketfs-embedded]}") MB/s" "disk $(mbps "$MIB" "${RES[rd_local]}") MB/s" "$r3" ">= 0.7: $(target "$r3" 0.7)"
fi
if wants par; then
echo "(4) $PAR_N x $PAR_MIB MiB read at once (parallel cat), emulator"
row "peak RSS of the mount (VmHWM)" "${RES[par_peak_bucketfs]} MiB" "rclone ${RES[par_peak_rclone]} MiB" "" ""
row "  RSS before the reads" "${RES[par_before_bucketfs]} MiB" "rclone ${RES[par_before_rclone]} MiB" "" ""
row "  peak - RSS before (what the reads took)" "$(( ${RES[par_peak_bucketfs]} - ${RES[par_before_bucketfs]} )) MiB" \
  "rclone $(( ${RES[par_peak_rclone]} - ${RES[par_before_rclone]} )) MiB" "" ""
row "  read-ahead budget (--read-ahead-mb $BUDGET)" "$BUDGET MiB" "(mount-wide)" "" ""
row "  peak - budget (fixed overhead)" "$(( ${RES[par_peak_bucketfs]} - BUDGET )) MiB" "" "" ""
row "  time for all, aggregate" "${RES[par_s_bucketfs]} s" "rclone ${RES[par_s_rclone]} s" \
  "$(ratio "${RES[par_s_rclone]}" "${RES[par_s_bucketfs]}")" "(rclone/bucketfs)"
echo "   --read-ahead-mb in this binary's help: ${budget_help% }"
echo "   (the $PAR_N reads: $(mbps $((PAR_N * PAR_MIB)) "${RES[par_s_bucketfs]}") MB/s bucketfs, $(mbps $((PAR_N * PAR_MIB)) "${RES[par_s_rclone]}") MB/s rclone)"
fi
echo "   (whole bench $(elapsed "$T_START" "$(now)") s)"
