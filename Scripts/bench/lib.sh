# Shell helpers shared by Scripts/bench*.sh; sourced after `cd` to the repository root.
# Sets ROOT, PY, BIN (BUCKETFS_BIN, else a release build), BIN_LABEL (its --version line), WORK (BENCH_DIR, else a fresh temp dir
# named after $1) and installs the cleanup trap: every process the script started is killed
# (its descendants, by pid), every mount point WORK/mnt-* is unmounted
# (lazily), every process in PIDS and in WORK/pids is killed, WORK is removed unless BENCH_KEEP is
# set. Mounts are made in command substitutions (subshells), hence the directory and the file
# rather than shell arrays.
#
#   . Scripts/bench/lib.sh NAME

ROOT=$PWD
PY="$ROOT/.venv/bin/python"
if [ -z "${BUCKETFS_BIN:-}" ]; then
  echo "bench: building bucketfs (release)" >&2
  swift build -c release --product bucketfs 2>&1 | tail -n 1 >&2
  BUCKETFS_BIN="$(swift build -c release --show-bin-path)/bucketfs"
fi
BIN="$BUCKETFS_BIN"
# What the result headers name: the build's version line (its commit), never a path on this machine.
BIN_LABEL="$("$BIN" --version 2>/dev/null | head -n 1)"
BIN_LABEL="${BIN_LABEL:-$(basename "$BIN")}"
WORK="${BENCH_DIR:-$(mktemp -d "/tmp/$1.XXXXXX")}"
mkdir -p "$WORK"

PIDS=()
descendants() { local c; for c in $(ps -o pid= --ppid "$1"); do descendants "$c"; echo "$c"; done; }
bench_cleanup() {
  set +e
  # readers first (a tar or cat left in a subshell keeps a lazily unmounted mount's daemon alive)
  kill $(descendants $$) 2>/dev/null
  for m in "$WORK"/mnt-*; do [ -d "$m" ] && mountpoint -q "$m" && fusermount3 -uz "$m" 2>/dev/null; done
  [ -f "$WORK/pids" ] && while read -r p; do kill "$p" 2>/dev/null; done <"$WORK/pids"
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [ -z "${BENCH_KEEP:-}" ] && rm -rf "$WORK"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM  # so that the EXIT trap runs on ^C and kill too

# --- numbers --------------------------------------------------------------------------------------
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
mbps() { awk -v m="$1" -v s="$2" 'BEGIN { printf "%.1f", m * 1048576 / s / 1e6 }'; }  # MIB SECONDS -> MB/s
DROP_FAILED=  # set when the page cache cannot be dropped (drop_caches often runs in a subshell)
{ echo 1 >/proc/sys/vm/drop_caches; } 2>/dev/null || DROP_FAILED=1
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || DROP_FAILED=1; }

# --- the emulator ---------------------------------------------------------------------------------
# The emulator Scripts/emulator.sh runs (same package, flags and in-memory store), started through
# Scripts/bench/emulator.py, which only skips the stock emulator's O(N) re-serialisation after every
# insert (see there). With a third argument `stock`, the stock gcp-storage-emulator itself (one
# request at a time; the tests' Scripts/emulator.sh). Adds it to PIDS.
start_emulator() {  # PORT BUCKET [stock]
  local endpoint="http://127.0.0.1:$1"
  if curl -s -o /dev/null "$endpoint/"; then
    echo "bench: something already answers on $endpoint; set EMULATOR_PORT" >&2; exit 1
  fi
  local run=("$PY" "$ROOT/Scripts/bench/emulator.py")
  [ "${3:-}" = stock ] && run=("$ROOT/.venv/bin/gcp-storage-emulator")
  "${run[@]}" start --host=127.0.0.1 --port="$1" --in-memory \
    --default-bucket="$2" >"$WORK/emulator-$1.log" 2>&1 &
  PIDS+=("$!")
  EMU_PID=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "$endpoint/" && break; sleep 0.1; done
  curl -s -o /dev/null "$endpoint/" || { echo "bench: the emulator did not start" >&2; tail "$WORK/emulator-$1.log" >&2; exit 1; }
}

