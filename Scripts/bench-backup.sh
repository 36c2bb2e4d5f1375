#!/usr/bin/env bash
# Backup tools through a gs:// mount ("restic and borg at tar's pace through the mount, on any tree
# layout"; "speculation only on evidence", docs/SEMANTICS.md §3.6). Two parts, one run:
#
# (1) Full backups and tar, on each tree layout (BENCH_LAYOUTS, default "first last none") behind
# each server (BENCH_SERVERS, default "threaded serial"). A layout is SMALL_N x 32 KiB files
# sNNNN plus: `first` one 64 MiB file that sorts before them (big.bin), `last` one that sorts
# after them (zz-big.bin), `none` no large file. Each object store is the threaded emulator behind
# a proxy that adds DELAY_MS to every request and counts the requests (Tests/e2e/latencyproxy.py):
# `threaded` lets every request through at once, `serial` lets one at a time reach the emulator
# (--max-upstream 1: a server that serves one request at a time; the rest wait at the proxy,
# their added delay spent at once). The tools (BENCH_TOOLS, default "tar tar2 plain restic borg"):
# `tar -cf - DIR`, `tar2` (tar twice on one mount, the page cache dropped between: the second
# run's time, with its ratio to the first's), `restic backup DIR`, `borg create REPO::A DIR`, each
# on a fresh mount, the page cache dropped after the mount; `plain`, the same objects fetched by a
# plain client (Scripts/bench/fetch_many.py, the listing then every object whole, CONC at once,
# CONC being --max-connections' default, 16); and `rclone` (`tar` through `rclone mount`, default
# VFS settings; not run unless named). For each, medians of REPS runs:
#   - the time, and the tool's time over a local copy of the tree (page cache warm: the tool's own
#     cost, which no mount goes below, fixed start included), and what the mount adds (the
#     difference), with its ratio to what it adds to tar;
#   - media downloads per small object (media requests for the small files / SMALL_N; ideal 1),
#     and the most for any one;
#   - media GETs in flight on average, from the proxy's timing log: the small files' GETs (the
#     walk's; the sum of their durations over the span from the first one's arrival to the last
#     one's answer) and all media GETs (the large file's parts too);
#   - the plain client's time / the tool's (1: as fast as 16 plain GETs at once).
# Targets: what the mount adds to restic and borg <= 1.2x what it adds to tar, <= 1.05
# downloads per small object; tar's small-file GETs >= 10 in flight; tar >= 0.7 of the plain client
# on `none`; tar2 <= 1.1x the first tar.
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
# changed files are checked in the tool's repository. Behind the threaded proxy.
#
# Starts its own emulator (EMULATOR_PORT, default 9502) and proxies (BENCH_PROXY_PORT, default
# 9503, threaded; the next port, serial), unmounts everything on exit. Installs restic, borgbackup
# and rdiff-backup (Debian packages) when missing. Not part of the test suite; about 10 minutes
# at the defaults.
# Environment: BUCKETFS_BIN (default: build release), BENCH_REPS (3), BENCH_DELAY_MS (20),
# BENCH_SMALL_N (400), BENCH_CONC (16), BENCH_BFS_OPTS (extra bucketfs mount options),
# BENCH_TOOLS, BENCH_LAYOUTS, BENCH_SERVERS, BENCH_INC_TOOLS, BENCH_INC_N (50), BENCH_INC_K (2),
# BENCH_DIR, BENCH_KEEP (keep WORK: mount logs, the proxies' request logs and timing logs,
# timing-SERVER.log, each request's arrival and answer times), BENCH_STRACE=1 (each tool run under
# strace -f, its opens, reads, fadvise and closes in WORK/strace-TOOL.LAYOUT.SERVER.N; the times
# are then not comparable; Scripts/bench/open_order.py turns one into an open order).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${BENCH_REPS:-3}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SMALL_N="${BENCH_SMALL_N:-400}"
PORT="${EMULATOR_PORT:-9502}"
PROXY_PORT="${BENCH_PROXY_PORT:-9503}"
TOOLS="${BENCH_TOOLS:-tar tar2 plain restic borg}"
LAYOUTS="${BENCH_LAYOUTS:-first last none}"
SERVERS="${BENCH_SERVERS:-threaded serial}"
INC_TOOLS="${BENCH_INC_TOOLS-rdiff-backup restic borg}"
INC_N="${BENCH_INC_N:-50}"
INC_K="${BENCH_INC_K:-2}"
CONC="${BENCH_CONC:-16}"
BUCKET=bucketfs-backup
ENDPOINT="http://127.0.0.1:$PORT"
need=()
for t in $TOOLS $INC_TOOLS; do
  case "$t" in borg) pkg=borgbackup ;; tar|tar2|plain) continue ;; *) pkg=$t ;; esac
  command -v "$t" >/dev/null || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
