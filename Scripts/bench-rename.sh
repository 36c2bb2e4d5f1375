#!/usr/bin/env bash
# Rename benchmarks: requests and time of `mv` on a gs:// mount, printed against limits measured
# in the same run:
#
#  (a) a directory of N objects (BENCH_RENAME_N, default 10000) renamed with `mv`, behind a fixed
#      delay a request (BENCH_DELAY_MS, default 20; Tests/e2e/latencyproxy.py). On a flat bucket
#      every object is a copy and a delete (docs/SEMANTICS.md §3.2), 16 at once: the rows say
#      requests per object (2 + the listing's pages, ideally), the time against the delay's own
#      limits at that rate (one object after another: N x 2 x delay; 16 at once: a sixteenth of
#      that), and check that every object is at the new name once and none at the old one;
#  (b) a single-file rename (`mv` of one object): requests and time in round trips of the delay.
#
# The server is the project's own (gcs-test-server, built by `swift build --build-tests`), one per
# flavour named on the command line:
#
#   Scripts/bench-rename.sh [flat] [hns]      (default: flat)
#
# `hns` runs the same rows against `gcs-test-server --hns` (a hierarchical-namespace bucket, where
# a directory is a folder and its rename one request); a gcs-test-server that does not know the
# flag is said so, and only the flat rows run. Requests are counted by the proxy (what went on the
# wire), and by operation from the mount's --request-log.
# Not part of the test suite: filling 10,000 objects takes about a minute, the flat rename of
# 10,000 at 20 ms about 30 s.
# Environment: BUCKETFS_BIN (default: build release), GCS_TEST_SERVER (default: gcs-test-server
# beside BUCKETFS_BIN, built too when that is this checkout's release build; else the debug build's), BENCH_RENAME_N, BENCH_DELAY_MS,
# BENCH_SERVER_PORT (default 9850), BENCH_PROXY_PORT (default 9851), BENCH_DIR, BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_RENAME_N:-10000}"
DELAY_MS="${BENCH_DELAY_MS:-20}"
SERVER_PORT="${BENCH_SERVER_PORT:-9850}"
PROXY_PORT="${BENCH_PROXY_PORT:-9851}"
FLAVOURS=("$@")
[ ${#FLAVOURS[@]} -eq 0 ] && FLAVOURS=(flat)
for f in "${FLAVOURS[@]}"; do
  case "$f" in flat|hns) ;; *) echo "bench: unknown flavour $f (flat, hns)" >&2; exit 2 ;; esac
done

. Scripts/bench/lib.sh bucketfs-rename
if [ -z "${GCS_TEST_SERVER:-}" ] && [ "$(dirname "$BIN")" = "$(swift build -c release --show-bin-path 2>/dev/null)" ]; then
  # Beside a release bucketfs built here: the server of the same sources, never an older build.
  swift build -c release --product gcs-test-server 2>&1 | tail -n 1 >&2
fi
SERVER="${GCS_TEST_SERVER:-$(dirname "$BIN")/gcs-test-server}"
[ -x "$SERVER" ] || SERVER="$ROOT/.build/debug/gcs-test-server"
[ -x "$SERVER" ] || { echo "bench: no gcs-test-server: swift build --build-tests builds it" >&2; exit 1; }

# The hierarchical flavour needs a server that knows --hns; without it, the flat rows only.
RUN=()
for f in "${FLAVOURS[@]}"; do
  # (arguments are read in order: an unknown --hns is refused before --help answers)
  if [ "$f" = hns ] && ! "$SERVER" --hns --help >/dev/null 2>&1; then
    echo "bench: this gcs-test-server ($SERVER) has no --hns flag: the hns rows are skipped, the flat rows run" >&2
    NO_HNS=1
    continue
  fi
  RUN+=("$f")
done
[[ " ${RUN[*]} " == *" flat "* ]] || RUN=(flat "${RUN[@]}")

declare -A RES
bucket_names() {  # ENDPOINT BUCKET PREFIX -> object names under PREFIX, one a line (from the server itself)
  "$PY" - "$@" <<'PYEOF'
import json, sys, urllib.parse, urllib.request
endpoint, bucket, prefix = sys.argv[1:4]
token = None
while True:
    q = {"prefix": prefix, "maxResults": "1000"}
    if token:
        q["pageToken"] = token
    with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(q)}") as r:
        page = json.load(r)
    for o in page.get("items", []):
        print(o["name"])
    token = page.get("nextPageToken")
    if not token:
        break
PYEOF
}
ops() { awk '{print $1}' "$1" | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}'; }

