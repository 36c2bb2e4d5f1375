import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Create, write, overwrite, append, namespace changes and setattr (docs/SEMANTICS.md §3).
@Suite struct CoreWriteTests {
    @Test func createWriteFlushUploadsANewObject() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "report.json", mode: 0o644,
                                            flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        #expect(e.attributes.type == .regular)
        #expect(try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("{\"a\":".utf8)) == 5)
        #expect(try await h.fs.write(ino: ino, fh: fh, offset: 5, data: Data("1}".utf8)) == 2)
        #expect(h.store.count("write") == 0)
        // Visible (with its size) before the upload.
        #expect(try await h.getattr(ino).size == 7)
        #expect(try await h.names("").contains("report.json"))
        try await h.fs.flush(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        let w = try #require(h.store.writes.first)
        #expect(w.name == "report.json")
        #expect(w.preconditions == Preconditions(ifGenerationMatch: 0))
        #expect(w.metadata.contentType == "application/json")
        #expect(h.store.data("report.json") == Data("{\"a\":1}".utf8))
        // Closing a clean file uploads nothing more.
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 1)
        #expect(try await h.readAll(ino: ino) == Data("{\"a\":1}".utf8))
        let unknown = try await h.createFile("", "blob.unknownext", Data("x".utf8))
        _ = unknown
        #expect(h.store.object("blob.unknownext")?.contentType == "application/octet-stream")
        try await h.createFile("", "page.HTML", Data("<p>".utf8))
        #expect(h.store.object("page.HTML")?.contentType == "text/html")
    }

    /// Write-only handles bypass the kernel's page cache when nothing else has the file open, and
    /// any handle opened beside one of them does too; a handle opened beside a cached one keeps
    /// the page cache (so the kernel never holds pages a direct write made stale).
    @Test func writeOnlyHandlesUseDirectIOUnlessTheFileIsOpenCached() async throws {
        let h = Harness()
        let (e, w) = try await h.fs.create(parent: Harness.root, name: "d.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        #expect(h.fs.directIO(ino: ino, fh: w))
        _ = try await h.fs.write(ino: ino, fh: w, offset: 0, data: Data("abc".utf8))
        let r = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(h.fs.directIO(ino: ino, fh: r), "a reader beside a direct writer")
        #expect(try await h.fs.read(ino: ino, fh: r, offset: 0, size: 10) == Data("abc".utf8))
        try await h.fs.release(ino: ino, fh: r)
        try await h.fs.release(ino: ino, fh: w)
        // A reader first: a writer beside it keeps the page cache; so does one opened read-write.
        let r2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(!h.fs.directIO(ino: ino, fh: r2))
        let w2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY))
        #expect(!h.fs.directIO(ino: ino, fh: w2))
        try await h.fs.release(ino: ino, fh: w2)
        try await h.fs.release(ino: ino, fh: r2)
        let rw = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
        #expect(!h.fs.directIO(ino: ino, fh: rw))
        try await h.fs.release(ino: ino, fh: rw)
        let (e2, rwc) = try await h.fs.create(parent: Harness.root, name: "rw.bin", mode: 0o644, flags: OpenFlags(O_RDWR | O_CREAT))
        #expect(!h.fs.directIO(ino: e2.attributes.ino, fh: rwc))
        try await h.fs.release(ino: e2.attributes.ino, fh: rwc)
        #expect(h.store.data("d.bin") == Data("abc".utf8))
    }

    /// With `--direct-io`, a handle reading the bucket's bytes bypasses the page cache; a
    /// writer's handle and a reader of a file written here keep today's rules. Without it, no
    /// reader does.
    @Test func directIOReadsBypassThePageCacheOnlyWhenAsked() async throws {
        for on in [false, true] {
            let h = Harness { $0.directReads = on }
            h.store.put("data/big.bin", Data(repeating: 7, count: 4096))
            let ino = try await h.ino("data/big.bin")
            let r = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
            #expect(h.fs.directIO(ino: ino, fh: r) == on, "a reader of the bucket's bytes, --direct-io \(on)")
            #expect(try await h.fs.read(ino: ino, fh: r, offset: 0, size: 8) == Data(repeating: 7, count: 8))
            try await h.fs.release(ino: ino, fh: r)
            // A writer alone (read-write) keeps the page cache either way, and a reader beside it
            // reads the local content through the page cache too.
            let rw = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
            #expect(!h.fs.directIO(ino: ino, fh: rw))
            _ = try await h.fs.write(ino: ino, fh: rw, offset: 0, data: Data("x".utf8))
            let r2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
            #expect(!h.fs.directIO(ino: ino, fh: r2), "a reader of a file written here, --direct-io \(on)")
            try await h.fs.release(ino: ino, fh: r2)
            try await h.fs.release(ino: ino, fh: rw)
        }
    }

    @Test func fsyncIsDurable() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("abc".utf8))
        try await h.fs.fsync(ino: e.attributes.ino, fh: fh, dataOnly: false)
        #expect(h.store.data("f.txt") == Data("abc".utf8))
        let first = try #require(h.store.object("f.txt"))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 3, data: Data("def".utf8))
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.data("f.txt") == Data("abcdef".utf8))
        // The second upload replaced the generation the first one made.
        #expect(h.store.writes.count == 2)
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: first.generation))
    }

    @Test func xattrsSetBeforeTheFirstCloseGoIntoTheUpload() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "pic.png", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data([1, 2, 3]))
        try await h.setXattr(ino, "user.camera", "x100")
        try await h.setXattr(ino, "user.storage.cacheControl", "max-age=60")
        #expect(try await h.xattr(ino, "user.camera") == "x100")
        #expect(try await h.fs.listxattr(ino: ino).contains("user.camera"))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("patch") == 0)
        #expect(h.store.count("write") == 1)
        let o = try #require(h.store.object("pic.png"))
        // The new file's mode rides along in the same upload.
        #expect(o.customMetadata == ["camera": "x100", "goog-reserved-posix-mode": "644"])
        #expect(o.writable.cacheControl == "max-age=60")
        #expect(o.contentType == "image/png")
        #expect(try await h.xattr(ino, "user.camera") == "x100")
    }

    @Test func overwriteUsesTheGenerationRead() async throws {
        let h = Harness()
        let v1 = h.store.put("f.txt", "old content", contentType: "text/x-custom", custom: ["keep": "me"])
        let ino = try await h.ino("f.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("new".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        let w = try #require(h.store.writes.last)
        #expect(w.preconditions == Preconditions(ifGenerationMatch: v1.generation))
        #expect(h.store.data("f.txt") == Data("new".utf8))
        // An overwrite keeps the object's metadata.
        #expect(h.store.object("f.txt")?.customMetadata == ["keep": "me"])
        #expect(h.store.object("f.txt")?.contentType == "text/x-custom")
        #expect(try await h.getattr(ino).size == 3)
        // create() over an existing file truncates it, with the same precondition rule.
        let v2 = h.store.object("f.txt")!
        let (e, fh2) = try await h.fs.create(parent: Harness.root, name: "f.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_TRUNC))
        #expect(e.attributes.ino == ino)
        _ = try await h.fs.write(ino: ino, fh: fh2, offset: 0, data: Data("z".utf8))
        try await h.fs.release(ino: ino, fh: fh2)
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: v2.generation))
        #expect(h.store.data("f.txt") == Data("z".utf8))
    }

    @Test func aLostRaceFailsTheWriterAndKeepsBothVersions() async throws {
        let h = Harness()
        h.store.put("shared.txt", "original")
        let ino = try await h.ino("shared.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("mine".utf8))
        h.store.replaceBehind("shared.txt", Data("theirs".utf8))
        await #expect(throws: Errno.ESTALE) { try await h.fs.flush(ino: ino, fh: fh) }
        #expect(h.store.data("shared.txt") == Data("theirs".utf8))
        // Our bytes are kept for the user.
        let kept = try FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound).filter { !$0.hasSuffix(".json") }
        #expect(kept.count == 1)
        // Beside it, a sidecar names the object.
        let side = FileManager.default.contents(atPath: h.config.lostAndFound + "/" + kept[0] + ".json") ?? Data()
        #expect((try? JSONSerialization.jsonObject(with: side) as? [String: Any])?["object"] as? String == "shared.txt")
        #expect(kept.first?.hasPrefix("shared.txt") == true)
        let keptData = FileManager.default.contents(atPath: h.config.lostAndFound + "/" + kept[0])
        #expect(keptData == Data("mine".utf8))
        // Closing does not retry into a silent overwrite.
        try? await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("shared.txt") == Data("theirs".utf8))
        #expect(h.store.writes.allSatisfy { $0.preconditions.ifGenerationMatch != nil })
    }

    @Test func aLostRaceOnCreateFailsTheWriter() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "new.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("mine".utf8))
        h.store.put("new.txt", "someone else")
        await #expect(throws: Errno.ESTALE) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        #expect(h.store.data("new.txt") == Data("someone else".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound).filter { !$0.hasSuffix(".json") }.count == 1)
    }

    @Test func appendKeepsTheOldBytes() async throws {
        let h = Harness()
        let v1 = h.store.put("log.txt", "line1\n")
        let ino = try await h.ino("log.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND))
        let size = try await h.getattr(ino).size
        #expect(size == 6)
        _ = try await h.fs.write(ino: ino, fh: fh, offset: size, data: Data("line2\n".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("log.txt") == Data("line1\nline2\n".utf8))
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: v1.generation))
        // Read-write open, overwrite in the middle.
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
        _ = try await h.fs.write(ino: ino, fh: fh2, offset: 4, data: Data("X".utf8))
        #expect(try await h.fs.read(ino: ino, fh: fh2, offset: 0, size: 100) == Data("lineX\nline2\n".utf8))
        try await h.fs.release(ino: ino, fh: fh2)
        #expect(h.store.data("log.txt") == Data("lineX\nline2\n".utf8))
    }

    @Test func openForWritingWithoutChangesUploadsNothing() async throws {
        let h = Harness()
        h.store.put("f", "data")
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.count("write") == 0)
    }

    @Test func unlinkDeletesWithAPrecondition() async throws {
        let h = Harness()
        let v = h.store.put("d/gone.txt", "x")
        h.store.put("d/stays.txt", "y")
        let dir = try await h.ino("d")
        #expect(try await h.names("d") == ["gone.txt", "stays.txt"])
        try await h.fs.unlink(parent: dir, name: "gone.txt")
        #expect(h.store.object("d/gone.txt") == nil)
        #expect(h.store.deletes.last?.preconditions.ifGenerationMatch == v.generation)
        #expect(try await h.names("d") == ["stays.txt"])
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: dir, name: "gone.txt") }
        await #expect(throws: Errno.ENOENT) { try await h.fs.unlink(parent: dir, name: "gone.txt") }
        await #expect(throws: Errno.EISDIR) { try await h.fs.unlink(parent: Harness.root, name: "d") }
    }

    @Test func mkdirAndRmdir() async throws {
        let h = Harness()
        let e = try await h.fs.mkdir(parent: Harness.root, name: "new", mode: 0o755)
        #expect(e.attributes.type == .directory)
        let ph = try #require(h.store.object("new/"))
        #expect(ph.size == 0)
        #expect(h.store.writes.last?.preconditions == .doesNotExist)
        #expect(try await h.names("") == ["new"])
        #expect(try await h.names("new") == [])
        await #expect(throws: Errno.EEXIST) { try await h.fs.mkdir(parent: Harness.root, name: "new", mode: 0o755) }
        // Nested, and non-empty rmdir.
        _ = try await h.fs.mkdir(parent: e.attributes.ino, name: "sub", mode: 0o755)
        #expect(h.store.object("new/sub/") != nil)
        await #expect(throws: Errno.ENOTEMPTY) { try await h.fs.rmdir(parent: Harness.root, name: "new") }
        try await h.createFile("new", "file.txt", Data("1".utf8))
        try await h.fs.rmdir(parent: e.attributes.ino, name: "sub")
        #expect(h.store.object("new/sub/") == nil)
        await #expect(throws: Errno.ENOTEMPTY) { try await h.fs.rmdir(parent: Harness.root, name: "new") }
        try await h.fs.unlink(parent: e.attributes.ino, name: "file.txt")
        try await h.fs.rmdir(parent: Harness.root, name: "new")
        #expect(h.store.names == [])
        #expect(try await h.names("") == [])
        await #expect(throws: Errno.ENOTDIR) {
            try await h.createFile("", "plain", Data())
            try await h.fs.rmdir(parent: Harness.root, name: "plain")
        }
    }

    @Test func rmdirOfANonEmptyPrefixOnlyDirectory() async throws {
        let h = Harness()
        h.store.put("p/q/r", "1")
        _ = try await h.ino("p")
        await #expect(throws: Errno.ENOTEMPTY) { try await h.fs.rmdir(parent: Harness.root, name: "p") }
        #expect(h.store.object("p/q/r") != nil)
    }

    @Test func renameAFileKeepsContentAndXattrs() async throws {
        let h = Harness()
        h.store.put("a/one.txt", "content", contentType: "text/plain", custom: ["k": "v"])
        h.store.put("b/other", "x")
        let a = try await h.ino("a")
        let b = try await h.ino("b")
        let ino = try await h.ino("a/one.txt")
        #expect(try await h.names("a") == ["one.txt"])
        try await h.fs.rename(parent: a, name: "one.txt", newParent: b, newName: "two.txt", flags: 0)
        #expect(h.store.object("a/one.txt") == nil)
        let moved = try #require(h.store.object("b/two.txt"))
        #expect(h.store.data("b/two.txt") == Data("content".utf8))
        #expect(moved.customMetadata == ["k": "v"])
        #expect(moved.contentType == "text/plain")
        #expect(h.store.copies.last?.preconditions == .doesNotExist)
        #expect(h.store.deletes.last?.preconditions.ifGenerationMatch != nil)
        // `a` was prefix-only: its open inode lists nothing now (a fresh lookup would not find it).
        #expect(try await h.readdirAll(a).map(\.name) == [])
        #expect(try await h.readdirAll(b).map(\.name) == ["other", "two.txt"])
        let e = try await h.fs.lookup(parent: b, name: "two.txt")
        #expect(e.attributes.ino == ino)
        #expect(try await h.xattr(e.attributes.ino, "user.k") == "v")
        #expect(try await h.readAll(ino: e.attributes.ino) == Data("content".utf8))
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: a, name: "one.txt") }
    }

    @Test func renameOverAnExistingFileUsesItsGeneration() async throws {
        let h = Harness()
        h.store.put("src", "new bytes")
        let old = h.store.put("dst", "old bytes")
        _ = try await h.names("")
        try await h.fs.rename(parent: Harness.root, name: "src", newParent: Harness.root, newName: "dst", flags: 0)
        #expect(h.store.copies.last?.preconditions == Preconditions(ifGenerationMatch: old.generation))
        #expect(h.store.data("dst") == Data("new bytes".utf8))
        #expect(h.store.names == ["dst"])
        #expect(try await h.names("") == ["dst"])
    }

    @Test func renameADirectoryMovesEveryNestedObject() async throws {
        let h = Harness()
        h.store.put("src/", Data(), custom: ["dirattr": "1"])
        h.store.put("src/a.txt", "a", custom: ["x": "1"])
        h.store.put("src/sub/b.txt", "b")
        h.store.put("src/sub/deeper/c.txt", "c")
        h.store.put("srcsibling.txt", "not moved")
        let fileIno = try await h.ino("src/sub/b.txt")
        try await h.fs.rename(parent: Harness.root, name: "src", newParent: Harness.root, newName: "dst", flags: 0)
        #expect(h.store.names == ["dst/", "dst/a.txt", "dst/sub/b.txt", "dst/sub/deeper/c.txt", "srcsibling.txt"])
        #expect(h.store.object("dst/a.txt")?.customMetadata == ["x": "1"])
        #expect(h.store.object("dst/")?.customMetadata == ["dirattr": "1"])
        #expect(try await h.names("") == ["dst", "srcsibling.txt"])
        #expect(try await h.names("dst") == ["a.txt", "sub"])
        #expect(try await h.names("dst/sub/deeper") == ["c.txt"])
        #expect(try await h.ino("dst/sub/b.txt") == fileIno)
        #expect(try await h.readAll("dst/sub/deeper/c.txt") == Data("c".utf8))
        await #expect(throws: Errno.ENOENT) { try await h.lookup("src") }
    }

    @Test func renameOfAFileBeingWritten() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "tmp.part", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("payload".utf8))
        try await h.fs.rename(parent: Harness.root, name: "tmp.part", newParent: Harness.root, newName: "final.bin", flags: 0)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.names == ["final.bin"])
        #expect(h.store.data("final.bin") == Data("payload".utf8))
    }

    /// What `tar -x` does for each file (the kernel's negative lookup, create with O_EXCL,
    /// writes, futimens and fchmod on the open file, close) costs one request: the upload. The
    /// lookup is answered by the listing of a directory made here or listed already, and the
    /// upload's answer is the new file's metadata.
    @Test(arguments: ["made here", "listed"])
    func tarLikeExtractCostsOneRequestPerFile(parent: String) async throws {
        let h = Harness()
        let dir: UInt64
        if parent == "made here" {
            dir = try await h.fs.mkdir(parent: Harness.root, name: "x", mode: 0o755).attributes.ino
        } else {
            h.store.put("x/old", "old")
            dir = try await h.ino("x")
            _ = try await h.names("x")
        }
        h.store.resetCounts()
        let files = 20
        for i in 0..<files {
            let name = "f\(i)"
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: dir, name: name) }
            let (e, fh) = try await h.fs.create(parent: dir, name: name, mode: 0o644,
                                                flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
            let ino = e.attributes.ino
            _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data.pattern(32 << 10, seed: UInt32(i + 1)))
            _ = try await h.fs.setattr(ino: ino, fh: fh, changes: SetAttributes(atime: 1_600_000_000, mtime: 1_600_000_000))
            _ = try await h.fs.setattr(ino: ino, fh: fh, changes: SetAttributes(mode: 0o640))
            try await h.fs.flush(ino: ino, fh: fh)
            try await h.fs.release(ino: ino, fh: fh)
            // What tar (and ls -l after it) asks next is answered without a request.
            #expect(try await h.getattr(ino).size == 32 << 10)
        }
        #expect(h.store.counts == ["write": files], "per file: one upload, nothing else")
        for i in 0..<files {
            let o = try #require(h.store.object("x/f\(i)"))
            #expect(o.size == 32 << 10)
            #expect(o.customMetadata[XattrName.mtimeKey] == "1600000000")
            #expect(o.customMetadata["goog-reserved-posix-mode"] == "640")
        }
    }

    @Test func setattrMtimeWritesTheMtimeKey() async throws {
        let h = Harness()
        h.store.put("f", "x", custom: ["other": "1"])
        let ino = try await h.ino("f")
        h.store.resetCounts()
        let (a, _) = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mtime: 1_234_567_890))
        #expect(a.mtime == 1_234_567_890)
        #expect(h.store.counts == ["patch": 1])
        #expect(h.store.object("f")?.customMetadata == ["other": "1", XattrName.mtimeKey: "1234567890"])
        #expect(try await h.getattr(ino).mtime == 1_234_567_890)
        // The key stays hidden from xattrs.
        #expect(try await h.fs.listxattr(ino: ino) == ["user.other"])
        // chmod is one PATCH of the mode key (CorePosixTests), still hidden from xattrs.
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mode: 0o600))
        #expect(h.store.counts == ["patch": 2])
        #expect(h.store.object("f")?.customMetadata["goog-reserved-posix-mode"] == "600")
        #expect(try await h.fs.listxattr(ino: ino) == ["user.other"])
    }

    @Test func setattrMtimeOnAFileBeingWrittenGoesIntoTheUpload() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("x".utf8))
        _ = try await h.fs.setattr(ino: e.attributes.ino, fh: fh, changes: SetAttributes(mtime: 1_000_000_000))
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.count("patch") == 0)
        #expect(h.store.object("f")?.customMetadata[XattrName.mtimeKey] == "1000000000")
        #expect(try await h.getattr(e.attributes.ino).mtime == 1_000_000_000)
    }

    @Test func truncateUploads() async throws {
        let h = Harness()
        let v = h.store.put("f", "0123456789")
        let ino = try await h.ino("f")
        let (a, _) = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 4))
        #expect(a.size == 4)
        #expect(h.store.data("f") == Data("0123".utf8))
        #expect(h.store.writes.last?.preconditions == Preconditions(ifGenerationMatch: v.generation))
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 0))
        #expect(h.store.data("f") == Data())
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 3))
        #expect(h.store.data("f") == Data([0, 0, 0]))
        #expect(try await h.getattr(ino).size == 3)
        #expect(try await h.readAll(ino: ino) == Data([0, 0, 0]))
    }
}

