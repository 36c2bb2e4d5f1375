#!/usr/bin/env bash
# Starts or stops storage-testbench, Google's own Cloud Storage test server (the one Google's
# client libraries run their integration and retry conformance tests against): the third Cloud
# Storage server the tests run against, beside gcp-storage-emulator (Scripts/emulator.sh) and
# fake-gcs-server (Scripts/fake-gcs.sh). It keeps real preconditions, generations,
# metagenerations, resumable sessions and object versioning, and injects faults on request (its
# Retry Test API: `POST /retry_test`, then the `x-retry-test-id` header on the calls).
#
#   Scripts/testbench.sh start     # prints the exports to use
#   Scripts/testbench.sh status
#   Scripts/testbench.sh stop
#
# Its source is not part of this repository: it runs in place from STORAGE_TESTBENCH_DIR (default:
# shared/storage-testbench in the repository's parent directory), which may be read-only: nothing is written
# there (no byte code, no control socket). Without a copy, `start` says so and exits 3, and the
# tests that need it skip. Its Python dependencies are installed from PyPI into .venv.
#
# Environment: TESTBENCH_PORT (default 9130), TESTBENCH_BUCKET (default bucketfs-test; a second
# bucket, BUCKET-versioned, is made with Object Versioning on), STORAGE_TESTBENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${TESTBENCH_PORT:-9130}"
BUCKET="${TESTBENCH_BUCKET:-bucketfs-test}"
DIR="${STORAGE_TESTBENCH_DIR:-$(dirname "$PWD")/shared/storage-testbench}"
PIDFILE="/tmp/bucketfs-testbench-$PORT.pid"
LOGFILE="/tmp/bucketfs-testbench-$PORT.log"
VENV=.venv
# The testbench's imports (ORIGIN.md of the copy lists its dependencies).
MODULES="flask, gunicorn, grpc, grpc_status, google.rpc, google.protobuf, requests_toolbelt, scalpl, crc32c, waitress"
PACKAGES=(flask gunicorn grpcio grpcio-status googleapis-common-protos protobuf requests-toolbelt scalpl crc32c waitress)

have_copy() {
  [ -f "$DIR/testbench/__init__.py" ] && [ -f "$DIR/gcs/object.py" ]
}

ensure_installed() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  if ! "$VENV/bin/python" -c "import $MODULES" 2>/dev/null; then
    echo "testbench: installing ${PACKAGES[*]} into $VENV" >&2
    "$VENV/bin/pip" install -q "${PACKAGES[@]}"
  fi
}

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

answers() {
  python3 - "$PORT" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/storage/v1/b?project=test", timeout=1).read()
except Exception:
    sys.exit(1)
EOF
}

create_bucket() {
  python3 - "$PORT" "$1" "${2:-false}" <<'EOF'
import json, sys, urllib.error, urllib.request
port, bucket, versioned = sys.argv[1], sys.argv[2], sys.argv[3] == "true"
req = urllib.request.Request(f"http://127.0.0.1:{port}/storage/v1/b?project=test", method="POST",
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
  echo "export BUCKETFS_TESTBENCH=127.0.0.1:$PORT"
  echo "export BUCKETFS_TESTBENCH_BUCKET=$BUCKET"
  echo "export BUCKETFS_TESTBENCH_VERSIONED_BUCKET=$BUCKET-versioned"
  echo "# then: swift test --filter StorageTestbench   or   bucketfs mount gs://$BUCKET MOUNTPOINT --endpoint http://127.0.0.1:$PORT --anonymous"
}

case "${1:-}" in
  start)
    if ! have_copy; then
      echo "testbench: no storage-testbench copy at $DIR; set STORAGE_TESTBENCH_DIR to one (a checkout of googleapis/storage-testbench)" >&2
      exit 3
    fi
    ensure_installed
    if running; then
      echo "testbench: already running (pid $(cat "$PIDFILE"))" >&2
      print_env
      exit 0
    fi
    if answers; then
      echo "testbench: something else already answers on 127.0.0.1:$PORT; set TESTBENCH_PORT" >&2
      exit 1
    fi
    # gunicorn directly (testbench_run.py adds --reload and a control socket in ~/.gunicorn that a
    # second instance takes over); no byte code written into the copy.
    PYTHONDONTWRITEBYTECODE=1 nohup "$VENV/bin/gunicorn" --chdir "$(cd "$DIR" && pwd)" \
      --bind="127.0.0.1:$PORT" --worker-class=sync --threads=10 --timeout=0 --no-control-socket \
      "testbench:run()" >"$LOGFILE" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 300); do
      if answers; then
        create_bucket "$BUCKET"
        create_bucket "$BUCKET-versioned" true
        echo "testbench: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), bucket $BUCKET, log $LOGFILE)" >&2
        print_env
        exit 0
      fi
      if ! running; then break; fi
      sleep 0.1
    done
    echo "testbench: did not start; see $LOGFILE" >&2
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
      echo "testbench: stopped (pid $pid)" >&2
    else
      echo "testbench: not running" >&2
    fi
    rm -f "$PIDFILE"
    ;;
  status)
    if running && answers; then
      echo "testbench: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))" >&2
      print_env
    else
      echo "testbench: not running" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
