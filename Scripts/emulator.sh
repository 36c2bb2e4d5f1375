#!/usr/bin/env bash
# Starts or stops a local Cloud Storage emulator (gcp-storage-emulator, in-memory) for the
# emulator-gated GCS tests and for trying `bucketfs mount gs://BUCKET` without a cloud account.
#
#   Scripts/emulator.sh start     # prints the exports to use
#   Scripts/emulator.sh status
#   Scripts/emulator.sh stop
#
# Environment: EMULATOR_PORT (default 9023), EMULATOR_BUCKET (default bucketfs-test).
# The emulator lives in a virtualenv at .venv (created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${EMULATOR_PORT:-9023}"
BUCKET="${EMULATOR_BUCKET:-bucketfs-test}"
PIDFILE="/tmp/bucketfs-gcs-emulator-$PORT.pid"
LOGFILE="/tmp/bucketfs-gcs-emulator-$PORT.log"
VENV=.venv

ensure_venv() {
  if [ ! -x "$VENV/bin/gcp-storage-emulator" ]; then
    echo "emulator: creating $VENV and installing gcp-storage-emulator" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q gcp-storage-emulator google-cloud-storage
  fi
}

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

answers() {
  python3 - "$PORT" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1).read()
except Exception:
    sys.exit(1)
EOF
}

print_env() {
  echo "export BUCKETFS_EMULATOR=127.0.0.1:$PORT"
  echo "export BUCKETFS_EMULATOR_BUCKET=$BUCKET"
  echo "export STORAGE_EMULATOR_HOST=http://127.0.0.1:$PORT"
  echo "# then: swift test --filter GCSEmulator   or   bucketfs mount gs://$BUCKET MOUNTPOINT --anonymous"
}

case "${1:-}" in
  start)
    ensure_venv
    if running; then
      echo "emulator: already running (pid $(cat "$PIDFILE"))" >&2
      print_env
      exit 0
    fi
    if answers; then
      echo "emulator: something else already answers on 127.0.0.1:$PORT; set EMULATOR_PORT" >&2
      exit 1
    fi
    nohup "$VENV/bin/gcp-storage-emulator" start --host=127.0.0.1 --port="$PORT" --in-memory \
      --default-bucket="$BUCKET" >"$LOGFILE" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 100); do
      if answers; then
        echo "emulator: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), bucket $BUCKET, log $LOGFILE)" >&2
        print_env
        exit 0
      fi
      if ! running; then break; fi
      sleep 0.1
    done
    echo "emulator: did not start; see $LOGFILE" >&2
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
      echo "emulator: stopped (pid $pid)" >&2
    else
      echo "emulator: not running" >&2
    fi
    rm -f "$PIDFILE"
    ;;
  status)
    if running && answers; then
      echo "emulator: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))" >&2
      print_env
    else
      echo "emulator: not running" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