# --- mounts ---------------------------------------------------------------------------------------
mount_bucketfs() {  # SOURCE [options...] -> prints the mount point (bucketfs daemonizes)
  local src="$1"; shift
  local mnt; mnt="$(mktemp -d "$WORK/mnt-bfs.XXXX")"
  # BENCH_BFS_OPTS: extra mount options to try (word-split), e.g. "--read-ahead-mb 128"
  # shellcheck disable=SC2086
  "$BIN" mount "$src" "$mnt" --cache-dir "$mnt.cache" --log-file "$mnt.log" "$@" ${BENCH_BFS_OPTS:-} >&2
  echo "$mnt"
}
mount_pid() { pgrep -f -- "mount .* $1 " | head -1; }  # MOUNTPOINT -> pid of the bucketfs daemon serving it
rclone_remote() {  # NAME ENDPOINT: adds a [NAME] remote for the emulator at ENDPOINT to RCLONE_CONF
  RCLONE_CONF="$WORK/rclone.conf"
  printf '[%s]\ntype = google cloud storage\nendpoint = %s\nanonymous = true\nno_check_bucket = true\nbucket_policy_only = true\n\n' \
    "$1" "$2" >>"$RCLONE_CONF"
}
mount_rclone() {  # REMOTE:BUCKET/PATH -> prints the mount point (read-only, default VFS settings)
  local mnt; mnt="$(mktemp -d "$WORK/mnt-rclone.XXXX")"
  rclone --config "$RCLONE_CONF" mount "$1" "$mnt" --read-only --log-file "$mnt.log" >/dev/null 2>&1 &
  echo "$!" >>"$WORK/pids"
  for _ in $(seq 1 400); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { echo "bench: rclone mount failed; see $mnt.log" >&2; tail -5 "$mnt.log" >&2; return 1; }
  echo "$mnt"
}
unmount() { fusermount3 -u "$1" 2>/dev/null || fusermount3 -uz "$1"; for _ in $(seq 1 100); do mountpoint -q "$1" || break; sleep 0.05; done; }

# --- cold sequential reads ------------------------------------------------------------------------
read_secs() {  # FILE -> seconds for a cold sequential read (dd, 1 MiB blocks)
  drop_caches
  local t0 t1
  t0=$(now)
  dd if="$1" of=/dev/null bs=1M status=none
  t1=$(now)
  elapsed "$t0" "$t1"
}
curl_secs() {  # URL -> seconds for a download to /dev/null (its CPU noted as "curl" by cpu_note)
  drop_caches
  local t0 t1 e0 own
  e0=$(cpu_secs "${EMU_PID:-}")
  t0=$(now)
  own=$( { TIMEFORMAT='%U %S'; time curl -sf -o /dev/null "$1"; } 2>&1 )
  t1=$(now)
  cpu_note curl "$(awk -v u="${own% *}" -v s="${own#* }" 'BEGIN { printf "%.2f", u + s }')" "$e0"
  elapsed "$t0" "$t1"
}

# --- the latency proxy -----------------------------------------------------------------------------
# Starts Tests/e2e/latencyproxy.py in front of 127.0.0.1:UPSTREAM_PORT on PROXY_PORT, adding
# DELAY_MS to every request (extra arguments, e.g. `--log FILE`, go to it); waits until it answers.
# Sets PROXY_PID (in PIDS too), so call it in the script's own shell.
start_latency_proxy() {  # UPSTREAM_PORT PROXY_PORT DELAY_MS [latencyproxy.py options...]
  local up="$1" port="$2" delay="$3"; shift 3
  "$PY" "$ROOT/Tests/e2e/latencyproxy.py" --upstream "127.0.0.1:$up" --port "$port" --delay-ms "$delay" "$@" \
    >"$WORK/proxy-$port.log" 2>&1 &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/__stats" && break; sleep 0.1; done
  curl -sf -o /dev/null "http://127.0.0.1:$port/__stats" \
    || { echo "bench: the latency proxy did not start" >&2; cat "$WORK/proxy-$port.log" >&2; exit 1; }
}
proxy_counts() {  # [PROXY_URL, default $PROXY] -> "total list metadata media other" since the last /__reset
  curl -sf "${1:-$PROXY}/__stats" | "$PY" -c 'import json, sys; d = json.load(sys.stdin); print(*(d[k] for k in ("total", "list", "metadata", "media", "other")))'
}

# The small-file tree of the tar and backup benches: N x 32 KiB random files s0000... and one
# 64 MiB file named BIG (default big.bin, which sorts before them; empty: none), in DIR (made).
make_small_tree() {  # DIR N [BIG]
  "$PY" - "$1" "$2" "${3-big.bin}" <<'PYEOF'
import os, sys
root, n, big = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(root)
for i in range(n):
    open(f"{root}/s{i:04d}", "wb").write(os.urandom(32768))
if big:
    open(f"{root}/{big}", "wb").write(os.urandom(64 << 20))
PYEOF
}

# CPU seconds (user + system) a process has used so far; 0 without a process.
CLK_TCK=$(getconf CLK_TCK)
cpu_secs() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && awk -v hz="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" || echo 0; }
children_cpu() {  # FILE with the output of bash's `times` -> the children's user + system seconds
  tail -1 "$1" | awk '{ n = split($0, f, /[ms ]+/); printf "%.2f", f[1] * 60 + f[2] + f[3] * 60 + f[4] }'
}
cpu_note() {  # KIND OWN_SECONDS EMULATOR_SECONDS_BEFORE: appends "own emulator" to WORK/cpu-KIND
  echo "$2 $(awk -v a="$3" -v b="$(cpu_secs "${EMU_PID:-}")" 'BEGIN { printf "%.2f", b - a }')" >>"$WORK/cpu-$1"
}
check_md5() {  # FILE MD5 -> fails unless FILE reads back with that md5 (untimed)
  local sum; sum=$(md5sum <"$1" | cut -d' ' -f1)
  [ "$sum" = "$2" ] || { echo "bench: $1 read back with md5 $sum, want $2" >&2; exit 1; }
}

