#!/usr/bin/env bash
# The Apple SDK's products as a program depends on them (docs/LIBRARY.md, "The Apple SDK's API"):
# clones this checkout's HEAD into a temporary folder named bucketfs, builds
# Examples/SDKSamples there from clean (its own Package.swift: FirebaseCore, FirebaseAuth and
# FirebaseStorage only), prints the wall and CPU time, and fails if the build compiled or the
# program links anything of FUSE, SQLite or the rest of bucketfs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/sdk-only-XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q --no-checkout "$root" "$work/bucketfs"
git -C "$work/bucketfs" checkout -q "$(git -C "$root" rev-parse HEAD)"
cd "$work/bucketfs/Examples/SDKSamples"
start=$(date +%s)
/usr/bin/time -f 'cpu: %U s user, %S s system' swift build 2>&1 | tee "$work/build.log" | grep -E '^cpu:|error:' || true
grep -q 'Build complete' "$work/build.log" || { echo "sdk-only-build: the build failed (log: $work/build.log)"; trap - EXIT; exit 1; }
echo "wall: $(( $(date +%s) - start )) s"
if grep -oE 'Compiling [A-Za-z0-9_]+' "$work/build.log" | grep -qE ' (GRDB|CFuse|FuseKit|ObjectStores|BucketFS|GCSStore|KernelFiles)$'; then
    echo "sdk-only-build: the SDK's products compiled a target they should not need"; exit 1
fi
if ldd .build/debug/sdk-samples | grep -qiE 'libfuse|libsqlite'; then
    echo "sdk-only-build: sdk-samples links libfuse3 or libsqlite3"; exit 1
fi
echo "no FUSE, no SQLite: ok"
