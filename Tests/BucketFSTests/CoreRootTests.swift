@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// The mount's root (docs/SEMANTICS.md §3.2): a whole bucket's root has no object, so its times
/// and mode are the mount options' and a change of them is kept nowhere; it never makes an
/// object named `/`. (A prefix mount's root, whose placeholder the store names "", is tested
/// on real mounts: `test_mount_posix.py`.)
@Suite struct CoreRootTests {
    @Test func aWholeBucketsRootKeepsItsTimesNowhereAndMakesNoObject() async throws {
        let h = Harness()
        _ = h.store.put("a.txt", "a")
        let root = Superblock.rootIno
        let before = h.store.count("write") + h.store.count("patch")
        // touch of the mount point, rsync -a's utimes and chmod of the destination directory.
        _ = try await h.fs.setattr(ino: root, fh: nil, changes: SetAttributes(mtime: 1_000_000))
        _ = try await h.fs.setattr(ino: root, fh: nil, changes: SetAttributes(mode: 0o700))
        #expect(h.store.count("write") + h.store.count("patch") == before, "no request for the root's times")
        #expect(h.store.object("/") == nil && h.store.object("") == nil, "no object holds a whole bucket's root")
        await #expect(throws: Errno.ENOTSUP) {
            try await h.fs.setxattr(ino: root, name: "user.k", value: Array("v".utf8), flags: 0)
        }
        #expect(h.store.object("/") == nil)
        // The bucket's objects are untouched and still listed.
        #expect(h.store.object("a.txt") != nil)
    }
}