# The read rows of bench.sh (b) and bench-reads.sh (1, 3), on one layout: the file BIG (md5
# BIG_MD5) on local disk, as read/big.bin in the embedded bucket EMB, at BFS_GCS/read/big.bin
# (bucketfs source; mount options in the array GS), RCLONE_GCS/read/big.bin (rclone remote path)
# and BIG_URL (its alt=media URL).
read_kind() {  # KIND FIRST -> seconds (fresh mount per run; the first run also checks the md5)
  local mnt s
  case "$1" in
    local) read_secs "$BIG"; return ;;
    curl-gcs) [ "$2" = 1 ] && { curl -sf "$BIG_URL" >"$WORK/curl.bin"; check_md5 "$WORK/curl.bin" "$BIG_MD5"; rm -f "$WORK/curl.bin"; }
              curl_secs "$BIG_URL"; return ;;
    bucketfs-embedded) mnt="$(mount_bucketfs "$EMB" --read-only)" ;;
    bucketfs-gcs) mnt="$(mount_bucketfs "$BFS_GCS" "${GS[@]}" --read-only)" ;;
    rclone-gcs) mnt="$(mount_rclone "$RCLONE_GCS")" ;;
  esac
  local pid b0 e0
  pid=$(mount_pid "$mnt"); b0=$(cpu_secs "$pid"); e0=$(cpu_secs "${EMU_PID:-}")
  s=$(read_secs "$mnt/read/big.bin")
  [ "$1" = bucketfs-gcs ] && cpu_note "$1" "$(awk -v a="$b0" -v b="$(cpu_secs "$pid")" 'BEGIN { printf "%.2f", b - a }')" "$e0"
  [ "$2" = 1 ] && check_md5 "$mnt/read/big.bin" "$BIG_MD5"
  unmount "$mnt"
  echo "$s"
}
read_rows() {  # KIND... -> RES[rd_KIND] = median of REPS runs (RES: an associative array)
  # Kinds take turns within each repetition, so that a slow spell of the machine (a busy
  # neighbour, a slow disk) falls on all of them rather than on one kind's runs.
  local kind i
  declare -A runs=()
  for i in $(seq 1 "$REPS"); do
    for kind in "$@"; do runs[$kind]+=" $(read_kind "$kind" "$i")"; done
  done
  for kind in "$@"; do
    # shellcheck disable=SC2086
    RES[rd_$kind]=$(median ${runs[$kind]})
    echo "bench: read $kind runs (s):${runs[$kind]}" >&2
  done
}
