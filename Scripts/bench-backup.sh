#!/usr/bin/env bash
# Backup tools through a gs:// mount ("restic and borg at one request per file"; "speculation
# only on evidence", docs/SEMANTICS.md §3.6). Two parts, one run:
#
# (1) Full backups and tar: `tar -cf - DIR`, `restic backup DIR` and `borg create REPO::A DIR`
# over the same tree of SMALL_N x 32 KiB files plus one 64 MiB file, each on a fresh mount behind
# a proxy that adds DELAY_MS to every request and counts the requests (Tests/e2e/latencyproxy.py),
# page cache dropped after the mount; beside them the same objects fetched by a plain client
# (`plain`: Scripts/bench/fetch_many.py, the listing then every object whole, CONC at once, CONC
# being --max-connections' default, 16), and `tar` through `rclone mount` (`rclone`, default VFS
# settings), both through the same proxy. For each: the time, and the media downloads per small
# object (media requests for the small files / SMALL_N; the ideal is 1), with the most any one
# small object was downloaded; the time as a ratio to tar's in the same run, and tar's speed as a
# fraction of the plain client's (plain time / tar time). Targets: restic and borg <= 1.05
# downloads per small object, time <= 1.3x tar's; tar >= 0.8 of the plain client.
#
# Each run is preceded by the same tool over a local copy of the tree (page cache warm): the
# tool's own cost, which no mount can go below, printed next to the mount's time; and by the same
# command over an empty directory: the tool's fixed cost (restic derives its key with scrypt, borg
# starts Python and opens its cache), whatever the tree. The time less it is what the files cost,
# printed beside the time, each with its ratio to tar's. And each run's CPU: the tool's, the
# daemon's, the emulator's, the proxy's, and their sum over the cores (a floor under the time).
#
# restic and borg write their repositories to local disk (a fresh one each run, made before the
# clock starts: restic unencrypted password "bench", borg `-e none`); what each backed up is checked
# by listing the archive (the number of files). tar's archive is checked file by file
# (Scripts/bench/tarcheck.py).
#
# (2) Incremental backups (BENCH_INC_TOOLS, default "rdiff-backup restic borg"): a tree of INC_N
# x 32 KiB files (default 50) backed up whole through a mount, then INC_K of them (default 2,
# spread over the tree) replaced behind the mount, and the tool run again on a fresh mount: the
# media GETs of that run (target: at most INC_K + 2), with the default options and with
# `--walk-ahead 0` (nothing fetched ahead: what the tool itself asked for). The bytes of the
# changed files are checked in the tool's repository.
#
# Starts its own emulator (EMULATOR_PORT, default 9502) and proxy (BENCH_PROXY_PORT, default
# 9503), unmounts everything on exit. Installs restic, borgbackup and rdiff-backup (Debian
# packages) when missing. Not part of the test suite; about 4 minutes at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_DELAY_MS (20),
# BENCH_SMALL_N (400), BENCH_CONC (16), BENCH_BFS_OPTS (extra bucketfs mount options),
# BENCH_TOOLS ("tar plain rclone restic borg"), BENCH_INC_TOOLS, BENCH_INC_N (50), BENCH_INC_K
# (2), BENCH_DIR, BENCH_KEEP (keep WORK: mount logs, the proxy's request log and its timing log,
# timing.log, each request's arrival and answer times), BENCH_STRACE=1
# (each tool run under strace -f, its opens, reads, fadvise and closes in WORK/strace-TOOL.N; the
# times are then not comparable).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SMALL_N="${BENCH_SMALL_N:-400}"
PORT="${EMULATOR_PORT:-9502}"
PROXY_PORT="${BENCH_PROXY_PORT:-9503}"
TOOLS="${BENCH_TOOLS:-tar plain rclone restic borg}"
INC_TOOLS="${BENCH_INC_TOOLS-rdiff-backup restic borg}"
INC_N="${BENCH_INC_N:-50}"
INC_K="${BENCH_INC_K:-2}"
CONC="${BENCH_CONC:-16}"
BUCKET=bucketfs-backup
ENDPOINT="http://127.0.0.1:$PORT"
PROXY="http://127.0.0.1:$PROXY_PORT"
need=()
for t in $TOOLS $INC_TOOLS; do
  case "$t" in borg) pkg=borgbackup ;; tar|plain) continue ;; *) pkg=$t ;; esac
  command -v "$t" >/dev/null || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
