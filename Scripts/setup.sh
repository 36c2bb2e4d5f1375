#!/usr/bin/env bash
# Installs what bucketfs needs on a fresh Debian machine and builds it.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in libfuse3-dev fuse3 attr libsqlite3-dev pkg-config rsync rclone python3-venv tar; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Python tools for the end-to-end tests: the emulator and the official client.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import gcp_storage_emulator, google.cloud.storage, pytest' 2>/dev/null; then
  echo "setup: creating .venv (gcp-storage-emulator, google-cloud-storage, pytest)"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q gcp-storage-emulator google-cloud-storage pytest
fi

echo "setup: building bucketfs"
swift build -c "${BUCKETFS_BUILD_CONFIG:-debug}" --product bucketfs 2>&1 | tail -n 3
