@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Races the stress test (`Tests/e2e/stress.py`) met between operations that overlap in time:
/// the kernel sends a release after close(2) has returned, so the next open of the same file can
/// run beside it, and a listing's answer can arrive after an upload that ended while it was in
/// flight.
@Suite struct CoreRaceTests {
    /// The stress test's `append EBADF`: an open for writing was handed the file's local content,
    /// the previous handle's release (running on another thread) found that content idle and
    /// dropped it before the new handle held it, and the new handle's writes had nowhere to go.
    /// Here the release runs exactly in that window.
    @Test func contentHandedToAnOpenSurvivesTheReleaseOfTheHandleBefore() async throws {
        let h = Harness()
        _ = h.store.put("f", Data("abc".utf8))
        let ino = try await h.ino("f")
        let fh1 = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND))
        _ = try await h.fs.write(ino: ino, fh: fh1, offset: 3, data: Data("d".utf8))
        try await h.fs.flush(ino: ino, fh: fh1)
        let n = try #require(h.core.superblock.node(ino))
        // The second open's first half: its content...
        let s = try await h.core.stage(n, truncate: false)
        // ... then the first handle's release...
        try await h.fs.release(ino: ino, fh: fh1)
        #expect(h.core.superblock.stage(of: n) === s, "the release dropped the content an open had just been handed")
        // ... then the second open's handle, whose writes and close reach the bucket.
        // (A file opened for writing reads its local content: no stream.)
        guard case let .opened(fh2, handle, _) = h.core.superblock.openFile(n, writable: true, seen: nil, pinned: s, stream: nil) else {
            Issue.record("an open for writing asked for a stream")
            return
        }
        #expect(handle.stage === s)
        _ = try await h.fs.write(ino: ino, fh: fh2, offset: 4, data: Data("e".utf8))
        try await h.fs.flush(ino: ino, fh: fh2)
        try await h.fs.release(ino: ino, fh: fh2)
        #expect(h.store.data("f") == Data("abcde".utf8))
        #expect(h.core.superblock.stage(of: n) == nil, "a closed, saved file keeps no local content")
    }

    /// truncate(2) on a path is uploaded at once unless a handle open for writing will close it,
    /// also when the file has local content kept by a reader only (which uploads nothing at its
    /// close): before, that truncation stayed unsaved until the unmount.
    @Test func truncateOfAPathKeptOpenByAReaderIsUploaded() async throws {
        let h = Harness()
        _ = h.store.put("t", Data("abcdef".utf8))
        let ino = try await h.ino("t")
        let writer = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY))
        let reader = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        try await h.fs.flush(ino: ino, fh: writer)
        try await h.fs.release(ino: ino, fh: writer)
        let (attrs, _) = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 2))
        #expect(attrs.size == 2)
        #expect(h.store.data("t") == Data("ab".utf8))
        #expect(try await h.fs.read(ino: ino, fh: reader, offset: 0, size: 100) == Data("ab".utf8))
        try await h.fs.release(ino: ino, fh: reader)
        let n = try #require(h.core.superblock.node(ino))
        #expect(h.core.superblock.stage(of: n) == nil)
    }

    /// The stress test's "older, shorter version": a listing asked before an upload, answered
    /// after it, overwrote the metadata the upload had just set, and the next open read the old
    /// size (and, from a server that ignores `generation=`, the new bytes cut to it).
    @Test func aListingAnsweredAfterAnUploadDoesNotBringBackTheOldMetadata() async throws {
        let h = Harness()
        _ = h.store.put("d/f", Data("abc".utf8))
        let ino = try await h.ino("d/f")
        let dir = try await h.ino("d")
        _ = try await h.names("d")
        h.clock.advance(10)  // the listing expired: the next readdir lists again
        let hold = h.store.holdNextListAnswers()
        let listing = Task { try await h.readdirAll(dir).map(\.name) }
        while hold.entered == 0 { try await Task.sleep(for: .milliseconds(2)) }
        // While that answer (the object at 3 bytes) is in flight, an append is uploaded.
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 3, data: Data("defg".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("d/f") == Data("abcdefg".utf8))
        hold.release()
        #expect(try await listing.value.filter { $0 != "." && $0 != ".." } == ["f"])
        #expect(try await h.fs.getattr(ino: ino).0.size == 7, "the listing's older answer replaced the upload's metadata")
        #expect(try await h.readAll(ino: ino) == Data("abcdefg".utf8))
    }

    /// The stress test's `rename ENOENT` and `listing differs: missing`: a listing asked while a
    /// file created here waited for its upload, answered after that upload ended, held neither
    /// the object (the bucket had none when it was read) nor the waiting file (it waits no more),
    /// and for its TTL the file was missing from listings and lookups.
    @Test func aFileUploadedWhileAListingIsInFlightStaysListed() async throws {
        let h = Harness()
        _ = h.store.put("d/old", Data("o".utf8))
        let dir = try await h.ino("d")
        let hold = h.store.holdNextListAnswers()
        let listing = Task { try await h.readdirAll(dir).map(\.name) }
        while hold.entered == 0 { try await Task.sleep(for: .milliseconds(2)) }
        // While that answer (d/old only) is in flight, a file is created and uploaded.
        _ = try await h.createFile("d", "new", Data("n".utf8))
        #expect(h.store.data("d/new") == Data("n".utf8))
        hold.release()
        #expect(try await listing.value.filter { $0 != "." && $0 != ".." }.sorted() == ["new", "old"])
        #expect(try await h.names("d").filter { $0 != "." && $0 != ".." }.sorted() == ["new", "old"], "the listing cached without the file uploaded meanwhile")
        guard case .success(let e)? = h.fs.cachedLookup(parent: dir, name: "new") else {
            Issue.record("the cached listing does not answer the lookup of the file uploaded meanwhile")
            return
        }
        #expect(e.attributes.size == 1)
    }

    /// The other side: a file unlinked, or renamed away, while a listing is in flight is not
    /// brought back by its answer, and the renamed one shows under its new name.
    @Test func aFileRemovedOrRenamedWhileAListingIsInFlightIsNotBroughtBack() async throws {
        let h = Harness()
        _ = h.store.put("d/gone", Data("g".utf8))
        _ = h.store.put("d/moved", Data("m".utf8))
        let dir = try await h.ino("d")
        _ = try await h.lookup("d/gone")
        _ = try await h.lookup("d/moved")
        let hold = h.store.holdNextListAnswers()
        let listing = Task { try await h.readdirAll(dir).map(\.name) }
        while hold.entered == 0 { try await Task.sleep(for: .milliseconds(2)) }
        try await h.fs.unlink(parent: dir, name: "gone")
        try await h.fs.rename(parent: dir, name: "moved", newParent: dir, newName: "there", flags: 0)
        #expect(h.store.data("d/gone") == nil)
        #expect(h.store.data("d/moved") == nil)
        hold.release()
        let want = ["there"]
        #expect(try await listing.value.filter { $0 != "." && $0 != ".." }.sorted() == want)
        #expect(try await h.names("d").filter { $0 != "." && $0 != ".." }.sorted() == want)
        await #expect(throws: Errno.ENOENT) { try await h.lookup("d/gone") }
        await #expect(throws: Errno.ENOENT) { try await h.lookup("d/moved") }
    }
}