. Scripts/bench/lib.sh bucketfs-backup
declare -A RES
T_START=$(now)

echo "bench: $TOOLS over $SMALL_N x 32 KiB + 64 MiB at +$DELAY_MS ms a request; $REPS repetitions; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
REQLOG="$WORK/proxy-requests.log"
start_latency_proxy "$PORT" "$PROXY_PORT" "$DELAY_MS" --log "$REQLOG" --timing-log "$WORK/timing.log"

make_small_tree "$WORK/tree/tree" "$SMALL_N"
"$PY" Scripts/bench/tarcheck.py --manifest "$WORK/tree/tree" >"$WORK/tar.manifest"
echo "bench: filling the emulator" >&2
"$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench/tree --from "$WORK/tree/tree"
LOCAL="$WORK/tree"  # the same tree on local disk
rclone_remote emuproxy "$PROXY"
BFS_GCS="gs://$BUCKET/bench"
export RESTIC_PASSWORD=bench BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
export BORG_BASE_DIR="$WORK/borg-home" XDG_CACHE_HOME="$WORK/cache-home"

# Media requests for the small objects in the proxy's log from line FROM on:
# "downloads_per_object most_for_one_object objects_downloaded"
small_downloads() {
  tail -n +"$1" "$REQLOG" | "$PY" -c '
import collections, re, sys, urllib.parse
n = int(sys.argv[1]); c = collections.Counter()
for line in sys.stdin:
    kind, _, target = line.rstrip("\n").split(" ", 2)
    if kind != "media": continue
    path = urllib.parse.unquote(target.split("?")[0])
    m = re.search(r"/tree/(s\d+)$", path)
    if m: c[m.group(1)] += 1
print(f"{sum(c.values()) / n:.2f}", max(c.values(), default=0), len(c))' "$SMALL_N"
}

run_tool() {  # TOOL RUN -> "seconds per_object most objects total list metadata media other"
  local mnt t0 t1 counts from repo files
  repo="$WORK/repo-$1"; rm -rf "$repo" "$WORK/tar.out"
  case "$1" in
    restic) restic init -q --repo "$repo" >/dev/null ;;
    borg) borg init -e none "$repo" >/dev/null ;;
  esac
  case "$1" in
    plain) mnt= ;;
    rclone) mnt="$(mount_rclone "emuproxy:$BUCKET/bench")" ;;
    *) mnt="$(mount_bucketfs "$BFS_GCS" --endpoint "$PROXY" --anonymous --read-only)" ;;
  esac
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  from=$(( $(wc -l <"$REQLOG") + 1 ))
  local wrap=()
  [ -n "${BENCH_STRACE:-}" ] && wrap=(strace -f -tt -e trace=openat,open,read,pread64,close,fadvise64,lseek,getdents64 -o "$WORK/strace-$1.$2")
  local e0 p0 cpu
  e0=$(cpu_secs "$EMU_PID"); p0=$(cpu_secs "$PROXY_PID")
  t0=$(now)
  # each tool in a subshell whose `times` gives the tool's own CPU (children's user and system)
  case "$1" in
    tar|rclone) ("${wrap[@]}" tar -cf - -C "$mnt" tree >"$WORK/tar.out" && times >"$WORK/times") ;;
    plain) ("$PY" Scripts/bench/fetch_many.py "$PROXY" "$BUCKET" bench/tree "$CONC" >"$WORK/plain.out" && times >"$WORK/times") ;;
    restic) (cd "$mnt" && "${wrap[@]}" restic backup -q --repo "$repo" tree >/dev/null && times >"$WORK/times") ;;
    borg) (cd "$mnt" && "${wrap[@]}" borg create "$repo::A" tree && times >"$WORK/times") ;;
  esac
  t1=$(now)
  # CPU seconds of the run: the tool, the bucketfs daemon (since its mount), the emulator, the proxy
  cpu="$(children_cpu "$WORK/times")"
  if [ "$1" = tar ] || [ "$1" = restic ] || [ "$1" = borg ]; then cpu="$cpu $(cpu_secs "$(mount_pid "$mnt")")"; else cpu="$cpu 0"; fi
  cpu="$cpu $(awk -v a="$e0" -v b="$(cpu_secs "$EMU_PID")" 'BEGIN { printf "%.2f", b - a }')"
  cpu="$cpu $(awk -v a="$p0" -v b="$(cpu_secs "$PROXY_PID")" 'BEGIN { printf "%.2f", b - a }')"
  counts=$(proxy_counts)
  local per; per=$(small_downloads "$from")
  [ -n "$mnt" ] && unmount "$mnt"
  local secs; secs=$(elapsed "$t0" "$t1")
  case "$1" in
    plain) read -r secs files _ <"$WORK/plain.out"; [ "$files" -eq $((SMALL_N + 1)) ] \
             || { echo "bench: the plain client fetched $files objects" >&2; exit 1; } ;;
    tar|rclone) "$PY" Scripts/bench/tarcheck.py "$WORK/tar.manifest" <"$WORK/tar.out" >/dev/null \
           || { echo "bench: tar read wrong bytes" >&2; exit 1; }; files=$((SMALL_N + 1)) ;;
    restic) files=$(restic ls -q --repo "$repo" latest | grep -c '^/tree/') ;;
    borg) files=$(borg list "$repo::A" --format '{type}{NL}' | grep -c '^-') ;;
  esac
  [ "$files" -eq $((SMALL_N + 1)) ] || { echo "bench: $1 backed up $files files, not $((SMALL_N + 1))" >&2; exit 1; }
  rm -rf "$repo" "$WORK/tar.out"
  echo "$secs $per $counts $cpu"
}

