#!/usr/bin/env bash
# Tests what Scripts/package.sh wrote to dist/ as a user meets it, on a machine without a Swift
# toolchain: the .deb's fields and files; unpacked into an empty root (dpkg-deb -x), the binary
# loads no Swift runtime library; then, in a mount namespace where /opt/swift is an empty
# directory and with an environment and PATH that name no toolchain, it prints its version, makes
# an embedded bucket, mounts it, reads a file and an xattr through the mount, and unmounts. The
# tarball holds the same files and runs the same way. Needs root (the mount namespace).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="$(tr -d ' \n' < VERSION)"
DEB="dist/bucketfs_${VERSION}_$(dpkg --print-architecture).deb"
TGZ="dist/bucketfs-${VERSION}-linux-$(uname -m).tar.gz"
for f in "$DEB" "$TGZ"; do [ -f "$f" ] || { echo "test-package: $f is missing: run Scripts/package.sh" >&2; exit 1; }; done
WORK="$(mktemp -d /tmp/bucketfs-package-test.XXXXXX)"
trap 'fusermount3 -uz "$WORK/mnt" 2>/dev/null || true; rm -rf "$WORK"' EXIT
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
pass() { echo "test-package: ok: $*"; }

# The .deb's fields and files.
info="$(dpkg-deb -I "$DEB")"
depends="$(sed -n 's/^ Depends: //p' <<<"$info")"
for dep in fuse3 libfuse3-3 libc6 libsqlite3-0; do
  grep -qE "(^|, )$dep( |,|$)" <<<"$depends" || fail "Depends lacks $dep: $depends"
done
grep -q "libswift\|swiftlang" <<<"$depends" && fail "Depends names a Swift runtime: $depends"
grep -q "^ Version: $VERSION$" <<<"$info" || fail "Version is not $VERSION"
pass "Depends: $depends"
files="$(dpkg-deb -c "$DEB" | awk '{print $6}')"
for f in ./usr/bin/bucketfs ./usr/share/man/man1/bucketfs.1.gz ./usr/share/bash-completion/completions/bucketfs \
         ./usr/share/zsh/vendor-completions/_bucketfs ./usr/share/fish/vendor_completions.d/bucketfs.fish \
         ./usr/share/doc/bucketfs/README.md ./usr/share/doc/bucketfs/copyright \
         ./usr/share/doc/bucketfs/examples/bucketfs@.service ./usr/share/doc/bucketfs/examples/bucketfs.conf.example; do
  grep -qxF "$f" <<<"$files" || fail "$DEB lacks $f"
done
dpkg-deb -c "$DEB" | awk '$2 != "root/root" {print; bad=1} END {exit bad}' || fail "files not owned by root"
pass "the .deb holds the binary, man page, completions, README, copyright and the systemd example"

# The tarball: the same files, the same layout.
tarfiles="$(tar -tzf "$TGZ" | grep -v '/$' | sed 's|^|./|' | sort)"
debfiles="$(dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ {print $6}' | sort)"
[ "$tarfiles" = "$debfiles" ] || fail "the tarball's files differ from the .deb's: $(diff <(echo "$tarfiles") <(echo "$debfiles") | head)"
pass "the tarball holds the same $(wc -l <<<"$tarfiles") files"

# Unpacked into an empty root.
for form in deb tar; do
  R="$WORK/root-$form"; mkdir -p "$R"
  if [ $form = deb ]; then dpkg-deb -x "$DEB" "$R"; else tar -xzf "$TGZ" -C "$R"; fi
  B="$R/usr/bin/bucketfs"
  ldd "$B" | grep -E "libswift|libFoundation|libdispatch|libBlocksRuntime|/opt/swift" && fail "$form: $B loads a Swift runtime library"
  mkdir -p "$WORK/mnt" "$WORK/home-$form"
  # No toolchain: /opt/swift is empty in this namespace, PATH has only the system's directories.
  unshare --mount --propagation private env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$WORK/home-$form" \
      B="$B" W="$WORK" FORM="$form" bash -euo pipefail -c '
    [ -d /opt/swift ] && mount -t tmpfs -o ro,size=1k none /opt/swift
    ! command -v swift >/dev/null || { echo "swift is still on PATH"; exit 1; }
    "$B" --version
    "$B" mb "$W/bucket-$FORM" >/dev/null
    echo "hello from the package" > "$W/hello.txt"
    "$B" put "$W/hello.txt" "$W/bucket-$FORM/docs/hello.txt" --metadata greeting=hi >/dev/null
    "$B" mount "$W/bucket-$FORM" "$W/mnt" --cache-dir "$W/cache-$FORM"
    got="$(cat "$W/mnt/docs/hello.txt")"
    xattr="$(getfattr --only-values -n user.greeting "$W/mnt/docs/hello.txt")"
    "$B" unmount "$W/mnt"
    [ "$got" = "hello from the package" ] || { echo "read back: $got"; exit 1; }
    [ "$xattr" = "hi" ] || { echo "xattr: $xattr"; exit 1; }
  ' || fail "$form: the unpacked binary did not run without a toolchain"
  pass "$form: unpacked into an empty root, with no Swift toolchain: --version, mb, put, mount, cat, getfattr, unmount"
done
echo "test-package: all passed"
