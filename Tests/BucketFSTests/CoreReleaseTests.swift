@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// What FuseKit answers on libfuse's thread at close (`immediateRelease`): a release that waits
/// for nothing. Only when the release would make no request and wait on no lock; otherwise the
/// Task's `release` runs, as before.
@Suite struct CoreReleaseTests {
    /// A file created in the listed root with `text` written to it, its handle still open.
    func created(_ h: Harness, _ name: String, _ text: String) async throws -> (ino: UInt64, fh: UInt64) {
        _ = try await h.readdirAll(Harness.root)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data(text.utf8))
        return (e.attributes.ino, fh)
    }

    func stageFiles(_ h: Harness) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory)) ?? []).filter { $0.hasPrefix("stage-") }.sorted()
    }

    /// tar's close of a file it wrote: the flush uploads, then the release only lets go of the
    /// handle and the stage file (and its sidecar), with no request.
    @Test func aWritersReleaseAfterItsUploadIsImmediate() async throws {
        let h = Harness()
        let (ino, fh) = try await created(h, "new", "hello")
        // Unsaved content: this release would upload it (a close with no flush before it).
        #expect(h.fs.immediateRelease(ino: ino, fh: fh).map { _ in true } == nil)
        #expect(stageFiles(h).count == 2, "the stage file and its sidecar stay")
        try await h.fs.flush(ino: ino, fh: fh)
        h.store.resetCounts()
        let r = try #require(h.fs.immediateRelease(ino: ino, fh: fh))
        try r.get()
        #expect(h.store.counts.isEmpty)
        #expect(stageFiles(h) == [], "the stage file and its sidecar are gone")
        // The handle is gone: releasing it again finds nothing to do, as `release` would.
        #expect(h.fs.immediateRelease(ino: ino, fh: fh).map { _ in true } == true)
        #expect(try await h.readAll("new") == Data("hello".utf8))
        #expect(h.store.object("new") != nil)
    }

    /// A file another handle still writes keeps its stage; the last writer's release drops it.
    @Test func aStageStaysWhileAnotherHandleHasIt() async throws {
        let h = Harness()
        let (ino, fh) = try await created(h, "f", "one")
        let second = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY))
        try await h.fs.flush(ino: ino, fh: fh)
        try #require(h.fs.immediateRelease(ino: ino, fh: fh)).get()
        #expect(stageFiles(h).count == 2, "the second handle keeps the content")
        _ = try await h.fs.write(ino: ino, fh: second, offset: 3, data: Data("two".utf8))
        #expect(h.fs.immediateRelease(ino: ino, fh: second).map { _ in true } == nil, "unsaved again")
        try await h.fs.release(ino: ino, fh: second)
        #expect(h.store.data("f") == Data("onetwo".utf8))
        #expect(stageFiles(h) == [])
    }

    /// Write-back: a writer's release queues its upload, and waits for room in a queue past its
    /// bound (docs/SEMANTICS.md §3.4) even when it wrote nothing: the Task's, always.
    @Test func aWriteBackWritersReleaseIsNotImmediate() async throws {
        let h = Harness { $0.writeBack = true }
        h.store.put("kept", "x")
        _ = try await h.readdirAll(Harness.root)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "wb", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("x".utf8))
        try await h.fs.flush(ino: ino, fh: fh)
        #expect(h.fs.immediateRelease(ino: ino, fh: fh).map { _ in true } == nil)
        try await h.fs.release(ino: ino, fh: fh)
        let kept = try await h.ino("kept")
        let untouched = try await h.fs.open(ino: kept, flags: OpenFlags(O_WRONLY))
        try await h.fs.flush(ino: kept, fh: untouched)
        #expect(h.fs.immediateRelease(ino: kept, fh: untouched).map { _ in true } == nil, "nothing written, still the queue's room")
        try await h.fs.release(ino: kept, fh: untouched)
    }

    /// A reader's release waits for nothing either.
    @Test func aReadersReleaseIsImmediate() async throws {
        let h = Harness()
        h.store.put("r", "read me")
        let ino = try await h.ino("r")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 100) == Data("read me".utf8))
        try #require(h.fs.immediateRelease(ino: ino, fh: fh)).get()
        await #expect(throws: Errno.EBADF) { _ = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 100) }
    }
}
