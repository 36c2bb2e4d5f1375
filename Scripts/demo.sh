#!/usr/bin/env bash
# The main job: mount an embedded bucket filled with sample files and show ls, getfattr, setfattr.
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/setup.sh
BIN="$(swift build --show-bin-path)/bucketfs"
BUCKET="${BUCKET:-/tmp/bucketfs-demo/bucket}"
MNT="${MNT:-/tmp/bucketfs-demo/mnt}"
mkdir -p "$MNT"
fusermount3 -uz "$MNT" 2>/dev/null || true

if [ ! -f "$BUCKET/bucket.sqlite" ]; then
  "$BIN" mb "$BUCKET"
  echo "== filling the embedded bucket $BUCKET with sample files"
  tmp=$(mktemp -d)
  echo "Hello from bucketfs" > "$tmp/hello.txt"
  printf '{"trail":"Mist Trail","km":11}\n' > "$tmp/trail.json"
  head -c 300000 /dev/urandom > "$tmp/forest.jpg"
  "$BIN" put "$tmp/hello.txt" "$BUCKET/hello.txt" --content-type text/plain --metadata greeting=hi
  "$BIN" put "$tmp/forest.jpg" "$BUCKET/images/forest.jpg" --content-type image/jpeg \
      --metadata "location=Yosemite, CA, USA" --metadata activity=Hiking
  "$BIN" put "$tmp/trail.json" "$BUCKET/images/uid/file1" --content-type application/json
  "$BIN" put "$tmp/hello.txt" "$BUCKET/docs/readme.md" --content-type text/markdown --metadata "goog-reserved-file-mtime=1700000000"
  rm -rf "$tmp"
fi

echo "== bucketfs mount $BUCKET $MNT"
"$BIN" mount "$BUCKET" "$MNT" --metadata-ttl 5
trap 'fusermount3 -u "$MNT" 2>/dev/null || true' EXIT
echo "== ls -lR $MNT"
ls -lR "$MNT"
echo "== getfattr -d $MNT/images/forest.jpg"
getfattr -d "$MNT/images/forest.jpg"
echo "== getfattr -n user.storage.contentType $MNT/images/forest.jpg"
getfattr -n user.storage.contentType "$MNT/images/forest.jpg"
echo "== setfattr -n user.camera -v 'Nikon F3' $MNT/images/forest.jpg"
setfattr -n user.camera -v "Nikon F3" "$MNT/images/forest.jpg"
echo "== the library sees it: bucketfs meta get $BUCKET/images/forest.jpg"
"$BIN" meta get "$BUCKET/images/forest.jpg"
echo "== cat $MNT/hello.txt"
cat "$MNT/hello.txt"
if [ "${KEEP_MOUNTED:-0}" = 1 ]; then trap - EXIT; echo "== still mounted at $MNT (bucketfs unmount $MNT)"; else echo "== unmounting"; fi
