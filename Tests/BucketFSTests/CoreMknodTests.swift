@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A regular file made with mknod is one upload, with what follows (docs/SEMANTICS.md §3.3,
/// "One generation per written file"): GNU tar --xattrs calls mknod, setxattr, then
/// open(O_WRONLY|O_CREAT), write and close; before, mknod uploaded the empty file at once and
/// the close a second generation.
@Suite struct CoreMknodTests {
    @Test func tarXattrsOrderIsOneUploadWithTheXattr() async throws {
        // The wait for an open never ends within the test: what it asserts is tar's order alone.
        let h = Harness { $0.mknodUploadDelay = 3600 }
        let e = try await h.fs.mknod(parent: Harness.root, name: "a.txt", mode: UInt32(S_IFREG) | 0o644, rdev: 0)
        let ino = e.attributes.ino
        #expect(h.store.count("write") == 0, "mknod uploaded the empty file")
        try await h.fs.setxattr(ino: ino, name: "user.color", value: Array("red".utf8), flags: 0)
        #expect(h.store.count("write") == 0 && h.store.count("patch") == 0)
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("hi\n".utf8))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.data("a.txt") == Data("hi\n".utf8))
        #expect(h.store.object("a.txt")?.customMetadata["color"] == "red", "\(String(describing: h.store.object("a.txt")?.customMetadata))")
        // The wait's end finds the file uploaded: nothing more.
        let n = try #require(h.core.superblock.node(ino))
        if let s = h.core.superblock.stage(of: n) { await h.core.uploadUnopened(n, s) }
        #expect(h.store.count("write") == 1)
    }

    @Test func anEmptyFileExtractedByTarIsOneUpload() async throws {
        let h = Harness { $0.mknodUploadDelay = 3600 }
        let e = try await h.fs.mknod(parent: Harness.root, name: "empty", mode: UInt32(S_IFREG) | 0o600, rdev: 0)
        let fh = try await h.fs.open(ino: e.attributes.ino, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await h.fs.flush(ino: e.attributes.ino, fh: fh)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.count("write") == 1 && h.store.data("empty") == Data())
    }

    @Test func aFileNobodyOpensIsUploadedEmptyAfterTheWait() async throws {
        let h = Harness { $0.mknodUploadDelay = 0.2 }
        _ = try await h.fs.mknod(parent: Harness.root, name: "alone", mode: UInt32(S_IFREG) | 0o640, rdev: 0)
        #expect(h.store.count("write") == 0)
        #expect(await eventually { h.store.count("write") == 1 })
        #expect(h.store.data("alone") == Data())
        #expect(await eventually { stageFiles(h).isEmpty })
    }
}