. Scripts/bench/lib.sh bucketfs-backup
declare -A RES
T_START=$(now)

echo "bench: $TOOLS over $SMALL_N x 32 KiB (layouts: $LAYOUTS; servers: $SERVERS) at +$DELAY_MS ms a request; $REPS repetitions; work dir $WORK" >&2
start_emulator "$PORT" "$BUCKET"
declare -A PROXY_URL PROXY_PIDS
for server in $SERVERS; do
  case "$server" in
    threaded) pport=$PROXY_PORT; limit=() ;;
    serial) pport=$((PROXY_PORT + 1)); limit=(--max-upstream 1) ;;
    *) echo "bench: unknown server $server (threaded, serial)" >&2; exit 1 ;;
  esac
  start_latency_proxy "$PORT" "$pport" "$DELAY_MS" "${limit[@]}" --log "$WORK/proxy-requests-$server.log" --timing-log "$WORK/timing-$server.log"
  PROXY_URL[$server]="http://127.0.0.1:$pport"
  PROXY_PIDS[$server]=$PROXY_PID
  rclone_remote "emu-$server" "${PROXY_URL[$server]}"
done
use_server() {  # SERVER: the proxy the next runs go through
  SERVER=$1; PROXY="${PROXY_URL[$1]}"; PROXY_PID="${PROXY_PIDS[$1]}"
  REQLOG="$WORK/proxy-requests-$1.log"; TIMING="$WORK/timing-$1.log"
}

for layout in $LAYOUTS; do
  case "$layout" in
    first) big=big.bin ;;
    last) big=zz-big.bin ;;
    none) big= ;;
    *) echo "bench: unknown layout $layout (first, last, none)" >&2; exit 1 ;;
  esac
  make_small_tree "$WORK/tree-$layout/tree" "$SMALL_N" "$big"
  "$PY" Scripts/bench/tarcheck.py --manifest "$WORK/tree-$layout/tree" >"$WORK/tar-$layout.manifest"
  echo "bench: filling the emulator ($layout)" >&2
  "$PY" Scripts/bench/fill.py "$ENDPOINT" "$BUCKET" "bench/$layout/tree" --from "$WORK/tree-$layout/tree"
done
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

tar_into() {  # MOUNTPOINT [wrap...]: tar of MOUNTPOINT/tree into WORK/tar.out
  local mnt=$1; shift
  "$@" tar -cf - -C "$mnt" tree >"$WORK/tar.out"
}