for flavour in "${RUN[@]}"; do
  bucket="bench-rename-$flavour"
  flags=(); [ "$flavour" = hns ] && flags=(--hns)
  "$SERVER" --port "$SERVER_PORT" --bucket "$bucket" "${flags[@]}" >"$WORK/server-$flavour.log" 2>&1 &
  server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 1 100); do grep -q "listening on" "$WORK/server-$flavour.log" && break; sleep 0.1; done
  grep -q "listening on" "$WORK/server-$flavour.log" || { echo "bench: gcs-test-server did not start" >&2; cat "$WORK/server-$flavour.log" >&2; exit 1; }
  direct="http://127.0.0.1:$SERVER_PORT"
  echo "bench: $flavour: filling dir/ ($N objects) and one/f000000" >&2
  "$PY" Scripts/bench/fill.py "$direct" "$bucket" dir "$N" 16
  "$PY" Scripts/bench/fill.py "$direct" "$bucket" one 1 16   # one/f000000
  start_latency_proxy "$SERVER_PORT" "$PROXY_PORT" "$DELAY_MS"
  PROXY="http://127.0.0.1:$PROXY_PORT"
  log="$WORK/requests-$flavour.log"
  mnt=$(mount_bucketfs "gs://$bucket" --endpoint "$PROXY" --anonymous --request-log "$log")

  # (a) the directory: mv's own lookups included, as a user's mv makes them
  : >"$log"; curl -sf -o /dev/null "$PROXY/__reset"
  t0=$(now); mv "$mnt/dir" "$mnt/dir2"; t1=$(now)
  RES[${flavour}_dir_s]=$(elapsed "$t0" "$t1")
  RES[${flavour}_dir_req]=$(wc -l <"$log")
  RES[${flavour}_dir_ops]=$(ops "$log")
  RES[${flavour}_dir_proxy]=$(proxy_counts | awk '{print $1}')
  at_new=$(bucket_names "$direct" "$bucket" dir2/ | grep -c '^dir2/f' || true)
  uniq_new=$(bucket_names "$direct" "$bucket" dir2/ | sort -u | grep -c '^dir2/f' || true)
  at_old=$(bucket_names "$direct" "$bucket" dir/ | grep -c . || true)
  [ "$at_new" -eq "$N" ] && [ "$uniq_new" -eq "$N" ] && [ "$at_old" -eq 0 ] \
    || { echo "bench: $flavour: after the rename $at_new at dir2/ ($uniq_new distinct), $at_old at dir/ (want $N, $N, 0)" >&2; tail -5 "$mnt.log" >&2; exit 1; }
  echo "bench: $flavour: mv of $N objects ${RES[${flavour}_dir_s]} s, ${RES[${flavour}_dir_req]} requests (${RES[${flavour}_dir_ops]}), proxy ${RES[${flavour}_dir_proxy]}" >&2

  # (b) one file
  ls "$mnt/one" >/dev/null
  : >"$log"; curl -sf -o /dev/null "$PROXY/__reset"
  t0=$(now); mv "$mnt/one/f000000" "$mnt/one/g000000"; t1=$(now)
  RES[${flavour}_one_s]=$(elapsed "$t0" "$t1")
  RES[${flavour}_one_req]=$(proxy_counts | awk '{print $1}')
  RES[${flavour}_one_ops]=$(ops "$log")
  [ "$(bucket_names "$direct" "$bucket" one/)" = "one/g000000" ] || { echo "bench: $flavour: the file rename left $(bucket_names "$direct" "$bucket" one/ | tr '\n' ' ')" >&2; exit 1; }
  echo "bench: $flavour: mv of one file ${RES[${flavour}_one_s]} s, ${RES[${flavour}_one_req]} requests (the mount logged ${RES[${flavour}_one_ops]})" >&2

  unmount "$mnt"
  kill "$PROXY_PID" "$server_pid" 2>/dev/null; wait "$PROXY_PID" "$server_pid" 2>/dev/null || true
done

# --- report -----------------------------------------------------------------------------------------
d=$(awk -v ms="$DELAY_MS" 'BEGIN { print ms / 1000 }')
echo
echo "== bucketfs rename benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), $BIN_LABEL, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $DELAY_MS ms a request, gcs-test-server)"
[ -n "${NO_HNS:-}" ] && echo "   (hns asked, but this gcs-test-server has no --hns: flat rows only)"
echo
for flavour in "${RUN[@]}"; do
  s=${RES[${flavour}_dir_s]}; r=${RES[${flavour}_dir_proxy]}
  serial=$(awk -v n="$N" -v d="$d" 'BEGIN { printf "%.1f", n * 2 * d }')
  wide=$(awk -v n="$N" -v d="$d" 'BEGIN { printf "%.2f", n * 2 * d / 16 }')
  echo "($flavour) mv of a directory of $N objects"
  printf '  %8.3f s   %s requests on the wire (the mount logged %s)   %s requests an object\n' "$s" "$r" "${RES[${flavour}_dir_ops]}" \
    "$(awk -v r="$r" -v n="$N" 'BEGIN { printf "%.3f", r / n }')"
  printf '  limits at %s ms a request: one object after another %s s (%s of it); 16 at once %s s (%s x that)\n' \
    "$DELAY_MS" "$serial" "$(ratio "$s" "$serial")" "$wide" "$(ratio "$s" "$wide")"
  printf '  %s objects a second; every object at the new name once, none at the old one\n' "$(awk -v n="$N" -v s="$s" 'BEGIN { printf "%.0f", n / s }')"
  echo "($flavour) mv of one file"
  printf '  %8.3f s   %s requests on the wire (the mount logged %s)   %s round trips of the delay\n' "${RES[${flavour}_one_s]}" \
    "${RES[${flavour}_one_req]}" "${RES[${flavour}_one_ops]}" "$(ratio "${RES[${flavour}_one_s]}" "$d")"
  echo
done
if [ -n "${RES[flat_dir_s]:-}" ] && [ -n "${RES[hns_dir_s]:-}" ]; then
  echo "hierarchical against flat, the directory of $N: $(ratio "${RES[hns_dir_s]}" "${RES[flat_dir_s]}") of the time," \
    "${RES[hns_dir_proxy]} requests against ${RES[flat_dir_proxy]}" \
    "(targets: at most 10 requests, under 1 s plus the operation's own time; a file rename 1 request: ${RES[hns_one_req]})"
fi
