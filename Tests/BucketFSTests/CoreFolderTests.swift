@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A bucket with a hierarchical namespace (docs/SEMANTICS.md, "Hierarchical-namespace buckets"):
/// folders are directories, a directory rename is one folder rename, a file rename one move. The
/// in-memory store's hierarchical flavour (MemoryStore+Folders.swift) stands for the server; a
/// flat store is the contrast, so a test fails when the core does the flat thing.
@Suite struct CoreFolderTests {
    static func hns(_ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        Harness(store: MemoryStore(layout: .hierarchical), configure)
    }

    @Test func mkdirMakesAFolderAndNoPlaceholder() async throws {
        let h = Self.hns()
        _ = try await h.fs.mkdir(parent: Harness.root, name: "data", mode: 0o755)
        #expect(h.store.folderNames == ["data/"])
        #expect(h.store.names.isEmpty, "no placeholder object")
        #expect(h.store.count("folder_create") == 1 && h.store.count("write") == 0)
        #expect(try await h.names("") == ["data"])
        // Seen by another mount of the same bucket, empty as it is.
        let other = Harness(store: h.store)
        #expect(try await other.names("") == ["data"])
        #expect(try await other.names("data") == [])
        await #expect(throws: Errno.EEXIST) { try await h.fs.mkdir(parent: Harness.root, name: "data", mode: 0o755) }
    }

    @Test func anEmptiedFolderStays() async throws {
        let h = Self.hns()
        h.store.put("d/only.txt", "x")
        try await h.fs.unlink(parent: try await h.ino("d"), name: "only.txt")
        h.clock.advance(60)
        #expect(try await h.names("") == ["d"], "a folder outlives its last object")
        #expect(try await h.names("d") == [])
        #expect(h.store.folderNames == ["d/"])
    }

    @Test func rmdirDeletesTheFolderAndRefusesOneThatIsNotEmpty() async throws {
        let h = Self.hns()
        h.store.put("full/a", "x")
        _ = h.store.put("empty/")
        await #expect(throws: Errno.ENOTEMPTY) { try await h.fs.rmdir(parent: Harness.root, name: "full") }
        try await h.fs.rmdir(parent: Harness.root, name: "empty")
        #expect(h.store.folderNames == ["full/"])
        #expect(h.store.count("folder_delete") == 1 && h.store.count("delete") == 0)
        #expect(try await h.names("") == ["full"])
    }

    @Test func aFolderFilledBehindTheMountBeforeItsRmdirIsNotEmpty() async throws {
        let h = Self.hns()
        _ = h.store.put("d/")
        _ = try await h.ino("d")
        // The listing the rmdir makes sees nothing; the server's delete refuses.
        h.store.failNext("folder_delete", with: .notEmpty(path: "d/"))
        await #expect(throws: Errno.ENOTEMPTY) { try await h.fs.rmdir(parent: Harness.root, name: "d") }
        #expect(h.store.folderNames == ["d/"])
    }

