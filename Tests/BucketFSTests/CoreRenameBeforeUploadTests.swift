@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A rename of a file whose content was never uploaded moves the pending upload
/// (docs/SEMANTICS.md §3.4): rsync's temporary name, closed, given xattrs and times, then renamed,
/// is uploaded once under its final name, with that metadata, and nothing is copied or deleted.
@Suite struct CoreRenameBeforeUploadTests {
    /// Write-back with one upload at a time, and that one held: files closed after `first` wait
    /// in the queue until `hold` is released.
    static func queued() async throws -> (Harness, WriteHold) {
        let h = CoreWriteBackTests.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        _ = try await CoreWriteBackTests.write(h, "first", Data("1".utf8))
        return (h, hold)
    }

    /// What rsync -aX does with one file: the temporary name written and closed, an xattr and the
    /// mtime set, then the rename.
    static func rsyncOne(_ h: Harness, _ temp: String, _ final: String, _ data: Data) async throws -> UInt64 {
        let ino = try await CoreWriteBackTests.write(h, temp, data)
        try await h.fs.setxattr(ino: ino, name: "user.color", value: Array("blue".utf8), flags: 0)
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mtime: 1_234_567))
        try await h.fs.rename(parent: Harness.root, name: temp, newParent: Harness.root, newName: final, flags: 0)
        return ino
    }

    @Test func aQueuedFileRenamedIsUploadedOnceUnderItsFinalNameWithItsMetadata() async throws {
        let (h, hold) = try await Self.queued()
        let data = Data("page one".utf8)
        let ino = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", data)
        // Shown under the new name before its upload.
        #expect(try await h.names("").contains("notes.txt"))
        #expect(try await !h.names("").contains(".notes.txt.AbC123"))
        #expect(try await h.readAll("notes.txt") == data)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name) == ["first", "notes.txt"])
        #expect(h.store.count("copy") == 0 && h.store.count("delete") == 0 && h.store.count("patch") == 0)
        let w = try #require(h.store.writes.last)
        #expect(w.preconditions == Preconditions(ifGenerationMatch: 0))
        #expect(w.data == data)
        let o = try #require(h.store.object("notes.txt"))
        #expect(o.contentType == "text/plain", "the final name's type, inferred at the upload")
        #expect(o.customMetadata["color"] == "blue")
        #expect(o.customMetadata[XattrName.mtimeKey] == "1234567")
        #expect(h.store.object(".notes.txt.AbC123") == nil)
        #expect(try await h.xattr(ino, "user.color") == "blue")
        #expect(try await h.fs.getattr(ino: ino).0.mtime == 1_234_567)
        #expect(h.core.statistics().stagedFiles == 0)
    }

    @Test func aTypeGivenBeforeTheRenameIsKept() async throws {
        let (h, hold) = try await Self.queued()
        let ino = try await CoreWriteBackTests.write(h, ".a.jpg.XyZ", Data("x".utf8))
        try await h.fs.setxattr(ino: ino, name: "user.storage.contentType", value: Array("text/x-chosen".utf8), flags: 0)
        try await h.fs.rename(parent: Harness.root, name: ".a.jpg.XyZ", newParent: Harness.root, newName: "a.jpg", flags: 0)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.object("a.jpg")?.contentType == "text/x-chosen")
        #expect(h.store.count("copy") == 0)
    }

    @Test func aRenameOverAnObjectReplacesExactlyTheGenerationShown() async throws {
        let (h, hold) = try await Self.queued()
        let old = h.store.put("notes.txt", "old version")
        _ = try await h.ino("notes.txt")  // seen by the mount
        _ = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", Data("new version".utf8))
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.last?.name == "notes.txt")
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: old.generation))
        #expect(h.store.data("notes.txt") == Data("new version".utf8))
        #expect(h.store.count("copy") == 0 && h.store.count("delete") == 0)
    }

    @Test func anObjectReplacedBehindTheMountAfterTheRenameIsNeverOverwritten() async throws {
        let (h, hold) = try await Self.queued()
        _ = h.store.put("notes.txt", "old version")
        _ = try await h.ino("notes.txt")
        _ = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", Data("mine".utf8))
        _ = h.store.put("notes.txt", "theirs")  // another writer, after the rename
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.data("notes.txt") == Data("theirs".utf8), "a lost race, not a silent overwrite")
        #expect(h.core.statistics().lostAndFoundEntries == 1)
    }

    @Test func aRenameOverAFileStillWaitingReplacesWhatThatFileWouldHave() async throws {
        let (h, hold) = try await Self.queued()
        let old = h.store.put("notes.txt", "old version")
        _ = try await h.ino("notes.txt")
        _ = try await Self.rsyncOne(h, ".notes.txt.1", "notes.txt", Data("second".utf8))
        _ = try await Self.rsyncOne(h, ".notes.txt.2", "notes.txt", Data("third".utf8))
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name) == ["first", "notes.txt"], "the file renamed over is never uploaded")
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: old.generation))
        #expect(h.store.data("notes.txt") == Data("third".utf8))
    }

    @Test func aCrashAfterTheRenameKeepsTheDataUnderTheFinalName() async throws {
        let (h, hold) = try await Self.queued()
        let old = h.store.put("notes.txt", "old version")
        _ = try await h.ino("notes.txt")
        let ino = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", Data("page one".utf8))
        let s = try #require(h.core.superblock.node(ino).flatMap { h.core.superblock.stage(of: $0) })
        let record = try #require(StageRecord(json: JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: s.path + ".json"))) as! [String: Any]))
        #expect(record.object == "notes.txt")
        #expect(record.baseGeneration == old.generation)
        #expect(record.closed)
        // The next mount on this cache directory keeps it under the final name.
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        c.readOnly = true  // uploads nothing: it stays in lost+found
        let second = try BucketFileSystem(store: h.store, config: c)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let kept = ((try? FileManager.default.contentsOfDirectory(atPath: copy + "/lost+found")) ?? []).filter { !$0.hasSuffix(".json") }
        #expect(kept.contains { $0.hasPrefix("notes.txt.") }, "\(kept)")
        #expect(!kept.contains { $0.hasPrefix(".notes.txt") }, "\(kept)")
        hold.release()
        await h.core.uploads.drained()
    }

    /// The default mode: a file renamed while its writer still has it open (never uploaded) is
    /// uploaded once, at its close, under the new name.
    @Test func withoutWriteBackAFileNeverUploadedIsRenamedWhereItWaits() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: ".part", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("abc".utf8))
        try await h.fs.rename(parent: Harness.root, name: ".part", newParent: Harness.root, newName: "done.txt", flags: 0)
        #expect(h.store.count("write") == 0)
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 3, data: Data("def".utf8))
        try await h.fs.flush(ino: e.attributes.ino, fh: fh)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.writes.map(\.name) == ["done.txt"])
        #expect(h.store.data("done.txt") == Data("abcdef".utf8))
        #expect(h.store.object("done.txt")?.contentType == "text/plain")
        #expect(h.store.count("copy") == 0 && h.store.count("delete") == 0)
        #expect(h.store.object(".part") == nil)
    }

    /// A file already in the bucket is still renamed by copy and delete.
    @Test func aFileAlreadyUploadedIsCopied() async throws {
        let h = Harness()
        try await h.createFile("", ".part", Data("abc".utf8))
        try await h.fs.rename(parent: Harness.root, name: ".part", newParent: Harness.root, newName: "done.txt", flags: 0)
        #expect(h.store.count("copy") == 1 && h.store.count("delete") == 1)
        #expect(h.store.data("done.txt") == Data("abc".utf8))
    }
}