# One run of TOOL on LAYOUT behind the current server -> "seconds per_object most objects
# small_in_flight all_in_flight total list metadata media other cpu_tool cpu_bucketfs cpu_emulator
# cpu_proxy"; for tar2 the first tar's seconds go to WORK/tar2.first.
run_tool() {  # TOOL LAYOUT RUN
  local tool=$1 layout=$2 mnt t0 t1 counts from repo files objects=$((SMALL_N + 1))
  [ "$layout" = none ] && objects=$SMALL_N
  repo="$WORK/repo-$tool"; rm -rf "$repo" "$WORK/tar.out"
  case "$tool" in
    restic) restic init -q --repo "$repo" >/dev/null ;;
    borg) borg init -e none "$repo" >/dev/null ;;
  esac
  case "$tool" in
    plain) mnt= ;;
    rclone) mnt="$(mount_rclone "emu-$SERVER:$BUCKET/bench/$layout")" ;;
    *) mnt="$(mount_bucketfs "gs://$BUCKET/bench/$layout" --endpoint "$PROXY" --anonymous --read-only)" ;;
  esac
  drop_caches
  if [ "$tool" = tar2 ]; then
    local f0 f1
    f0=$(now); tar_into "$mnt"; f1=$(now)
    "$PY" Scripts/bench/tarcheck.py "$WORK/tar-$layout.manifest" <"$WORK/tar.out" >/dev/null \
      || { echo "bench: tar read wrong bytes" >&2; exit 1; }
    elapsed "$f0" "$f1" >"$WORK/tar2.first"
    drop_caches
  fi
  curl -sf -o /dev/null "$PROXY/__reset"
  from=$(( $(wc -l <"$REQLOG") + 1 ))
  local wrap=()
  [ -n "${BENCH_STRACE:-}" ] && wrap=(strace -f -tt -e trace=openat,open,read,pread64,close,fadvise64,lseek,getdents64 -o "$WORK/strace-$tool.$layout.$SERVER.$3")
  local e0 p0 cpu
  e0=$(cpu_secs "$EMU_PID"); p0=$(cpu_secs "$PROXY_PID")
  t0=$(now)
  # each tool in a subshell whose `times` gives the tool's own CPU (children's user and system)
  case "$tool" in
    tar|tar2|rclone) (tar_into "$mnt" "${wrap[@]}" && times >"$WORK/times") ;;
    plain) ("$PY" Scripts/bench/fetch_many.py "$PROXY" "$BUCKET" "bench/$layout/tree" "$CONC" >"$WORK/plain.out" && times >"$WORK/times") ;;
    restic) (cd "$mnt" && "${wrap[@]}" restic backup -q --repo "$repo" tree >/dev/null && times >"$WORK/times") ;;
    borg) (cd "$mnt" && "${wrap[@]}" borg create "$repo::A" tree && times >"$WORK/times") ;;
  esac
  t1=$(now)
  # CPU seconds of the run: the tool, the bucketfs daemon (since its mount), the emulator, the proxy
  cpu="$(children_cpu "$WORK/times")"
  case "$tool" in plain|rclone) cpu="$cpu 0" ;; *) cpu="$cpu $(cpu_secs "$(mount_pid "$mnt")")" ;; esac
  cpu="$cpu $(awk -v a="$e0" -v b="$(cpu_secs "$EMU_PID")" 'BEGIN { printf "%.2f", b - a }')"
  cpu="$cpu $(awk -v a="$p0" -v b="$(cpu_secs "$PROXY_PID")" 'BEGIN { printf "%.2f", b - a }')"
  counts=$(proxy_counts)
  local per; per=$(small_downloads "$from")
  [ -n "$mnt" ] && unmount "$mnt"
  sleep 0.2  # the proxy writes a request's timing line once its answer is sent
  local flight; flight=$("$PY" Scripts/bench/in_flight.py "$TIMING" "$t0" "$t1")
  local secs; secs=$(elapsed "$t0" "$t1")
  case "$tool" in
    plain) read -r secs files _ <"$WORK/plain.out" ;;
    tar|tar2|rclone) "$PY" Scripts/bench/tarcheck.py "$WORK/tar-$layout.manifest" <"$WORK/tar.out" >/dev/null \
           || { echo "bench: tar read wrong bytes" >&2; exit 1; }; files=$objects ;;
    restic) files=$(restic ls -q --repo "$repo" latest | grep -c '^/tree/') ;;
    borg) files=$(borg list "$repo::A" --format '{type}{NL}' | grep -c '^-') ;;
  esac
  [ "$files" -eq "$objects" ] || { echo "bench: $tool backed up $files files, not $objects" >&2; exit 1; }
  rm -rf "$repo" "$WORK/tar.out"
  echo "$secs $per $flight $counts $cpu"
}