    @Test func aDirectoryRenameIsOneFolderRename() async throws {
        let h = Self.hns()
        for i in 0..<50 { h.store.put("ckpt.tmp/shard\(i)", "s\(i)") }
        h.store.put("ckpt.tmp/sub/x", "x")
        _ = try await h.names("ckpt.tmp")
        h.store.resetCounts()
        try await h.fs.rename(parent: Harness.root, name: "ckpt.tmp", newParent: Harness.root, newName: "ckpt", flags: 0)
        // Lookups (of the names, no more), and one folder rename: no copy, delete or GET.
        #expect(h.store.count("folder_rename") == 1 && h.store.counts.keys.sorted() == ["folder_rename", "list"]
                && h.store.count("list") <= 2, "\(h.store.counts)")
        #expect(h.store.folderNames == ["ckpt/", "ckpt/sub/"])
        #expect(h.store.names.count == 51 && h.store.names.allSatisfy { $0.hasPrefix("ckpt/") })
        #expect(try await h.names("").sorted() == ["ckpt"])
        #expect(try await h.readAll("ckpt/shard7") == Data("s7".utf8))
        #expect(try await h.readAll("ckpt/sub/x") == Data("x".utf8))
    }

    @Test func aFlatBucketStillCopiesAndDeletes() async throws {
        let h = Harness()
        for i in 0..<3 { h.store.put("a/f\(i)", "x") }
        _ = try await h.names("a")
        h.store.resetCounts()
        try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "b", flags: 0)
        #expect(h.store.count("copy") == 3 && h.store.count("delete") == 3 && h.store.count("folder_rename") == 0)
    }

    @Test func aFileRenameIsOneMove() async throws {
        let h = Self.hns()
        let old = h.store.put("d/model.bin", "weights", custom: ["step": "100"])
        _ = try await h.ino("d/model.bin")
        let d = try await h.ino("d")
        h.store.resetCounts()
        try await h.fs.rename(parent: d, name: "model.bin", newParent: Harness.root, newName: "model.bin", flags: 0)
        // Lookups (of the names, no more), and one move: no copy, delete or GET.
        #expect(h.store.count("move") == 1 && h.store.counts.keys.sorted() == ["list", "move"] && h.store.count("list") <= 2,
                "\(h.store.counts)")
        let moved = try #require(h.store.object("model.bin"))
        #expect(moved.generation != old.generation && moved.customMetadata["step"] == "100")
        #expect(h.store.object("d/model.bin") == nil)
        #expect(try await h.readAll("model.bin") == Data("weights".utf8))
        #expect(h.store.folderNames == ["d/"], "the source's folder stays")
    }

    @Test func aMoveOverAFileReplacesExactlyTheGenerationShown() async throws {
        let h = Self.hns()
        h.store.put("a", "new")
        let shown = h.store.put("b", "old")
        _ = try await h.ino("a"); _ = try await h.ino("b")
        try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "b", flags: 0)
        #expect(h.store.count("move") == 1)
        #expect(h.store.data("b") == Data("new".utf8))
        #expect(shown.generation != h.store.object("b")?.generation)
    }

    @Test func aFileRenameOnAFlatBucketWithMovesIsOneMoveToo() async throws {
        let h = Harness(store: MemoryStore(moves: true))
        h.store.put("x.txt", "x")
        _ = try await h.ino("x.txt")
        h.store.resetCounts()
        try await h.fs.rename(parent: Harness.root, name: "x.txt", newParent: Harness.root, newName: "y.txt", flags: 0)
        #expect(h.store.count("move") == 1 && h.store.counts.keys.sorted() == ["list", "move"], "\(h.store.counts)")
    }

    @Test func aFolderRenameThatFailsChangesNothingAndSaysSo() async throws {
        let h = Self.hns()
        h.store.put("a/f", "x")
        _ = try await h.names("a")
        h.store.failNext("folder_rename", with: .operationFailed(operation: "projects/_/buckets/b/operations/op1", message: "internal"))
        await #expect(throws: Errno.EIO) {
            try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "b", flags: 0)
        }
        #expect(try await h.names("") == ["a"])
        #expect(try await h.names("a") == ["f"])
        #expect(h.store.folderNames == ["a/"])
    }

    @Test func aRenameOntoAFolderThatAppearedIsNotEmpty() async throws {
        let h = Self.hns()
        h.store.put("a/f", "x")
        _ = try await h.names("")
        h.store.put("b/g", "y")  // behind the mount's back, within the TTL: unseen
        await #expect(throws: Errno.ENOTEMPTY) {
            try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "b", flags: 0)
        }
        #expect(h.store.object("a/f") != nil && h.store.object("b/g") != nil)
    }

    @Test func aRenameOntoAnEmptyFolderReplacesIt() async throws {
        let h = Self.hns()
        h.store.put("a/f", "x")
        _ = h.store.put("b/")
        _ = try await h.names("")
        try await h.fs.rename(parent: Harness.root, name: "a", newParent: Harness.root, newName: "b", flags: 0)
        #expect(h.store.folderNames == ["b/"])
        #expect(h.store.names == ["b/f"])
    }

    @Test func aFileBeingWrittenMovesWithItsFolderAndUploadsUnderTheNewName() async throws {
        let h = Self.hns()
        h.store.put("run/log", "v1")
        let log = try await h.ino("run/log")
        let fh = try await h.fs.open(ino: log, flags: OpenFlags(O_WRONLY))
        _ = try await h.fs.write(ino: log, fh: fh, offset: 0, data: Data("v2".utf8))
        try await h.fs.rename(parent: Harness.root, name: "run", newParent: Harness.root, newName: "done", flags: 0)
        try await h.fs.flush(ino: log, fh: fh)
        try await h.fs.release(ino: log, fh: fh)
        await h.core.uploads.drained()
        #expect(h.store.data("done/log") == Data("v2".utf8), "the upload replaced the moved object")
        #expect(h.store.object("run/log") == nil)
        #expect(h.store.folderNames == ["done/"])
    }

    @Test func aDirectorysXattrsAreRefusedAndItsModeIsTheMounts() async throws {
        let h = Self.hns()
        _ = try await h.fs.mkdir(parent: Harness.root, name: "d", mode: 0o700)
        let d = try await h.ino("d")
        await #expect(throws: Errno.ENOTSUP) { try await h.setXattr(d, "user.color", "blue") }
        #expect(h.store.names.isEmpty, "no placeholder made to carry it")
        let (a, _) = try await h.fs.getattr(ino: d)
        #expect(a.type == .directory)
    }
}
