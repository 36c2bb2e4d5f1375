@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Modes, owners and symbolic links kept in the bucket (docs/SEMANTICS.md §3).
@Suite struct CorePosixTests {
    private static let mode = "goog-reserved-posix-mode"
    private static let uid = "goog-reserved-posix-uid"
    private static let gid = "goog-reserved-posix-gid"
    private static let link = "goog-reserved-file-is-symlink"
    private static let caller = FuseCaller(uid: 1234, gid: 5678)

    @Test func parsesGsutilsFormatAndRefusesTheRest() {
        #expect(PosixAttributes.parseMode("644") == 0o644)
        #expect(PosixAttributes.parseMode("000") == 0)
        #expect(PosixAttributes.parseMode("777") == 0o777)
        for bad in ["", "64", "0644", "4755", "8aa", "rw-", " 644", "-12", "６４４"] {
            #expect(PosixAttributes.parseMode(bad) == nil, "\(bad)")
        }
        #expect(PosixAttributes.parseID("0") == 0)
        #expect(PosixAttributes.parseID("4294967295") == UInt32.max)
        for bad in ["", "-1", "4294967296", "12a", "+5", "1.0"] { #expect(PosixAttributes.parseID(bad) == nil, "\(bad)") }
        #expect(PosixAttributes.formatMode(0o4755) == "755")
        #expect(PosixAttributes.formatMode(0o7) == "007")
        let p = PosixAttributes([Self.mode: "640", Self.uid: "1000", Self.gid: "x"])
        #expect(p.mode == 0o640 && p.uid == 1000 && p.gid == nil && !p.isSymlink)
        #expect(p.unparsable.map(\.key) == [Self.gid])
        #expect(PosixAttributes([Self.link: "true"]).isSymlink)
        #expect(!PosixAttributes([Self.link: "false"]).isSymlink)
        let legacy = PosixAttributes(["gcsfuse_symlink_target": "../t"])
        #expect(legacy.isSymlink && legacy.legacyTarget == "../t")
        var m: [String: String] = ["other": "1"]
        PosixAttributes(mode: 0o1750, uid: 7, gid: 8, isSymlink: true).write(into: &m)
        #expect(m == ["other": "1", Self.mode: "750", Self.uid: "7", Self.gid: "8", Self.link: "true"])
    }

    @Test func statShowsTheKeysAndFallsBackToTheOptions() async throws {
        let h = Harness { $0.uid = 11; $0.gid = 22; $0.fileMode = 0o644; $0.dirMode = 0o755 }
        h.store.put("a", "x", custom: [Self.mode: "600", Self.uid: "1000", Self.gid: "1001"])
        h.store.put("b", "x", custom: [Self.mode: "9999", Self.uid: "-3", Self.gid: "abc"])
        h.store.put("c", "x")
        h.store.put("d/", "", custom: [Self.mode: "700", Self.uid: "42", Self.gid: "43", XattrName.mtimeKey: "1500000000"])
        h.store.put("d/f", "x")
        h.store.put("e/f", "x")
        let a = try await h.lookup("a").attributes
        #expect(a.permissions == 0o600 && a.uid == 1000 && a.gid == 1001 && a.type == .regular)
        let b = try await h.lookup("b").attributes
        #expect(b.permissions == 0o644 && b.uid == 11 && b.gid == 22)
        let c = try await h.lookup("c").attributes
        #expect(c.permissions == 0o644 && c.uid == 11 && c.gid == 22)
        let d = try await h.lookup("d").attributes
        #expect(d.type == .directory && d.permissions == 0o700 && d.uid == 42 && d.gid == 43 && d.mtime == 1_500_000_000)
        let e = try await h.lookup("e").attributes
        #expect(e.type == .directory && e.permissions == 0o755 && e.uid == 11 && e.mtime == h.core.mountTime)
    }

    @Test func listingAloneGivesFilesModesAndLinksTheirTypeAndSize() async throws {
        let h = Harness()
        for i in 0..<20 { h.store.put("f\(i)", "x", custom: [Self.mode: "640", Self.uid: "\(i)"]) }
        h.store.put("l", "some/target", custom: [Self.link: "true"])
        h.store.put("old", "", custom: ["gcsfuse_symlink_target": "../x/y"])
        h.store.resetCounts()
        let entries = try await h.readdirAll(Harness.root)
        #expect(h.store.counts == ["list": 1])
        let byName = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0.entry.attributes) })
        #expect(byName["f3"]?.permissions == 0o640 && byName["f3"]?.uid == 3)
        #expect(byName["l"]?.type == .symlink && byName["l"]?.size == 11 && byName["l"]?.permissions == 0o777)
        #expect(byName["old"]?.type == .symlink && byName["old"]?.size == 6)
        #expect(entries.allSatisfy { $0.attributesKnown })
        _ = try await h.lookup("f3")
        _ = try await h.lookup("l")
        #expect(h.store.counts == ["list": 1])
    }

    @Test func chmodAndChownAreOnePatchWithAMetagenerationPrecondition() async throws {
        let h = Harness()
        h.store.put("f", "x", custom: ["keep": "me"])
        let ino = try await h.ino("f")
        let before = h.store.object("f")!
        h.store.resetCounts()
        let (attrs, _) = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mode: 0o4755))
        #expect(attrs.permissions == 0o755)
        #expect(h.store.counts == ["patch": 1])
        let call = try #require(h.store.patches.last)
        #expect(call.preconditions.ifMetagenerationMatch == before.metageneration)
        #expect(h.store.object("f")!.customMetadata == ["keep": "me", Self.mode: "755"])
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(uid: 1000, gid: 1001))
        #expect(h.store.counts == ["patch": 2])
        #expect(h.store.object("f")!.customMetadata == ["keep": "me", Self.mode: "755", Self.uid: "1000", Self.gid: "1001"])
        let shown = try await h.fs.getattr(ino: ino).0
        #expect(shown.uid == 1000 && shown.gid == 1001 && shown.permissions == 0o755)
        #expect(h.store.counts == ["patch": 2])
        // Hidden from xattrs.
        #expect(try await h.fs.listxattr(ino: ino) == ["user.keep"])
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "user." + Self.mode) }
        await #expect(throws: Errno.EPERM) { try await h.setXattr(ino, "user." + Self.mode, "777") }
    }

    /// What FuseKit answers on libfuse's thread: tar's fchown/fchmod/futimens of a file it is
    /// writing join the upload at once; a change that needs a PATCH, or a size, is left to setattr.
    @Test func immediateSetattrTakesOnlyChangesThatJoinAPendingUpload() async throws {
        let h = Harness()
        h.store.put("old", "x")
        let old = try await h.ino("old")
        _ = try await h.readdirAll(Harness.root)
        h.store.resetCounts()
        // A file in the bucket with nothing pending: a PATCH, so not here.
        #expect(h.fs.immediateSetattr(ino: old, fh: nil, changes: SetAttributes(mode: 0o600)) == nil)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "new", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("hi".utf8))
        // A size, or nothing the metadata keeps (atime only): setattr's.
        #expect(h.fs.immediateSetattr(ino: ino, fh: fh, changes: SetAttributes(size: 1)) == nil)
        #expect(h.fs.immediateSetattr(ino: ino, fh: fh, changes: SetAttributes(atime: 5)) == nil)
        let r = try #require(h.fs.immediateSetattr(ino: ino, fh: fh, changes: SetAttributes(mode: 0o4750, uid: 7, gid: 8, mtime: 1_600_000_000)))
        let attrs = try r.get().0
        #expect(attrs.permissions == 0o750 && attrs.uid == 7 && attrs.gid == 8 && attrs.mtime == 1_600_000_000)
        #expect(h.store.counts.isEmpty, "no request of its own")
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.counts == ["write": 1])
        #expect(h.store.object("new")!.customMetadata == [Self.mode: "750", Self.uid: "7", Self.gid: "8", XattrName.mtimeKey: "1600000000"])
        // Once uploaded, nothing is pending: a PATCH again.
        #expect(h.fs.immediateSetattr(ino: ino, fh: nil, changes: SetAttributes(mode: 0o600)) == nil)
    }

    @Test func chmodOfAPrefixOnlyDirectoryCreatesItsPlaceholder() async throws {
        let h = Harness()
        h.store.put("d/f", "x")
        let ino = try await h.ino("d")
        h.store.resetCounts()
        _ = try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mode: 0o700, mtime: 1_600_000_000))
        #expect(h.store.counts == ["write": 1])
        #expect(h.store.object("d/")!.customMetadata == [Self.mode: "700", XattrName.mtimeKey: "1600000000"])
        let a = try await h.fs.getattr(ino: ino).0
        #expect(a.permissions == 0o700 && a.mtime == 1_600_000_000)
    }

    @Test func createAndMkdirCarryModeAndOwnerInTheirUpload() async throws {
        let h = Harness()
        _ = try await h.fs.getattr(ino: Harness.root)
        _ = try await h.readdirAll(Harness.root)
        h.store.resetCounts()
        let caller = Self.caller
        try await FuseCaller.$current.withValue(caller) { () async throws in
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: "new", mode: 0o640, flags: OpenFlags(O_WRONLY | O_CREAT))
            #expect(e.attributes.permissions == 0o640 && e.attributes.uid == 1234 && e.attributes.gid == 5678)
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("hi".utf8))
            // chmod of a file not uploaded yet rides along.
            _ = try await h.fs.setattr(ino: e.attributes.ino, fh: fh, changes: SetAttributes(mode: 0o600))
            try await h.fs.flush(ino: e.attributes.ino, fh: fh)
            try await h.fs.release(ino: e.attributes.ino, fh: fh)
            let d = try await h.fs.mkdir(parent: Harness.root, name: "dir", mode: 0o750)
            #expect(d.attributes.permissions == 0o750 && d.attributes.uid == 1234)
        }
        #expect(h.store.counts == ["write": 2])
        #expect(h.store.object("new")!.customMetadata == [Self.mode: "600", Self.uid: "1234", Self.gid: "5678"])
        #expect(h.store.object("dir/")!.customMetadata == [Self.mode: "750", Self.uid: "1234", Self.gid: "5678"])
    }

    @Test func symlinkIsOneUploadAndReadsBackWithoutAGet() async throws {
        let h = Harness()
        _ = try await h.readdirAll(Harness.root)
        h.store.resetCounts()
        let e = try await FuseCaller.$current.withValue(Self.caller) { () async throws(Errno) -> FuseEntry in
            try await h.fs.symlink(parent: Harness.root, name: "l", target: "../a b/c")
        }
        #expect(e.attributes.type == .symlink && e.attributes.size == 8)
        #expect(h.store.counts == ["write": 1])
        let w = try #require(h.store.writes.last)
        #expect(w.name == "l" && w.data == Data("../a b/c".utf8) && w.preconditions.ifGenerationMatch == 0)
        #expect(w.metadata.customMetadata == [Self.link: "true", Self.mode: "777", Self.uid: "1234", Self.gid: "5678"])
        #expect(try await h.fs.readlink(ino: e.attributes.ino) == "../a b/c")
        #expect(h.store.counts == ["write": 1])
        // No user.* names on a link (the kernel refuses them there), even with a content type.
        #expect(try await h.fs.listxattr(ino: e.attributes.ino) == [])
        await #expect(throws: Errno.EEXIST) { try await h.fs.symlink(parent: Harness.root, name: "l", target: "x") }
        // Renamed and unlinked like files.
        try await h.fs.rename(parent: Harness.root, name: "l", newParent: Harness.root, newName: "m", flags: 0)
        #expect(h.store.object("m")?.customMetadata[Self.link] == "true")
        let m = try await h.lookup("m")
        #expect(m.attributes.type == .symlink)
        #expect(try await h.fs.readlink(ino: m.attributes.ino) == "../a b/c")
        try await h.fs.unlink(parent: Harness.root, name: "m")
        #expect(h.store.object("m") == nil)
    }

    @Test func readlinkOfAListedLinkIsOneGetPerGeneration() async throws {
        let h = Harness()
        h.store.put("l", "target/file", custom: [Self.link: "true"])
        h.store.put("old", "", custom: ["gcsfuse_symlink_target": "legacy/t"])
        h.store.put("f", "plain")
        let l = try await h.ino("l"), old = try await h.ino("old"), f = try await h.ino("f")
        h.store.resetCounts()
        #expect(try await h.fs.readlink(ino: l) == "target/file")
        #expect(try await h.fs.readlink(ino: l) == "target/file")
        h.clock.advance(10)
        #expect(try await h.fs.readlink(ino: l) == "target/file")
        #expect(h.store.count("read") == 1)
        #expect(try await h.fs.readlink(ino: old) == "legacy/t")
        #expect(h.store.count("read") == 1)
        await #expect(throws: Errno.EINVAL) { try await h.fs.readlink(ino: f) }
        // The legacy key stays hidden from xattrs.
        #expect(try await h.fs.listxattr(ino: old) == [])
        await #expect(throws: Errno.EPERM) { try await h.setXattr(f, "user.gcsfuse_symlink_target", "x") }
    }

    @Test func refusals() async throws {
        let h = Harness { $0.mknodUploadDelay = 0 }
        h.store.put("f", "x")
        let f = try await h.ino("f")
        await #expect(throws: Errno.ENAMETOOLONG) {
            try await h.fs.symlink(parent: Harness.root, name: "l", target: String(repeating: "a", count: 4096))
        }
        _ = try await h.fs.symlink(parent: Harness.root, name: "ok", target: String(repeating: "a", count: 4095))
        await #expect(throws: Errno.EPERM) { try await h.fs.link(ino: f, newParent: Harness.root, newName: "g") }
        await #expect(throws: Errno.EPERM) { try await h.fs.mknod(parent: Harness.root, name: "p", mode: UInt32(S_IFIFO) | 0o644, rdev: 0) }
        #expect(h.store.object("g") == nil && h.store.object("p") == nil && h.store.object("l") == nil)
        // A regular file made with mknod (a non-atomic create) is an empty file, with its mode
        // (uploaded once no open has come for it within the wait: CoreMknodTests).
        let r = try await h.fs.mknod(parent: Harness.root, name: "r", mode: UInt32(S_IFREG) | 0o640, rdev: 0)
        #expect(r.attributes.type == .regular && r.attributes.permissions == 0o640)
        #expect(await eventually { h.store.object("r")?.customMetadata["goog-reserved-posix-mode"] == "640" })
    }

    @Test func posixMetadataOffReadsAndWritesNoKey() async throws {
        let h = Harness { $0.posixMetadata = false; $0.uid = 11; $0.gid = 22 }
        h.store.put("a", "x", custom: [Self.mode: "600", Self.uid: "1000"])
        h.store.put("l", "target", custom: [Self.link: "true"])
        h.store.put("d/", "", custom: [Self.mode: "700"])
        let a = try await h.lookup("a")
        #expect(a.attributes.permissions == 0o644 && a.attributes.uid == 11)
        #expect(try await h.lookup("l").attributes.type == .regular)
        #expect(try await h.lookup("d").attributes.permissions == 0o755)
        h.store.resetCounts()
        _ = try await h.fs.setattr(ino: a.attributes.ino, fh: nil, changes: SetAttributes(mode: 0o700, uid: 5))
        #expect(h.store.counts == [:])
        try await FuseCaller.$current.withValue(Self.caller) { () async throws in
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: "n", mode: 0o600, flags: OpenFlags(O_WRONLY | O_CREAT))
            try await h.fs.release(ino: e.attributes.ino, fh: fh)
            _ = try await h.fs.mkdir(parent: Harness.root, name: "m", mode: 0o700)
            await #expect(throws: Errno.EPERM) { try await h.fs.symlink(parent: Harness.root, name: "s", target: "t") }
        }
        #expect(h.store.object("n")!.customMetadata.isEmpty)
        #expect(h.store.object("m/")!.customMetadata.isEmpty)
    }

    /// A listing asks for its subdirectories' placeholders too (`includeTrailingDelimiter`), so
    /// a directory with a placeholder shows its mode from the listing alone; one without (only a
    /// prefix) is left to the kernel's lookup, which reads it once (a 404) and keeps that for the
    /// TTL.
    @Test func subdirectoriesModesComeWithTheListingAndTheRestFromOneLookup() async throws {
        let h = Harness()
        h.store.put("d/", "", custom: [Self.mode: "700"])
        h.store.put("d/f", "x")
        h.store.put("p/f", "x")
        let entries = try await h.readdirAll(Harness.root)
        #expect(entries.map(\.name) == ["d", "p"])
        #expect(entries.map(\.attributesKnown) == [true, false])
        #expect(h.store.lists.allSatisfy { $0.includeTrailingDelimiter })
        h.store.resetCounts()
        #expect(try await h.lookup("d").attributes.permissions == 0o700)
        #expect(h.store.count("get") == 0, "the placeholder came with the listing")
        #expect(try await h.lookup("p").attributes.permissions == 0o755)
        #expect(h.store.count("get") == 1)
        let again = try await h.readdirAll(Harness.root)
        #expect(again.allSatisfy { $0.attributesKnown })
        #expect(h.store.count("list") == 0)
        #expect(try await h.lookup("p").attributes.permissions == 0o755)
        #expect(h.store.count("get") == 1)
    }
}
