#!/usr/bin/env bash
# Prints the package's copyright file: the licence texts of the Swift runtime and of the Swift
# packages that the build folder $1 resolved (their checkouts), which the binary links in.
set -euo pipefail
build="$1"
cat <<'HEAD'
bucketfs: a FUSE filesystem that mounts a Cloud Storage, Firebase or embedded bucket.

The bucketfs sources have not been given a licence by their authors yet. The binary links in
the Swift runtime and the Swift packages below; their licence texts follow. Some of the
packages are used only by bucketfs's tests and are not in the binary.
HEAD
swift_license=""
for cand in "$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/share/swift/LICENSE.txt" /opt/swift/usr/share/swift/LICENSE.txt; do
  [ -f "$cand" ] && swift_license="$cand" && break
done
if [ -n "$swift_license" ]; then
  printf '\n==== The Swift runtime (swift.org), linked in with --static-swift-stdlib ====\n\n'
  cat "$swift_license"
fi
for dir in "$build"/checkouts/*/; do
  name="$(basename "$dir")"
  lic="$(ls "$dir" | grep -iE '^(LICEN[CS]E|COPYING)(\.(txt|md))?$' | head -n 1 || true)"
  [ -n "$lic" ] || continue
  printf '\n==== %s ====\n\n' "$name"
  cat "$dir/$lic"
done