extension CoreWriteTests {
    @Test func writingNewContentMovesAnInheritedMtimeKey() async throws {
        let h = Harness()
        h.store.put("f", "old", custom: [XattrName.mtimeKey: "1000", "k": "v"])
        let ino = try await h.ino("f")
        #expect(try await h.getattr(ino).mtime == 1000)
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("new".utf8))
        #expect(try await h.getattr(ino).mtime == h.clock.now)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.object("f")?.customMetadata == [XattrName.mtimeKey: String(Int64(h.clock.now)), "k": "v"])
        #expect(try await h.getattr(ino).mtime == h.clock.now)
        // utimens after the write (cp -p, rsync -t) still wins.
        h.clock.advance(100)
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mtime: 42))
        #expect(try await h.getattr(ino).mtime == 42)
        // So does a truncate of a file that has the key.
        h.clock.advance(100)
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 1))
        #expect(h.store.object("f")?.customMetadata[XattrName.mtimeKey] == String(Int64(h.clock.now)))
    }
}

extension CoreWriteTests {
    @Test func writingToAFileRenamedWhileOpenUploadsToTheNewName() async throws {
        let h = Harness()
        h.store.put("log", "a")
        let ino = try await h.ino("log")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 1, data: Data("b".utf8))
        try await h.fs.rename(parent: Harness.root, name: "log", newParent: Harness.root, newName: "log.1", flags: 0)
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 2, data: Data("c".utf8))
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.names == ["log.1"])
        #expect(h.store.data("log.1") == Data("abc".utf8))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound)) ?? [] == [])
    }

    @Test func setxattrOnAFileOpenForWritingButUnchangedIsOnePatch() async throws {
        let h = Harness()
        h.store.put("f", "data", custom: ["a": "1"])
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
        h.store.resetCounts()
        try await h.setXattr(ino, "user.k", "v")
        #expect(h.store.counts == ["patch": 1])
        #expect(h.store.object("f")?.customMetadata == ["a": "1", "k": "v"])
        // A later write uploads content and keeps the attribute.
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 4, data: Data("!".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("f") == Data("data!".utf8))
        #expect(h.store.object("f")?.customMetadata == ["a": "1", "k": "v"])
        #expect(h.store.counts == ["patch": 1, "write": 1])
    }
}
