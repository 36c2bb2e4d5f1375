#!/usr/bin/env bash
# Concurrency under load: 16 processes create, write, append, read back, rename, unlink
# and set xattrs on one mount while a second mount of the same bucket reads and lists; first on an
# embedded bucket, then on gs:// against gcp-storage-emulator. Tests/e2e/stress.py says what is
# checked. Not part of Scripts/test.sh (Tests/e2e/test_stress.py runs a short version there).
#
#   Scripts/stress.sh [SECONDS]           # per source and mode; default 300
#
# Environment: BUCKETFS_BIN (default: the debug build, built here), STRESS_SOURCES (default
# "embedded emulator"; also "fake-gcs"), EMULATOR_PORT / FAKE_GCS_PORT (servers started here if
# none answers), STRESS_MODES (default "default write-back": the first mount in the default mode,
# then with --write-back), STRESS_ARGS (more options for stress.py, e.g. "--workers 8 --keep").
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-300}"

BUCKETFS_NO_INSTALL=1 Scripts/setup.sh >/dev/null
BIN="${BUCKETFS_BIN:-$(swift build --show-bin-path)/bucketfs}"
TMP="$(mktemp -d /tmp/bucketfs-stress-XXXXXX)"
stop=()
status=0
cleanup() {
  for s in "${stop[@]}"; do "$s" stop >/dev/null 2>&1 || true; done
  if [ "$status" = 0 ]; then rm -rf "$TMP"; else echo "stress: kept $TMP (logs of the failed run)"; fi
}
trap cleanup EXIT

for src in ${STRESS_SOURCES:-embedded emulator}; do
  echo "== stress: $src, $SECONDS_EACH s"
  case "$src" in
    embedded)
      "$BIN" mb "$TMP/bucket" >/dev/null
      source_args=(--source "$TMP/bucket") ;;
    emulator|fake-gcs)
      script=Scripts/emulator.sh; [ "$src" = fake-gcs ] && script=Scripts/fake-gcs.sh
      if ! out="$("$script" status 2>/dev/null)"; then out="$("$script" start)"; stop+=("$script"); fi
      eval "$out"
      if [ "$src" = emulator ]; then hp="$BUCKETFS_EMULATOR" b="$BUCKETFS_EMULATOR_BUCKET"
      else hp="$BUCKETFS_FAKE_GCS" b="$BUCKETFS_FAKE_GCS_BUCKET"; fi
      source_args=(--source "gs://$b" --endpoint "http://$hp")
      # gcp-storage-emulator serves the live object whatever generation= asks (see stress.py)
      [ "$src" = emulator ] && source_args+=(--server-ignores-generation)
      # fake-gcs-server stores a removed custom key as "" (docs/TESTING.md, "The servers")
      [ "$src" = fake-gcs ] && source_args+=(--removed-key-is-empty) ;;
    *) echo "unknown source $src" >&2; exit 2 ;;
  esac
  for mode in ${STRESS_MODES:-default write-back}; do
    mode_args=()
    [ "$mode" = write-back ] && mode_args=(--write-back)
    echo "-- mode: $mode"
    # shellcheck disable=SC2086
    .venv/bin/python Tests/e2e/stress.py "${source_args[@]}" "${mode_args[@]}" --bin "$BIN" \
      --seconds "$SECONDS_EACH" --tmp "$TMP" ${STRESS_ARGS:-} || status=1
  done
done
exit $status
