@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A walk down a tree (`ls -R`, `find`, `du`) reads each subdirectory in turn: a readdir that
/// must list its directory lists the next subdirectories of its parent with it, many at once
/// (docs/SEMANTICS.md §6), so the walk does not pay a round trip per directory.
@Suite struct CoreListingAheadTests {
    /// `t/` with 40 subdirectories `d00`…`d39` of two files each.
    func harness(_ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        let h = Harness(configure)
        for i in 0..<40 {
            _ = h.store.put(String(format: "t/d%02d/a", i), "a")
            _ = h.store.put(String(format: "t/d%02d/b", i), "b")
        }
        return h
    }

    /// The list requests each subdirectory's readdir costs, walked in order as `ls -R` does.
    func walk(_ h: Harness) async throws -> [Int] {
        let t = try await h.ino("t")
        let dirs = try await h.readdirAll(t).map(\.name)
        var listsPerReaddir: [Int] = []
        for name in dirs {
            let d = try await h.fs.lookup(parent: t, name: name).attributes.ino
            let before = h.store.count("list")
            let shown = try await h.readdirAll(d).map(\.name)
            #expect(shown == ["a", "b"], "\(name): \(shown)")
            listsPerReaddir.append(h.store.count("list") - before)
        }
        return listsPerReaddir
    }

    @Test func aWalkListsTheNextSubdirectoriesWithTheOneItReads() async throws {
        let h = harness()
        let lists = try await walk(h)
        // The first readdir lists its own directory; the second, its own and the next 15; the
        // readdirs those covered ask nothing; and so on, 16 at a time.
        #expect(lists[0] == 1)
        #expect(lists[1] == 16, "\(lists)")
        #expect(lists[2...16].allSatisfy { $0 == 0 }, "\(lists)")
        #expect(lists[17] == 16, "\(lists)")
        #expect(lists.reduce(0, +) == 40, "each directory listed once: \(lists)")
    }

    @Test func aLoneReaddirOfASubdirectoryListsItsOwnOnly() async throws {
        let h = harness()
        let t = try await h.ino("t")
        _ = try await h.readdirAll(t)
        let d20 = try await h.fs.lookup(parent: t, name: "d20").attributes.ino
        let before = h.store.count("list")
        _ = try await h.readdirAll(d20)
        #expect(h.store.count("list") - before == 1)
    }

    @Test func nothingIsListedAheadWithATTLOfZero() async throws {
        let h = harness { $0.metadataTTL = 0 }
        let lists = try await walk(h)
        #expect(lists.allSatisfy { $0 == 1 }, "\(lists)")
    }

    @Test func aSubdirectoryLargerThanAPageIsLeftToItsOwnReaddir() async throws {
        let h = harness { $0.listPageSize = 3 }
        for i in 0..<5 { _ = h.store.put("t/d02/more\(i)", "m") }  // 7 names: three pages
        let t = try await h.ino("t")
        _ = try await h.readdirAll(t)
        var d: [UInt64] = []
        for i in 0..<4 { d.append(try await h.fs.lookup(parent: t, name: String(format: "d%02d", i)).attributes.ino) }
        _ = try await h.readdirAll(d[0])
        let before = h.store.count("list")
        _ = try await h.readdirAll(d[1])
        // d01's own, and one page each of d02…d16: d02's first page says there is more, and
        // nothing of it is kept.
        #expect(h.store.count("list") - before == 16)
        let again = h.store.count("list")
        #expect(try await h.readdirAll(d[2]).count == 7)
        #expect(h.store.count("list") - again >= 1, "d02 is listed by its own readdir")
        let third = h.store.count("list")
        _ = try await h.readdirAll(d[3])
        #expect(h.store.count("list") == third, "d03 fitted in a page and was kept")
    }
}
