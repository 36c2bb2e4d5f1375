@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A lookup in a directory never listed is one list request (`NameProbe`, docs/SEMANTICS.md §6),
/// whatever it finds: a file with its metadata, a directory with its placeholder's, a directory
/// that is a prefix only, a directory that wins over a file of its name, or nothing. A page that
/// cannot tell, and a store that cannot list under a partial name, are asked the old way.
@Suite struct CoreNameProbeTests {
    /// `x` looked up (not listed), then the counts reset.
    static func tree(_ h: Harness) async throws -> UInt64 {
        h.store.put("x/old", "old")
        h.store.put("x/f", "hello")
        h.store.put("x/d/", custom: [PosixAttributes.modeKey: "700"])
        h.store.put("x/d/in", "in")
        h.store.put("x/p/in", "in")  // a directory with no placeholder
        h.store.put("x/c", "a file hidden by the directory c")
        h.store.put("x/c/in", "in")
        // Names that sort between `n` and `n/`, beside each of them.
        for n in ["f", "d", "p", "c", "missing"] {
            h.store.put("x/\(n).txt", "look-alike")
            h.store.put("x/\(n)-1", "look-alike")
        }
        let x = try await h.ino("x")
        h.store.resetCounts()
        return x
    }

    @Test func aLookupInADirectoryNeverListedIsOneListRequest() async throws {
        let h = Harness()
        let x = try await Self.tree(h)
        let f = try await h.fs.lookup(parent: x, name: "f")
        #expect(f.attributes.type == .regular && f.attributes.size == 5)
        #expect(h.store.counts == ["list": 1], "\(h.store.counts)")
        let d = try await h.fs.lookup(parent: x, name: "d")
        #expect(d.attributes.type == .directory)
        #expect(d.attributes.permissions & 0o777 == 0o700, "the placeholder's mode, from the same page")
        let p = try await h.fs.lookup(parent: x, name: "p")
        #expect(p.attributes.type == .directory)
        #expect(p.attributes.permissions & 0o777 == h.config.dirMode & 0o777)
        let c = try await h.fs.lookup(parent: x, name: "c")
        #expect(c.attributes.type == .directory, "the directory wins over the file c")
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "missing") }
        #expect(h.store.counts == ["list": 5], "one list request a name: \(h.store.counts)")
        // What the lookups brought is shown with no request more.
        #expect(try await h.fs.getattr(ino: d.attributes.ino).0.permissions & 0o777 == 0o700)
        #expect(try await h.fs.getattr(ino: f.attributes.ino).0.size == 5)
        #expect(try await h.readdirAll(d.attributes.ino).map(\.name) == ["in"])
        #expect(h.store.counts == ["list": 6], "\(h.store.counts)")
        // Each request asked for one name's range, with no delimiter.
        let probes = h.store.lists.prefix(5)
        #expect(probes.map(\.prefix) == ["x/f", "x/d", "x/p", "x/c", "x/missing"])
        #expect(probes.allSatisfy { $0.delimiter == nil && $0.endOffset == $0.prefix + "0" })
    }

    /// More names between `a` and `a/` than a page holds: the page cannot tell, and the name is
    /// asked the old way (a GET and a one-item list of `a/`).
    @Test func aPageOfLookAlikesIsAskedTheOldWay() async throws {
        let h = Harness()
        h.store.put("x/old", "old")
        for i in 0..<(NameProbe.maxResults + 4) {
            h.store.put("x/a.\(i)", "look-alike")
            h.store.put("x/b.\(i)", "look-alike")
        }
        h.store.put("x/a/in", "in")
        let x = try await h.ino("x")
        h.store.resetCounts()
        #expect(try await h.fs.lookup(parent: x, name: "a").attributes.type == .directory)
        #expect(h.store.counts == ["list": 2, "get": 1], "\(h.store.counts)")
        h.store.resetCounts()
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "b") }
        #expect(h.store.counts == ["list": 2, "get": 1], "\(h.store.counts)")
    }

    /// A store that cannot list under a partial name in one request (Firebase's v0 walks the
    /// directory for it) is asked with a GET and a one-item list, as before.
    @Test func aStoreThatCannotListUnderAPartialNameIsAskedByGetAndList() async throws {
        let h = Harness(store: MemoryStore(listsUnderPartialNames: false))
        let x = try await Self.tree(h)
        #expect(try await h.fs.lookup(parent: x, name: "f").attributes.size == 5)
        #expect(try await h.fs.lookup(parent: x, name: "d").attributes.permissions & 0o777 == 0o700)
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: x, name: "missing") }
        #expect(h.store.counts == ["list": 3, "get": 3], "\(h.store.counts)")
        #expect(h.store.lists.allSatisfy { $0.prefix.hasSuffix("/") && $0.maxResults == 1 })
    }

    /// Why a mkdir in a directory never listed asks the bucket once before its placeholder: the
    /// placeholder's precondition (`ifGenerationMatch=0` on `name/`) holds over a file `name`
    /// and over a directory that is a prefix only. The check refuses both (EEXIST) and writes
    /// nothing; the file stays shown.
    @Test func mkdirOverAFileOrAPrefixInADirectoryNeverListedIsEEXIST() async throws {
        let h = Harness()
        let x = try await Self.tree(h)
        await #expect(throws: Errno.EEXIST) { try await h.fs.mkdir(parent: x, name: "f", mode: 0o755) }
        await #expect(throws: Errno.EEXIST) { try await h.fs.mkdir(parent: x, name: "p", mode: 0o755) }
        #expect(h.store.counts == ["list": 2], "one request each, no write: \(h.store.counts)")
        #expect(h.store.object("x/f/") == nil && h.store.object("x/p/") == nil)
        #expect(try await h.fs.lookup(parent: x, name: "f").attributes.type == .regular)
    }

    // MARK: - what one page says

    static func info(_ name: String) -> ObjectInfo {
        ObjectInfo(bucket: "b", name: name, generation: 1, metageneration: 1, size: 1,
                   timeCreated: Date(timeIntervalSince1970: 0), updated: Date(timeIntervalSince1970: 0),
                   md5Hash: nil, crc32c: nil, writable: WritableMetadata())
    }

    static func page(_ names: [String], more: Bool = false) -> ListPage {
        ListPage(items: names.map(info), nextPageToken: more ? "t" : nil)
    }

    @Test func whatOnePageSays() {
        typealias P = NameProbe
        #expect(P.answer(Self.page([]), for: "d/a") == .missing)
        #expect(P.answer(Self.page(["d/a.txt", "d/a-1"]), for: "d/a") == .missing)
        #expect(P.answer(Self.page(["d/a", "d/a.txt"]), for: "d/a") == .file(Self.info("d/a")))
        #expect(P.answer(Self.page(["d/a", "d/a.txt", "d/a/"]), for: "d/a") == .directory(placeholder: Self.info("d/a/")))
        #expect(P.answer(Self.page(["d/a/x/y", "d/a/z"]), for: "d/a") == .directory(placeholder: nil))
        // A full page that stops before `d/a/`: it cannot tell.
        #expect(P.answer(Self.page(["d/a", "d/a.1", "d/a.2"], more: true), for: "d/a") == nil)
        #expect(P.answer(Self.page(["d/a.1", "d/a.2"], more: true), for: "d/a") == nil)
        // Something under `d/a/` on a full page: a directory all the same.
        #expect(P.answer(Self.page(["d/a.1", "d/a/in"], more: true), for: "d/a") == .directory(placeholder: nil))
        // A server that ignores endOffset went past `d/a0`: every name before it was listed.
        #expect(P.answer(Self.page(["d/a", "d/a.1", "d/ab"], more: true), for: "d/a") == .file(Self.info("d/a")))
        #expect(P.request("d/a") == ListRequest(prefix: "d/a", delimiter: nil, maxResults: P.maxResults, endOffset: "d/a0"))
    }
}
