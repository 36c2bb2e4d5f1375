import CFuse
import Foundation
import Testing
@testable import FuseKit
#if canImport(Glibc)
import Glibc
#endif

/// The pure parts of the adapter, no kernel.
@Suite("conversions")
struct ConversionTests {
    let attrs = FileAttributes(ino: 42, type: .regular, size: 1025, permissions: 0o4644 | 0o170000, nlink: 1,
                               uid: 7, gid: 8, atime: 1.5, mtime: 1_700_000_000.123456789, ctime: -0.25)

    @Test func statConversion() {
        let st = attrs.statValue
        #expect(st.st_ino == 42)
        #expect(st.st_mode == S_IFREG | 0o4644)  // stray type bits in permissions are dropped
        #expect(st.st_nlink == 1 && st.st_uid == 7 && st.st_gid == 8)
        #expect(st.st_size == 1025 && st.st_blocks == 3 && st.st_blksize == 1 << 20)
        #expect(st.st_atim.tv_sec == 1 && st.st_atim.tv_nsec == 500_000_000)
        #expect(st.st_mtim.tv_sec == 1_700_000_000 && abs(st.st_mtim.tv_nsec - 123_456_789) < 1_000)
        #expect(st.st_ctim.tv_sec == -1 && st.st_ctim.tv_nsec == 750_000_000)
        var dir = attrs
        dir.type = .directory
        #expect(dir.statValue.st_mode & S_IFMT == S_IFDIR)
    }

    @Test func setattrBits() {
        var st = stat()
        st.st_mode = S_IFREG | 0o600
        st.st_size = 99
        st.st_atim = timespec(tv_sec: 10, tv_nsec: 5)
        st.st_mtim = timespec(tv_sec: 20, tv_nsec: 500_000_000)
        let all = SetAttributes(stat: st, toSet: FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME, now: 1000)
        #expect(all == SetAttributes(mode: 0o600, size: 99, atime: 10.000000005, mtime: 20.5))
        let now = SetAttributes(stat: st, toSet: FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW, now: 1000)
        #expect(now == SetAttributes(atime: 1000, mtime: 1000))
        #expect(SetAttributes(stat: st, toSet: FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID, now: 0) == SetAttributes(uid: 0, gid: 0))
    }

    @Test func xattrReplies() {
        #expect(XattrReply(value: [1, 2, 3], requestedSize: 0) == .size(3))
        #expect(XattrReply(value: [1, 2, 3], requestedSize: 2) == .error(.ERANGE))
        #expect(XattrReply(value: [1, 2, 3], requestedSize: 3) == .bytes([1, 2, 3]))
        #expect(XattrReply(value: [], requestedSize: 0) == .size(0))
        #expect(XattrReply.nameList(["user.a", "user.bc"]) == Array("user.a\0user.bc\0".utf8))
    }

    @Test func directoryOffsets() {
        #expect(DirectoryOffsets.split(kernelOffset: 0) == (0, 2))
        #expect(DirectoryOffsets.split(kernelOffset: 1) == (0, 1))
        #expect(DirectoryOffsets.split(kernelOffset: 2) == (0, 0))
        #expect(DirectoryOffsets.split(kernelOffset: 3) == (1, 0))
        #expect(DirectoryOffsets.kernelOffset(filesystemOffset: 1) == 3)
    }

    @Test func directoryBufferStopsWhenFull() {
        let entry = FuseEntry(attributes: attrs, entryTimeout: 1, attrTimeout: 1)
        for plus in [false, true] {
            var buffer = DirectoryBuffer(capacity: 4096)
            var added = 0
            while buffer.add(nil, name: String(format: "name%05d", added), entry: entry, nextOffset: off_t(added + 1),
                             plus: plus, countsAsLookup: true) {
                added += 1
            }
            #expect(added > 10)
            #expect(buffer.used <= 4096)
            #expect(buffer.delivered.count == (plus ? added : 0))
        }
        var dots = DirectoryBuffer(capacity: 4096)
        let fitted = dots.add(nil, name: ".", entry: entry, nextOffset: 1, plus: true, countsAsLookup: false)
        #expect(fitted)
        #expect(dots.delivered.isEmpty)
    }

    @Test func errnoDescription() {
        #expect(Errno.ENOENT.description.contains("No such file"))
        #expect(Errno.EINTR.rawValue == EINTR && Errno.ECANCELED.rawValue == ECANCELED)
    }
}
