@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A prefix-only directory this mount emptied (docs/SEMANTICS.md §3.2, "A directory emptied
/// here"): kept, empty, for the metadata TTL after the rm, whether the kernel still holds its
/// entry or dropped it (a fresh lookup from the root); after the TTL, gone both ways.
@Suite struct CoreEmptiedDirectoryTests {
    func ls(_ h: Harness, _ ino: UInt64) async throws(Errno) -> [String] {
        try await h.readdirAll(ino).map(\.name).filter { $0 != "." && $0 != ".." }
    }

    @Test func anEmptiedDirectoryIsKeptForTheTTLWhateverTheKernelHolds() async throws {
        let h = Harness()  // metadata TTL 5 s on the test clock
        h.store.put("dir/old.txt", "old")
        let held = try await h.lookup("dir").attributes.ino
        #expect(try await ls(h, held) == ["old.txt"])
        try await h.fs.unlink(parent: held, name: "old.txt")
        #expect(h.store.object("dir/old.txt") == nil)
        // The kernel still holds it: an empty listing.
        #expect(try await ls(h, held) == [])
        // The kernel dropped it: the lookup finds it all the same (the bucket shows nothing).
        h.fs.forget(ino: held, nlookup: 1)
        let found = try await h.fs.lookup(parent: Harness.root, name: "dir")
        #expect(found.attributes.type == .directory)
        #expect(try await ls(h, found.attributes.ino) == [])
        // A listing made late in the TTL does not outlive it.
        h.clock.advance(4)
        #expect(try await ls(h, found.attributes.ino) == [])
        // After the TTL: gone both ways.
        h.clock.advance(2)
        await #expect(throws: Errno.ENOENT) { _ = try await h.fs.lookup(parent: Harness.root, name: "dir") }
        await #expect(throws: Errno.ENOENT) { _ = try await ls(h, found.attributes.ino) }
    }

    @Test func aFileMadeInItWithinTheTTLMakesItRealAndRmdirForgetsIt() async throws {
        let h = Harness()
        h.store.put("a/x", "x")
        h.store.put("b/y", "y")
        let a = try await h.lookup("a").attributes.ino
        try await h.fs.unlink(parent: a, name: "x")
        _ = try await h.createFile("a", "new.txt", Data("n".utf8))
        h.clock.advance(6)
        #expect(try await h.names("a") == ["new.txt"])
        // rmdir of an emptied directory within the TTL removes it for good.
        let b = try await h.lookup("b").attributes.ino
        try await h.fs.unlink(parent: b, name: "y")
        try await h.fs.rmdir(parent: Harness.root, name: "b")
        await #expect(throws: Errno.ENOENT) { _ = try await h.fs.lookup(parent: Harness.root, name: "b") }
    }

    @Test func aDirectoryMadeWithMkdirStaysAfterTheTTL() async throws {
        let h = Harness()
        let d = try await h.fs.mkdir(parent: Harness.root, name: "made", mode: 0o755)
        _ = try await h.createFile("made", "f", Data("f".utf8))
        try await h.fs.unlink(parent: d.attributes.ino, name: "f")
        h.clock.advance(6)
        #expect(try await ls(h, d.attributes.ino) == [])
        #expect(try await h.fs.lookup(parent: Harness.root, name: "made").attributes.type == .directory)
    }
}

@Suite struct CoreEmptiedDirectoryRenameTests {
    /// A directory renamed away is not kept under its old name (reference model: bucket 'c/a',
    /// rename 'c/a' → 'c/b', rename 'c' → 'a', create 'c').
    @Test func aDirectoryRenamedAwayIsNotKept() async throws {
        let h = Harness()
        h.store.put("c/a", "")
        let c = try await h.lookup("c").attributes.ino
        try await h.fs.rename(parent: c, name: "a", newParent: c, newName: "b", flags: 0)
        try await h.fs.rename(parent: Harness.root, name: "c", newParent: Harness.root, newName: "a", flags: 0)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "c", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.object("c") != nil)
    }
}
