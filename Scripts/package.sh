#!/usr/bin/env bash
# Builds bucketfs for machines without a Swift toolchain and writes two files to dist/:
#   bucketfs_VERSION_DEBARCH.deb           (install: apt install ./bucketfs_…deb)
#   bucketfs-VERSION-linux-ARCH.tar.gz     (install: tar -xzf … -C /  — the same files, under usr/)
# The binary is a release build with the Swift runtime linked in (--static-swift-stdlib); the
# .deb's Depends come from what the binary really loads (dpkg-shlibdeps reads its ELF needs),
# plus fuse3 for fusermount3. VERSION comes from the VERSION file. Scripts/test-package.sh tests
# the result as a user meets it. Prints the files' sizes; with PACKAGE_COMPARE=1 also the
# binary's size and --version's start-up time against the dynamically linked release build.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in libfuse3-dev fuse3 libsqlite3-dev pkg-config dpkg-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "package: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

VERSION="$(tr -d ' \n' < VERSION)"
DEBARCH="$(dpkg --print-architecture)"
ARCH="$(uname -m)"
DIST="$PWD/dist"
BUILD="$PWD/.build-package"      # its own build folder: the static flag changes every object file
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "package: building bucketfs $VERSION (release, Swift runtime linked in)"
swift build -c release --static-swift-stdlib --product bucketfs --scratch-path "$BUILD" 2>&1 | grep -E "error|warning: .*bucketfs|Compiling bucketfs|Build" | tail -n 5
BIN="$(swift build -c release --static-swift-stdlib --scratch-path "$BUILD" --show-bin-path)/bucketfs"
if ldd "$BIN" | grep -q "libswift\|libFoundation\|libdispatch\|libBlocksRuntime"; then
  echo "package: $BIN still loads Swift runtime libraries:" >&2; ldd "$BIN" >&2; exit 1
fi

# The man page, from the command's own definition (swift-argument-parser's generate-manual).
echo "package: man page and completions"
swift build -c release --scratch-path "$BUILD" --product generate-manual 2>&1 | grep -E "error" || true
GM="$BUILD/release/generate-manual"
[ -x "$GM" ] || { echo "package: could not build swift-argument-parser's generate-manual" >&2; exit 1; }
mkdir -p "$WORK/man"
"$GM" "$BIN" --section 1 --output-directory "$WORK/man" >/dev/null

ROOT="$WORK/root"
DOC="$ROOT/usr/share/doc/bucketfs"
install -D -m 755 "$BIN" "$ROOT/usr/bin/bucketfs"
strip --strip-unneeded "$ROOT/usr/bin/bucketfs"
install -d "$ROOT/usr/share/man/man1"
gzip -9n -c "$WORK/man/bucketfs.1" > "$ROOT/usr/share/man/man1/bucketfs.1.gz"
chmod 644 "$ROOT/usr/share/man/man1/bucketfs.1.gz"
"$BIN" --generate-completion-script bash | install -D -m 644 /dev/stdin "$ROOT/usr/share/bash-completion/completions/bucketfs"
"$BIN" --generate-completion-script zsh  | install -D -m 644 /dev/stdin "$ROOT/usr/share/zsh/vendor-completions/_bucketfs"
"$BIN" --generate-completion-script fish | install -D -m 644 /dev/stdin "$ROOT/usr/share/fish/vendor_completions.d/bucketfs.fish"
install -D -m 644 README.md "$DOC/README.md"
install -D -m 644 Scripts/package/bucketfs@.service "$DOC/examples/bucketfs@.service"
install -D -m 644 Scripts/package/bucketfs.conf.example "$DOC/examples/bucketfs.conf.example"
Scripts/package/copyright.sh "$BUILD" > "$DOC/copyright"
chmod 644 "$DOC/copyright"

# Depends: what the binary loads, by dpkg-shlibdeps (from its ELF needs, not a list kept here).
mkdir -p "$WORK/shlibs/debian"
printf 'Source: bucketfs\n\nPackage: bucketfs\nArchitecture: any\n' > "$WORK/shlibs/debian/control"
SHLIBS="$(cd "$WORK/shlibs" && dpkg-shlibdeps -O "$ROOT/usr/bin/bucketfs" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
[ -n "$SHLIBS" ] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
SIZE_KB="$(du -sk "$ROOT/usr" | cut -f1)"
mkdir -p "$ROOT/DEBIAN"
cat > "$ROOT/DEBIAN/control" <<EOF
Package: bucketfs
Version: $VERSION
Architecture: $DEBARCH
Maintainer: bucketfs developers <maintainers@bucketfs.invalid>
Depends: fuse3, $SHLIBS
Installed-Size: $SIZE_KB
Section: utils
Priority: optional
Description: mount a Cloud Storage or Firebase bucket as a directory
 bucketfs is a FUSE filesystem that mounts a Cloud Storage bucket (gs://), a
 Cloud Storage for Firebase bucket as a signed-in user under its Security Rules
 (firebase://) or an embedded local bucket, with object metadata as extended
 attributes. Writes are uploaded at close or in the background (--write-back);
 nothing unsaved is lost at unmount.
EOF

mkdir -p "$DIST"
DEB="$DIST/bucketfs_${VERSION}_${DEBARCH}.deb"
TGZ="$DIST/bucketfs-${VERSION}-linux-${ARCH}.tar.gz"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
rm -rf "$ROOT/DEBIAN"
tar --owner=0 --group=0 --numeric-owner --sort=name -C "$ROOT" -czf "$TGZ" usr

echo "package: wrote"
ls -l "$DEB" "$TGZ" | awk '{print "  " $5 " bytes  " $9}'
echo "  Depends: fuse3, $SHLIBS"
[ "${PACKAGE_COMPARE:-0}" = 1 ] || exit 0

# PACKAGE_COMPARE=1: what it weighs and how fast it starts, against the dynamically linked
# release build (one more release build, in the default build folder).
echo "package: the dynamically linked release build, for comparison"
swift build -c release --product bucketfs 2>&1 | grep -E "error|Build" | tail -n 1
DYN="$(swift build -c release --show-bin-path)/bucketfs"
start_ms() {  # median of 21 runs of `$1 --version`, milliseconds
  local b="$1" t=()
  for _ in $(seq 21); do
    local s e; s=$(date +%s%N); "$b" --version >/dev/null; e=$(date +%s%N); t+=($(( (e - s) / 1000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | sed -n 11p | awk '{printf "%.1f", $1/1000}'
}
strip --strip-unneeded -o "$WORK/dynamic" "$DYN"
RUNTIME=$(ldd "$DYN" | awk '$3 ~ /\/opt\/swift|libswift|libFoundation|libdispatch|libBlocksRuntime/ {print $3}' | xargs -r stat -L -c %s | awk '{s+=$1} END {print s+0}')
printf '  binary, stripped: runtime linked in %s bytes; dynamically linked %s bytes + %s bytes of Swift runtime libraries it loads\n' \
  "$(stat -c %s "$ROOT/usr/bin/bucketfs")" "$(stat -c %s "$WORK/dynamic")" "$RUNTIME"
printf '  bucketfs --version, median of 21: static runtime %s ms, dynamic %s ms\n' "$(start_ms "$ROOT/usr/bin/bucketfs")" "$(start_ms "$DYN")"
