#!/usr/bin/env bash
# Sets up and runs every test: Swift unit/integration tests, then real-mount tests (pytest)
# against the embedded bucket and two independent Cloud Storage servers: gcp-storage-emulator
# (Scripts/emulator.sh, EMULATOR_PORT) and fake-gcs-server (Scripts/fake-gcs.sh, FAKE_GCS_PORT,
# default EMULATOR_PORT + 1), and Google's storage-testbench (Scripts/testbench.sh, TESTBENCH_PORT,
# default 9130; from STORAGE_TESTBENCH_DIR, without which its tests skip).
#
# TEST_LOAD=N runs N busy loops at normal priority beside the whole run (both tiers) and stops them
# at the end: the suite must pass on a busy machine, as CI's and users' machines are
# (docs/TESTING.md, "Under load").
set -uo pipefail
cd "$(dirname "$0")/.."
Scripts/setup.sh || exit 1

load_pids=()
stop_load() { [ ${#load_pids[@]} -eq 0 ] || kill "${load_pids[@]}" 2>/dev/null; load_pids=(); }
if [ "${TEST_LOAD:-0}" -gt 0 ]; then
  for _ in $(seq "$TEST_LOAD"); do
    ( while :; do :; done ) &
    load_pids+=($!)
  done
  trap stop_load EXIT
  echo "== load: ${#load_pids[@]} busy loops beside the run (TEST_LOAD=$TEST_LOAD)"
fi
started=$(date +%s)

status=0
echo "== swift build (tests)"
swift build --build-tests 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -n 5

echo "== servers: gcp-storage-emulator, fake-gcs-server"
export FAKE_GCS_PORT="${FAKE_GCS_PORT:-$(( ${EMULATOR_PORT:-9023} + 1 ))}"
workers="${TEST_WORKERS:-2}"
# gcp-storage-emulator answers one request at a time: each real-mount worker past the first gets
# one of its own (EMULATOR_PORT + 10 + N for worker gwN; conftest.py picks it), so that one file's
# heavy use (the stress test, the big listings) never starves another's requests.
extra_emulator_ports=()
for n in $(seq 1 $(( workers - 1 ))); do extra_emulator_ports+=($(( ${EMULATOR_PORT:-9023} + 10 + n ))); done
stop_servers() {
  Scripts/emulator.sh stop >/dev/null 2>&1 || true
  for p in "${extra_emulator_ports[@]}"; do EMULATOR_PORT=$p Scripts/emulator.sh stop >/dev/null 2>&1 || true; done
  Scripts/fake-gcs.sh stop >/dev/null 2>&1 || true
  Scripts/testbench.sh stop >/dev/null 2>&1 || true
}
trap 'stop_load; stop_servers' EXIT
eval "$(Scripts/emulator.sh start)" || { echo "emulator did not start"; exit 1; }
for n in $(seq 1 $(( workers - 1 ))); do
  p=${extra_emulator_ports[$(( n - 1 ))]}
  EMULATOR_PORT=$p Scripts/emulator.sh start >/dev/null || { echo "emulator for worker gw$n did not start"; exit 1; }
  export "BUCKETFS_EMULATOR_GW$n=127.0.0.1:$p"
done
eval "$(Scripts/fake-gcs.sh start)" || { echo "fake-gcs-server did not start"; exit 1; }
testbench_env="$(Scripts/testbench.sh start)"; case $? in
  0) eval "$testbench_env" ;;
  3) echo "no storage-testbench copy (STORAGE_TESTBENCH_DIR): its tests skip" ;;
  *) echo "storage-testbench did not start"; exit 1 ;;
esac

echo "== swift test"
swift_log="$(mktemp /tmp/bucketfs-swift-test.XXXXXX.log)"
swift test --skip-build 2>&1 | tee "$swift_log" | grep -avE '^\[|^Test Case .* started' | tail -n 60
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The failures again, after the tail: a log cut to its last lines must still name what failed.
if grep -aqE '✘ Test .* (failed|recorded an issue)|recorded an issue at' "$swift_log"; then
  echo "== swift test: what failed"
  grep -aE '✘ Test |recorded an issue at|^\s*(Expectation failed|Caught error)' "$swift_log" | head -n 40
fi
# A run that executed no test passes by itself: a tier with nothing to run is a failure here.
swift_tests="$(sed -nE 's/.*Test run with ([0-9]+) tests?( |$).*/\1/p' "$swift_log" | tail -n 1)"
if [ "${swift_tests:-0}" -eq 0 ]; then echo "swift test ran no tests"; status=1; fi

if [ -d Tests/e2e ]; then
  echo "== pytest Tests/e2e (real mounts)"
  # --durations: the slowest tests, so that the suite's time stays in sight (docs/TESTING.md, "Time in tests").
  # -n: TEST_WORKERS files at once (default 2; each file's tests in order, on one worker): most of
  # this tier waits on deadlines, servers and the kernel, not on the CPU.
  BUCKETFS_BIN="$(swift build --show-bin-path)/bucketfs" .venv/bin/python -m pytest -q --durations=20 \
    -n "$workers" --dist loadfile Tests/e2e
  rc=$?
  # 5 is pytest's "no tests collected": a failure, like any other nonzero code.
  [ $rc -eq 5 ] && echo "pytest collected no tests"
  [ $rc -eq 0 ] || status=1
fi
stop_load
echo "== done in $(( $(date +%s) - started )) s (TEST_LOAD=${TEST_LOAD:-0}), status $status"
exit $status