local_run() {  # TOOL DIR -> seconds for the tool over DIR/tree on local disk (page cache warm), a
  # fresh repository made before the clock starts: the tool's own cost, which no mount goes below.
  local repo="$WORK/repo-local-$1" t0 t1
  rm -rf "$repo"
  case "$1" in
    restic) restic init -q --repo "$repo" >/dev/null ;;
    borg) borg init -e none "$repo" >/dev/null ;;
  esac
  cat "$2"/tree/* >/dev/null 2>&1 || true
  t0=$(now)
  case "$1" in
    tar|tar2) tar -cf - -C "$2" tree | cat >/dev/null ;;  # through a pipe: tar skips reading into /dev/null
    restic) (cd "$2" && restic backup -q --repo "$repo" tree >/dev/null) ;;
    borg) (cd "$2" && borg create "$repo::A" tree) ;;
  esac
  t1=$(now)
  rm -rf "$repo"
  elapsed "$t0" "$t1"
}

declare -A runs=() localruns=() firsts=()
for i in $(seq 1 "$REPS"); do
  for layout in $LAYOUTS; do
    for server in $SERVERS; do
      use_server "$server"
      # the tools take turns within each repetition, so a slow spell of the machine falls on all
      for tool in $TOOLS; do
        k="$tool.$layout.$server"
        case "$tool" in
          plain|rclone) localruns[$k]+=" 0" ;;  # no tool of its own
          *) localruns[$k]+=" $(local_run "$tool" "$WORK/tree-$layout")" ;;
        esac
        line=$(run_tool "$tool" "$layout" "$i")
        [ "$tool" = tar2 ] && firsts[$k]+=" $(cat "$WORK/tar2.first")"
        echo "bench: $tool $layout $server run $i: $line (s, downloads per small object, most for one, objects, small-file GETs in flight, media GETs in flight; requests: total list metadata media other; CPU s: tool bucketfs emulator proxy)" >&2
        runs[$k]+=" ${line%% *}"
        RES[last_$k]="$line"
      done
    done
  done
done

# --- (2) incremental backups: what changed, and nothing more -----------------------------------
[ -n "$INC_TOOLS" ] && use_server "$(echo "$SERVERS" | awk '{print $1}')"
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
echo "== bucketfs backup benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $REPS runs, binary: $BIN_LABEL)"
echo "   $SMALL_N x 32 KiB (+ one 64 MiB object sorting first / last / none), +$DELAY_MS ms a request, fresh mount, page cache dropped"
[ -n "$DROP_FAILED" ] && echo "   (could not drop the page cache)"
[ -n "${BENCH_BFS_OPTS:-}" ] && echo "   bucketfs mount options added: $BENCH_BFS_OPTS"
for layout in $LAYOUTS; do
  for server in $SERVERS; do
    echo
    echo "   layout $layout, server $server"
    printf '| %-22s | %-30s | %-8s | %-14s | %-12s | %-22s | %-14s | %-8s | %-36s |\n' "reader" "time (runs)" "local" "the mount adds" "vs tar's" "media GETs per small" "GETs in flight" "plain/it" "CPU s, last run: tool+bfs+emu+proxy"
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' "------------------------" "--------------------------------" "----------" "----------------" "--------------" "------------------------" "----------------" "----------" "--------------------------------------"
    ktar="tar.$layout.$server"; kplain="plain.$layout.$server"
    for tool in $TOOLS; do
      k="$tool.$layout.$server"
      # shellcheck disable=SC2086
      t=$(median ${runs[$k]}); l=$(median ${localruns[$k]})
      RES[t_$k]=$t
      RES[a_$k]=$(awk -v a="$t" -v b="$l" 'BEGIN { printf "%.3f", a - b }')
    done
    for tool in $TOOLS; do
      k="$tool.$layout.$server"
      # shellcheck disable=SC2086
      l=$(median ${localruns[$k]})
      read -r _ per most _ fsmall fall _ _ _ _ _ ctool cbfs cemu cproxy <<<"${RES[last_$k]}"
      cpu=$(awk -v a="$ctool" -v b="$cbfs" -v c="$cemu" -v d="$cproxy" 'BEGIN { printf "%.2f+%.2f+%.2f+%.2f = %.2f", a, b, c, d, a + b + c + d }')
      vs=n/a; [ -n "${RES[a_$ktar]:-}" ] && vs="$(ratio "${RES[a_$k]}" "${RES[a_$ktar]}")x"
      vp=n/a; [ -n "${RES[t_$kplain]:-}" ] && vp="$(ratio "${RES[t_$kplain]}" "${RES[t_$k]}")"
      label=$tool
      if [ "$tool" = tar2 ]; then
        # shellcheck disable=SC2086
        f=$(median ${firsts[$k]})
        label="tar2 (1st $f s: $(ratio "${RES[t_$k]}" "$f")x)"
      fi
      case "$tool" in plain|rclone) l=-; adds=-; vs=- ;; *) adds="${RES[a_$k]} s" ;; esac
      printf '| %-22s | %-30s | %-8s | %-14s | %-12s | %-22s | %-14s | %-8s | %-36s |\n' "$label" "${RES[t_$k]} s (${runs[$k]# })" "$l" "$adds" "$vs" \
        "$per (most $most)" "$fsmall ($fall all)" "$vp" "$cpu"
    done
  done
done
echo "   (local: the tool over a local copy, page cache warm; the mount adds: time - local; vs tar's: ratio of what it adds to tar's)"
echo "   (GETs in flight: the small files' media GETs on average, from the proxy's timing log; in brackets all media GETs)"
echo "   (plain/it: the plain client's time ($CONC at once) / this reader's)"
echo "   targets: restic, borg: adds <= 1.2x tar's, <= 1.05 GETs per small object; tar >= 10 in flight; tar plain/it >= 0.7 on none; tar2 <= 1.1x the first"
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
