@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// What the shell does, the bucket sees once (docs/SEMANTICS.md §3.3, "One generation per written
/// file"): a descriptor closed before anything was written to an emptied file uploads nothing;
/// the close that has content uploads it; a last close with none creates the empty object.
@Suite struct CoreOneGenerationTests {
    /// bash's `echo x > f` of a new file: open(O_CREAT|O_TRUNC), dup2, close of the first
    /// descriptor (a flush), write, close (flush and release).
    @Test func aShellRedirectOfANewFileIsOneUpload() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "new.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_TRUNC))
        let ino = e.attributes.ino
        try await h.fs.flush(ino: ino, fh: fh)
        #expect(h.store.count("write") == 0, "the first close uploaded an empty generation")
        #expect(h.store.object("new.txt") == nil)
        // Meanwhile the mount shows the file, empty.
        #expect(try await h.getattr(ino).size == 0)
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("x\n".utf8))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.data("new.txt") == Data("x\n".utf8))
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: 0))
    }

    /// The same over an existing object (`>` truncates it): one upload, of the new content.
    @Test func aShellRedirectOverAnObjectIsOneUpload() async throws {
        let h = Harness()
        let v1 = h.store.put("old.txt", "old content")
        let ino = try await h.ino("old.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        try await h.fs.flush(ino: ino, fh: fh)
        #expect(h.store.count("write") == 0, "the first close uploaded the truncated, empty object")
        #expect(h.store.data("old.txt") == Data("old content".utf8))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("new".utf8))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.data("old.txt") == Data("new".utf8))
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: v1.generation))
    }

    /// `touch new`: open, close. The last close (the release) creates the empty object, once.
    @Test func touchCreatesTheEmptyObjectAtTheLastClose() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "empty", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await h.fs.flush(ino: e.attributes.ino, fh: fh)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.data("empty") == Data())
        #expect(stageFiles(h).isEmpty)
    }

    /// `: > existing`: truncated to empty and closed: one upload, the empty generation.
    @Test func truncatingAnObjectToEmptyByOpenIsOneUpload() async throws {
        let h = Harness()
        h.store.put("t.txt", "content")
        let ino = try await h.ino("t.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.data("t.txt") == Data())
    }

    /// An empty new file's xattrs and times set before its last close go into its one upload.
    @Test func anEmptyNewFilesMetadataJoinsItsOneUpload() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "tagged", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.setxattr(ino: ino, name: "user.color", value: Array("blue".utf8), flags: 0)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(h.store.count("patch") == 0)
        #expect(h.store.object("tagged")?.customMetadata["color"] == "blue")
    }

    /// An fsync still uploads at once, empty or not: it is the writer asking for the object.
    @Test func fsyncOfAnEmptyNewFileUploadsIt() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "synced", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await h.fs.fsync(ino: e.attributes.ino, fh: fh, dataOnly: false)
        #expect(h.store.data("synced") == Data())
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.count("write") == 1)
    }
}

/// What ends a file's upload after its writer handed it over (a refusal, a lost race, retries
/// given up) keeps it in lost+found as complete, with that reason; only a crash or a cut while
/// writing makes a cut-off file (docs/SEMANTICS.md §5, "lost+found").
@Suite struct CoreLostAndFoundLabelTests {
    func entry(_ h: Harness) throws -> (name: String, sidecar: [String: Any]) {
        let names = lostFiles(h)
        try #require(names.count == 1, "entries: \(names)")
        let data = try Data(contentsOf: URL(fileURLWithPath: h.config.lostAndFound + "/" + names[0] + ".json"))
        return (names[0], try JSONSerialization.jsonObject(with: data) as! [String: Any])
    }

    @Test func aFileRefusedAtItsCloseIsKeptComplete() async throws {
        let h = Harness()
        h.store.failNext("write", with: .unauthorized(path: "r.txt", message: "Permission denied."))
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "r.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("all twelve b".utf8))
        await #expect(throws: Errno.EACCES) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        await #expect(throws: Errno.EACCES) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        let (name, sidecar) = try entry(h)
        #expect(!name.hasSuffix(LostEntry.cutOffSuffix), "\(name)")
        #expect(sidecar["complete"] as? Bool == true)
        #expect(sidecar["closed"] as? Bool == true)
        #expect((sidecar["reason"] as? String)?.contains("refused") == true, "\(sidecar)")
    }

    @Test func aLostRaceIsKeptComplete() async throws {
        let h = Harness()
        h.store.put("shared.txt", "first")
        let ino = try await h.ino("shared.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("mine, 70 bytes or so".utf8))
        h.store.put("shared.txt", "the other host won")  // another writer, meanwhile
        await #expect(throws: Errno.ESTALE) { try await h.fs.flush(ino: ino, fh: fh) }
        try? await h.fs.release(ino: ino, fh: fh)
        let (name, sidecar) = try entry(h)
        #expect(!name.hasSuffix(LostEntry.cutOffSuffix), "\(name)")
        #expect(sidecar["complete"] as? Bool == true)
        #expect((sidecar["reason"] as? String)?.contains("lost a race") == true, "\(sidecar)")
    }

    /// Unmount while the writer still writes (no flush, no fsync yet): what the last attempt could
    /// not upload is cut off, as the writer never handed it over.
    @Test func contentNeverHandedOverIsCutOff() async throws {
        let h = Harness { $0.operationTimeout = 3 }
        h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "open.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("half of it".utf8))
        await h.fs.shutdown(within: .seconds(5))
        let (name, sidecar) = try entry(h)
        #expect(name.hasSuffix(LostEntry.cutOffSuffix), "\(name)")
        #expect(sidecar["complete"] as? Bool == false)
    }
}
