@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// What creates and the lookups before them cost, in store requests (docs/SEMANTICS.md §6): a
/// mkdir in a listed directory is its placeholder alone; a name a lookup found missing is not
/// asked again within the TTL; a directory where a name was missing is listed, once, rather than
/// asked name by name; a directory made here answers lookups under it with no request.
@Suite struct CoreCreateCostTests {
    /// The kernel's lookup before a mkdir (ENOENT), then the mkdir.
    static func mkdir(_ h: Harness, _ parent: UInt64, _ name: String) async throws -> UInt64 {
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: parent, name: name) }
        return try await h.fs.mkdir(parent: parent, name: name, mode: 0o755).attributes.ino
    }

    @Test func mkdirInAListedDirectoryCostsItsPlaceholder() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        _ = try await h.names("x")
        h.store.resetCounts()
        _ = try await Self.mkdir(h, x, "new")
        #expect(h.store.counts == ["write": 1])
        #expect(h.store.object("x/new/") != nil)
    }

    /// `mkdir -p a/b/c` in a directory never listed: the first lookup asks, with one list request
    /// (`NameProbe`), and nothing after it does: the mkdir's own check finds `a` known missing,
    /// and `b` and `c` are looked up in directories made here. One request per level beyond that
    /// lookup, which no create can do without (docs/SEMANTICS.md §6: the placeholder's
    /// precondition does not see a file `a`, nor a directory `a` that is a prefix only).
    @Test func mkdirPInANewTreeCostsOneRequestPerLevel() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        h.store.resetCounts()
        let a = try await Self.mkdir(h, x, "a")
        #expect(h.store.counts == ["list": 1, "write": 1], "the lookup of a, then its placeholder")
        h.store.resetCounts()
        let b = try await Self.mkdir(h, a, "b")
        _ = try await Self.mkdir(h, b, "c")
        #expect(h.store.counts == ["write": 2])
        #expect(h.store.names.filter { $0.hasSuffix("/") } == ["x/a/", "x/a/b/", "x/a/b/c/"])
    }

    @Test func mkdirPUnderAListedDirectoryCostsOneRequestPerLevel() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        _ = try await h.names("x")
        h.store.resetCounts()
        var parent = x
        for name in ["a", "b", "c"] { parent = try await Self.mkdir(h, parent, name) }
        #expect(h.store.counts == ["write": 3])
    }

    /// Files and directories created under a directory made here: every lookup (the kernel's,
    /// create's own check, a name never made) is answered by its listing; the uploads are the
    /// only requests.
    @Test func lookupsUnderADirectoryMadeHereCostNothing() async throws {
        let h = Harness()
        let d = try await h.fs.mkdir(parent: Harness.root, name: "d", mode: 0o755).attributes.ino
        h.store.resetCounts()
        for i in 0..<5 {
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: d, name: "f\(i)") }
            let (e, fh) = try await h.fs.create(parent: d, name: "f\(i)", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("x".utf8))
            try await h.fs.flush(ino: e.attributes.ino, fh: fh)
            try await h.fs.release(ino: e.attributes.ino, fh: fh)
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: d, name: "other\(i)") }
            #expect(try await h.fs.lookup(parent: d, name: "f\(i)").attributes.size == 1)
        }
        let sub = try await h.fs.mkdir(parent: d, name: "sub", mode: 0o755).attributes.ino
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: sub, name: "x") }
        #expect(h.store.counts == ["write": 6], "\(h.store.counts)")
    }

    /// A name missing from a fresh listing is not asked for: the kernel's lookup on libfuse's
    /// thread, create's own check and a rename's destination are answered by the listing.
    @Test func aNameMissingFromAFreshListingIsNotAskedFor() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        _ = try await h.names("x")
        h.store.resetCounts()
        guard case .failure(.ENOENT)? = h.fs.cachedLookup(parent: x, name: "new") else {
            Issue.record("the kernel's lookup is not answered from the listing"); return
        }
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "new") }
        let (e, fh) = try await h.fs.create(parent: x, name: "new", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("n".utf8))
        try await h.fs.rename(parent: x, name: "new", newParent: x, newName: "final", flags: 0)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.counts == ["write": 1], "\(h.store.counts)")
        #expect(h.store.object("x/final") != nil)
    }

    /// A name a lookup found missing (its directory never listed) is not asked again within the
    /// TTL: the kernel's second lookup is answered on libfuse's thread, create's own check with no
    /// request; after the TTL it is asked again.
    @Test func aNameFoundMissingIsNotAskedAgainWithinTheTTL() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        h.store.resetCounts()
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "new") }
        #expect(h.store.counts == ["list": 1])
        h.store.resetCounts()
        guard case .failure(.ENOENT)? = h.fs.cachedLookup(parent: x, name: "new") else {
            Issue.record("the kernel's next lookup is not answered from the negative cache"); return
        }
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "new") }
        let (e, fh) = try await h.fs.create(parent: x, name: "new", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
        #expect(h.store.counts == [:], "no request before the upload")
        // The name made here is found at once, missing no more.
        #expect(try await h.fs.lookup(parent: x, name: "new").attributes.ino == e.attributes.ino)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.counts == ["write": 1])
    }

    /// A name found missing stays missing for the TTL, as a listing would show it (another client's
    /// object shows after it), and is asked again after.
    @Test func anotherClientsObjectShowsAfterTheTTL() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "theirs") }
        h.store.put("x/theirs", "hello")
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "theirs") }
        h.clock.advance(5.1)
        #expect(try await h.fs.lookup(parent: x, name: "theirs").attributes.size == 5)
    }

    /// rsync's pattern in a directory never listed, with --write-back: the final name looked up, a
    /// temporary name looked up and created, closed, the final name looked up again at the
    /// rename. After the first miss the directory is listed (one page) and answers the rest:
    /// about one request per file, the upload, with the default TTL.
    @Test func aDirectoryWithAMissIsListedOnceRatherThanAskedNameByName() async throws {
        let h = Harness { c in
            c.writeBack = true
            c.writeBackDelay = 0.3
        }
        h.store.put("x/old", "old")
        let x = try await h.ino("x")
        h.store.resetCounts()
        let files = 30
        for i in 0..<files {
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "f\(i)") }
        }
        for i in 0..<files {
            let temp = ".f\(i).AbC\(i)"
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "f\(i)") }
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: temp) }
            let (e, fh) = try await h.fs.create(parent: x, name: temp, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("payload \(i)".utf8))
            try await h.fs.release(ino: e.attributes.ino, fh: fh)
            try await h.fs.rename(parent: x, name: temp, newParent: x, newName: "f\(i)", flags: 0)
        }
        await h.core.uploads.drained()
        // the first miss (one list request), one listing, and the uploads
        #expect(h.store.counts == ["list": 2, "write": files], "\(h.store.counts)")
        #expect(try await h.names("x").count == files + 1)
    }

    /// A directory whose first page does not hold it is not listed for a lookup: asked name by
    /// name (one wasted page per TTL).
    @Test func aLargeDirectoryIsAskedNameByName() async throws {
        let h = Harness { $0.listPageSize = 10 }
        for i in 0..<25 { h.store.put("x/o\(i)", "o") }
        let x = try await h.ino("x")
        h.store.resetCounts()
        for i in 0..<4 {
            await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "n\(i)") }
        }
        #expect(h.store.counts == ["list": 4 + 1], "a list request a name, and one page tried once")
        #expect(try await h.fs.lookup(parent: x, name: "o3").attributes.size == 1)
    }
}