local_run() {  # TOOL DIR -> seconds for the tool over DIR/tree on local disk (page cache warm), a
  # fresh repository made before the clock starts. Over the local copy of the tree: the tool's own
  # cost, which no mount goes below. Over an empty directory: what the tool pays before and after
  # any file (restic derives its key with scrypt, borg starts Python and opens its cache).
  local repo="$WORK/repo-local-$1" t0 t1
  rm -rf "$repo"
  case "$1" in
    restic) restic init -q --repo "$repo" >/dev/null ;;
    borg) borg init -e none "$repo" >/dev/null ;;
  esac
  cat "$2"/tree/* >/dev/null 2>&1 || true
  t0=$(now)
  case "$1" in
    tar) tar -cf - -C "$2" tree >"$WORK/tar-local.out" ;;
    restic) (cd "$2" && restic backup -q --repo "$repo" tree >/dev/null) ;;
    borg) (cd "$2" && borg create "$repo::A" tree) ;;
  esac
  t1=$(now)
  rm -rf "$repo" "$WORK/tar-local.out"
  elapsed "$t0" "$t1"
}
mkdir -p "$WORK/empty/tree"

declare -A runs=() localruns=() startruns=()
for i in $(seq 1 "$REPS"); do
  # the tools take turns within each repetition, so a slow spell of the machine falls on all
  for tool in $TOOLS; do
    case "$tool" in
      plain|rclone) localruns[$tool]+=" 0"; startruns[$tool]+=" 0" ;;  # no tool of its own to start
      *) localruns[$tool]+=" $(local_run "$tool" "$LOCAL")"; startruns[$tool]+=" $(local_run "$tool" "$WORK/empty")" ;;
    esac
    line=$(run_tool "$tool" "$i")
    echo "bench: $tool run $i: $line (s, downloads per small object, most for one, objects; requests: total list metadata media other; CPU s: tool bucketfs emulator proxy)" >&2
    runs[$tool]+=" ${line%% *}"
    RES[last_$tool]="$line"
  done
done
for tool in $TOOLS; do
  # shellcheck disable=SC2086
  RES[t_$tool]=$(median ${runs[$tool]})
  # shellcheck disable=SC2086
  RES[l_$tool]=$(median ${localruns[$tool]})
  # shellcheck disable=SC2086
  RES[s_$tool]=$(median ${startruns[$tool]})
  RES[n_$tool]=$(awk -v a="${RES[t_$tool]}" -v b="${RES[s_$tool]}" 'BEGIN { printf "%.3f", a - b }')
done

# --- (2) incremental backups: what changed, and nothing more -----------------------------------
INC_CHANGED=$(awk -v n="$INC_N" -v k="$INC_K" 'BEGIN { for (j = 0; j < k; j++) printf "%d ", int(n * (j + 0.5) / k) }')
if [ -n "$INC_TOOLS" ]; then
  "$PY" - "$WORK/inc/tree" "$INC_N" <<'PYEOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
os.makedirs(root)
for i in range(n):
    open(f"{root}/f{i:03d}", "wb").write(os.urandom(32768))
PYEOF
  echo "bench: filling the emulator (incremental tree: $INC_N files, changing $INC_CHANGED)" >&2
  "$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench-inc/tree --from "$WORK/inc/tree"
fi
inc_backup() {  # TOOL REPO MOUNTPOINT: one backup of MOUNTPOINT/tree into REPO (made if missing)
  case "$1" in
    rdiff-backup) rdiff-backup backup "$3/tree" "$2" >/dev/null ;;
    restic) [ -d "$2" ] || restic init -q --repo "$2" >/dev/null
            (cd "$3" && restic backup -q --repo "$2" tree >/dev/null) ;;
    borg) [ -d "$2" ] || borg init -e none "$2" >/dev/null
          (cd "$3" && borg create "$2::$(date +%s%N)" tree) ;;
  esac
}
inc_bytes() {  # TOOL REPO I: the bytes of tree/fIII in the tool's latest backup, to stdout
  local f; f=$(printf 'f%03d' "$3")
  case "$1" in
    rdiff-backup) cat "$2/$f" ;;
    restic) restic dump -q --repo "$2" latest "/tree/$f" ;;
    borg) borg extract --stdout "$2::$(borg list --short --last 1 "$2")" "tree/$f" ;;
  esac
}
inc_mount() {  # MOUNTPOINT [options...]: a mount at a fixed point (restic finds its parent snapshot by the path)
  local mnt="$1"; shift
  mkdir -p "$mnt"
  # shellcheck disable=SC2086
  "$BIN" mount "gs://$BUCKET/bench-inc" "$mnt" --endpoint "$PROXY" --anonymous --read-only --cache-dir "$mnt.cache" \
    --log-file "$mnt.log" "$@" ${BENCH_BFS_OPTS:-} >&2
}
inc_run() {  # TOOL LABEL [mount options...] -> "media total" of the incremental run
  local tool="$1" label="$2"; shift 2
  local repo="$WORK/inc-repo-$tool-$label" mnt="$WORK/mnt-inc" i c
  rm -rf "$repo" "$WORK/inc/change"
  inc_mount "$mnt" "$@"
  inc_backup "$tool" "$repo" "$mnt"
  unmount "$mnt"
  sleep 1.1  # a new mtime in whole seconds too
  mkdir -p "$WORK/inc/change"
  for i in $INC_CHANGED; do head -c 32768 /dev/urandom >"$WORK/inc/change/$(printf 'f%03d' "$i")"; done
  "$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" bench-inc/tree --from "$WORK/inc/change"
  inc_mount "$mnt" "$@"
  drop_caches
  curl -sf -o /dev/null "$PROXY/__reset"
  inc_backup "$tool" "$repo" "$mnt"
  c=$(proxy_counts)
  unmount "$mnt"
  for i in $INC_CHANGED; do
    cmp -s <(inc_bytes "$tool" "$repo" "$i") "$WORK/inc/change/$(printf 'f%03d' "$i")" \
      || { echo "bench: $tool's backup of f$i is not the changed file" >&2; exit 1; }
  done
  rm -rf "$repo"
  read -r total _ _ media _ <<<"$c"
  echo "$media $total"
}
for tool in $INC_TOOLS; do
  export BORG_BASE_DIR="$WORK/borg-home-inc-$tool"
  read -r RES[inc_${tool}_default] RES[incall_${tool}_default] <<<"$(inc_run "$tool" default)"
  read -r RES[inc_${tool}_off] RES[incall_${tool}_off] <<<"$(inc_run "$tool" off --walk-ahead 0)"
  echo "bench: incremental $tool: ${RES[inc_${tool}_default]} media GETs (--walk-ahead 0: ${RES[inc_${tool}_off]}) for $INC_K changed of $INC_N" >&2
done

echo
echo "== bucketfs backup benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS runs, binary $BIN)"
echo "   $SMALL_N x 32 KiB + one 64 MiB object, +$DELAY_MS ms a request, fresh mount, page cache dropped"
[ -n "$DROP_FAILED" ] && echo "   (could not drop the page cache)"
[ -n "${BENCH_BFS_OPTS:-}" ] && echo "   bucketfs mount options added: $BENCH_BFS_OPTS"
echo
printf '| %-26s | %-22s | %-10s | %-24s | %-10s | %-36s | %-30s | %-16s | %-30s |\n' "reader" "time (runs)" "vs tar" "less its start (empty dir)" "vs tar" "media downloads per small object (ideal 1)" "requests, last run" "local disk (warm)" "CPU s, last run: tool+bucketfs+emulator+proxy = sum (sum/$(nproc) cores)"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' "----------------------------" "------------------------" "------------" "--------------------------" "------------" "--------------------------------------" "--------------------------------" "------------------" "--------------------------------"
for tool in $TOOLS; do
  read -r _ per most objs total list meta media other ctool cbfs cemu cproxy <<<"${RES[last_$tool]}"
  cpu=$(awk -v a="$ctool" -v b="$cbfs" -v c="$cemu" -v d="$cproxy" -v n="$(nproc)" \
    'BEGIN { s = a + b + c + d; printf "%.2f+%.2f+%.2f+%.2f = %.2f (%.2f s)", a, b, c, d, s, s / n }')
  case "$tool" in
    tar) label='`tar -cf - DIR`' ;;
    plain) label="plain client, $CONC at once" ;;
    rclone) label='`tar` through `rclone mount`' ;;
    restic) label='`restic backup DIR`' ;;
    borg) label='`borg create REPO::A DIR`' ;;
  esac
  vs=n/a; [ -n "${RES[t_tar]:-}" ] && vs="$(ratio "${RES[t_$tool]}" "${RES[t_tar]}")x"
  vsn=n/a; [ -n "${RES[n_tar]:-}" ] && vsn="$(ratio "${RES[n_$tool]}" "${RES[n_tar]}")x"
  printf '| %-26s | %-22s | %-10s | %-24s | %-10s | %-36s | %-30s | %-16s | %-30s |\n' "$label" "${RES[t_$tool]} s (${runs[$tool]# })" "$vs" \
    "${RES[n_$tool]} s (start ${RES[s_$tool]} s)" "$vsn" \
    "$per (at most $most for one; $objs objects)" "$total ($list list, $meta meta, $media media, $other other)" "${RES[l_$tool]} s" "$cpu"
done
echo "   (sum/cores: the time this machine's cores need for the run's CPU alone, a floor under its time)"
echo "   (less its start: the time less the same command's over an empty directory, the tool's fixed cost)"
echo "   targets: restic and borg <= 1.05 downloads per small object and <= 1.3x tar's time"
if [ -n "${RES[t_tar]:-}" ] && [ -n "${RES[t_plain]:-}" ]; then
  echo "   tar's speed / the plain client's ($CONC at once; plain time / tar time, target 0.8 or more): $(ratio "${RES[t_plain]}" "${RES[t_tar]}")"
fi
if [ -n "${RES[t_tar]:-}" ] && [ -n "${RES[t_rclone]:-}" ]; then
  echo "   tar through bucketfs / through rclone (rclone time / bucketfs time): $(ratio "${RES[t_rclone]}" "${RES[t_tar]}")x faster"
fi
if [ -n "$INC_TOOLS" ]; then
  echo
  echo "   incremental backups: $INC_N x 32 KiB, $INC_K changed behind the mount, the run after (+$DELAY_MS ms a request, fresh mount)"
  echo "   | tool | media GETs, default options (target <= $((INC_K + 2))) | media GETs, --walk-ahead 0 | requests, default options |"
  echo "   |------|------|------|------|"
  for tool in $INC_TOOLS; do
    case "$tool" in restic) v=$(restic version | cut -d' ' -f1-2) ;; *) v=$("$tool" --version 2>&1 | head -1) ;; esac
    echo "   | $tool ($v) | ${RES[inc_${tool}_default]} | ${RES[inc_${tool}_off]} | ${RES[incall_${tool}_default]} |"
  done
fi
echo "   (whole bench $(elapsed "$T_START" "$(now)") s)"