extension CoreRenameBeforeUploadTests {
    /// A file renamed over an object, then renamed away before its upload: the object it replaced
    /// does not come back under the first name (its upload replaces it there, then it moves).
    @Test func aFileRenamedOverAnObjectThenAwayLeavesNothingUnderTheFirstName() async throws {
        let h = Harness()
        _ = h.store.put("c", "theirs")
        _ = try await h.ino("c")
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "a", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("mine".utf8))
        try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "c", flags: 0)
        try await h.fs.rename(parent: Harness.root, name: "c", newParent: Harness.root, newName: "b", flags: 0)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.object("c") == nil)
        #expect(h.store.data("b") == Data("mine".utf8))
        #expect(try await h.names("").sorted() == ["b"])
    }

    /// Unlinked before its upload, a file renamed over an object takes that object with it.
    @Test func aFileRenamedOverAnObjectThenUnlinkedLeavesNothing() async throws {
        let (h, hold) = try await Self.queued()
        let old = h.store.put("notes.txt", "old version")
        _ = try await h.ino("notes.txt")
        _ = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", Data("mine".utf8))
        try await h.fs.unlink(parent: Harness.root, name: "notes.txt")
        #expect(h.store.object("notes.txt") == nil)
        #expect(h.store.deletes.last?.preconditions == Preconditions(ifGenerationMatch: old.generation))
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.object("notes.txt") == nil)
        #expect(try await h.names("") == ["first"])
    }
}

extension CoreRenameBeforeUploadTests {
    /// `--write-back-delay`: with nothing else queued, a file's upload still waits after its
    /// close, so rsync's xattrs, times and rename right after close join it.
    @Test func theDelayLetsWhatFollowsACloseJoinItsUpload() async throws {
        let h = Harness { c in
            c.writeBack = true
            c.writeBackDelay = 0.3
        }
        _ = try await Self.rsyncOne(h, ".notes.txt.AbC123", "notes.txt", Data("page one".utf8))
        #expect(h.store.count("write") == 0, "nothing started within the delay")
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name) == ["notes.txt"])
        #expect(h.store.object("notes.txt")?.customMetadata["color"] == "blue")
        #expect(h.store.count("copy") == 0 && h.store.count("delete") == 0 && h.store.count("patch") == 0, "\(h.store.counts)")
    }
}
