#!/usr/bin/env bash
# A large upload over a slow link with the DEFAULT timings (docs/SEMANTICS.md §5.2: deadlines
# bound waits that move nothing, not transfers that move): SIZE_MB MiB (default 2048) written
# into a gs:// mount through Tests/e2e/latencyproxy.py limited to RATE bytes a second (default
# 5,000,000) each way. The upload lasts about SIZE/RATE (7 minutes at the defaults, 7× the default
# 60 s --op-timeout); the close must succeed and the object must have the file's md5. Then, with
# SLOW_LINK_READ=1, the object is read back through a fresh mount over the same link and compared.
#
# SLOW_LINK_SERVER: `own` (default), the project's own Cloud Storage test server (gcs-test-server,
# built by `swift build --build-tests` beside bucketfs), or `fake-gcs`. fake-gcs-server answers
# 2 GiB about 30 s after its last byte and finishes a session when it is asked what it holds
# (docs/TESTING.md, "The servers"): at that size the run fails there for the server's sake,
# whatever the options; SIZE_MB=800 RATE=2000000 keeps the 7:1 ratio at a size it answers within
# seconds.
# Not part of the test suite (Tests/e2e/test_slow_link.py runs the CI-sized forms, and this one
# with BUCKETFS_SLOW=1).
# Environment: BUCKETFS_BIN (default: the debug build), OWN_GCS_PORT (default 9170),
# FAKE_GCS_PORT (default 9171), SLOW_LINK_PORT (the proxy, default 9172), SIZE_MB, RATE,
# SLOW_LINK_SERVER, SLOW_LINK_READ, SLOW_LINK_OPTS (more mount options), SLOW_LINK_DIR (default a
# new /tmp/bucketfs-slow-link-XXXXXX).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB="${SIZE_MB:-2048}"
RATE="${RATE:-5000000}"
PROXY_PORT="${SLOW_LINK_PORT:-9172}"
export FAKE_GCS_PORT="${FAKE_GCS_PORT:-9171}"
BIN="${BUCKETFS_BIN:-$(swift build --show-bin-path)/bucketfs}"
DIR="${SLOW_LINK_DIR:-$(mktemp -d /tmp/bucketfs-slow-link-XXXXXX)}"
mkdir -p "$DIR"
MNT="$DIR/mnt"
PY=.venv/bin/python

started_gcs=0
proxy_pid=""
own_pid=""
cleanup() {
  for m in "$MNT" "$MNT-read"; do
    mountpoint -q "$m" 2>/dev/null && fusermount3 -u "$m" 2>/dev/null || true
  done
  [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null || true
  [ "$started_gcs" = 1 ] && Scripts/fake-gcs.sh stop >/dev/null 2>&1 || true
  [ -n "$own_pid" ] && kill "$own_pid" 2>/dev/null || true
  rm -f "$DIR/big.bin"
}
trap cleanup EXIT

if [ "${SLOW_LINK_SERVER:-own}" = own ]; then
  BUCKET="slow-link"
  "$(dirname "$BIN")/gcs-test-server" --port "${OWN_GCS_PORT:-9170}" --bucket "$BUCKET" >"$DIR/server.log" 2>&1 &
  own_pid=$!
  UPSTREAM="127.0.0.1:${OWN_GCS_PORT:-9170}"
  for _ in $(seq 100); do grep -q "listening on" "$DIR/server.log" && break; sleep 0.1; done
else
  if ! out="$(Scripts/fake-gcs.sh status 2>/dev/null)"; then out="$(Scripts/fake-gcs.sh start)"; started_gcs=1; fi
  eval "$out"
  BUCKET="$BUCKETFS_FAKE_GCS_BUCKET"
  UPSTREAM="$BUCKETFS_FAKE_GCS"
fi
$PY Tests/e2e/latencyproxy.py --upstream "$UPSTREAM" --port "$PROXY_PORT" --delay-ms 0 --rate "$RATE" \
  >"$DIR/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$PROXY_PORT/__stats" >/dev/null && break; sleep 0.1; done

echo "== slow link: $SIZE_MB MiB at $RATE bytes/s each way, default timings, ${SLOW_LINK_SERVER:-own} server ($(date -u +%FT%TZ))"
echo "   load: $(uptime)"
head -c "$((SIZE_MB << 20))" /dev/urandom >"$DIR/big.bin"
want=$(md5sum "$DIR/big.bin" | cut -d' ' -f1)
PREFIX="slow-$$"
mkdir -p "$MNT"
# shellcheck disable=SC2086
"$BIN" mount "gs://$BUCKET/$PREFIX" "$MNT" --endpoint "http://127.0.0.1:$PROXY_PORT" --anonymous \
  --cache-dir "$DIR/cache" --log-file "$DIR/mount.log" --log-level info ${SLOW_LINK_OPTS:-}
t0=$(date +%s.%N)
rc=0
cp "$DIR/big.bin" "$MNT/big.bin" || rc=$?
t1=$(date +%s.%N)
secs=$(echo "$t1 - $t0" | bc)
echo "   cp (write + close, the close waits for the upload): exit $rc, $secs s ($(echo "scale=2; $SIZE_MB * 1048576 / $secs / 1000000" | bc) MB/s)"
fusermount3 -u "$MNT"
got=$("$BIN" stat --json "gs://$BUCKET/$PREFIX/big.bin" --endpoint "http://$UPSTREAM" --anonymous 2>/dev/null \
  | $PY -c 'import base64, json, sys; print(base64.b64decode(json.load(sys.stdin)["md5Hash"]).hex())' || echo none)
echo "   md5: file $want, object $got"
status=0
[ "$rc" = 0 ] && [ "$got" = "$want" ] || status=1
if [ "${SLOW_LINK_READ:-0}" = 1 ]; then
  mkdir -p "$MNT-read"
  "$BIN" mount "gs://$BUCKET/$PREFIX" "$MNT-read" --endpoint "http://127.0.0.1:$PROXY_PORT" --anonymous \
    --cache-dir "$DIR/cache-read" --log-file "$DIR/mount-read.log"
  t0=$(date +%s.%N)
  read_md5=$(md5sum "$MNT-read/big.bin" | cut -d' ' -f1) || read_md5=failed
  t1=$(date +%s.%N)
  echo "   read back: $(echo "$t1 - $t0" | bc) s, md5 $read_md5"
  [ "$read_md5" = "$want" ] || status=1
  fusermount3 -u "$MNT-read"
fi
echo "   load: $(uptime)"
echo "slow link: $([ $status = 0 ] && echo PASS || echo FAIL) (logs in $DIR)"
exit $status
