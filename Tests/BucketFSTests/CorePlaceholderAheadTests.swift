@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A walk down a tree of prefix-only directories (`ls -R`, `find`): readdirplus leaves each
/// subdirectory whose placeholder is not known to the kernel's lookup, which reads it
/// (docs/SEMANTICS.md §3.7). The placeholders of the next subdirectories are read with it, many
/// at once, so a walk does not pay a round trip per directory before each listing.
@Suite struct CorePlaceholderAheadTests {
    /// `t/` with 40 prefix-only subdirectories `d00`…`d39` (one file each) and 2 with a
    /// placeholder.
    func harness() -> Harness {
        let h = Harness()
        for i in 0..<40 { _ = h.store.put(String(format: "t/d%02d/x", i), "x") }
        _ = h.store.put("t/p0/", "", custom: ["goog-reserved-posix-mode": "700"])
        _ = h.store.put("t/p0/x", "x")
        return h
    }

    @Test func aWalkReadsTheNextPlaceholdersWithTheFirstOnes() async throws {
        let h = harness()
        let t = try await h.fs.lookup(parent: Harness.root, name: "t").attributes.ino
        let entries = try await h.readdirAll(t)
        let dirs = entries.filter { $0.entry.attributes.type == .directory && !$0.attributesKnown }.map(\.name)
        #expect(dirs.count == 40, "every prefix-only subdirectory is left to the lookup: \(dirs.count)")
        var getsPerLookup: [Int] = []
        let base = h.store.count("get")
        for name in dirs {
            let before = h.store.count("get")
            _ = try await h.fs.lookup(parent: t, name: name)
            getsPerLookup.append(h.store.count("get") - before)
        }
        // The first lookup reads its own placeholder; the second, its own and the next 15; the
        // lookups those covered ask nothing; the one after reads 75 ahead (all that is left).
        #expect(getsPerLookup[0] == 1)
        #expect(getsPerLookup[1] == 16)
        #expect(getsPerLookup[2...16].allSatisfy { $0 == 0 }, "\(getsPerLookup)")
        #expect(getsPerLookup[17] == 23, "\(getsPerLookup)")
        #expect(getsPerLookup[18...].allSatisfy { $0 == 0 }, "\(getsPerLookup)")
        // Each placeholder was read once, and what was read ahead answers as its own GET does:
        // a prefix-only directory shows the mount's mode.
        #expect(h.store.count("get") - base == 40)
        let shown = try await h.fs.lookup(parent: t, name: "d39").attributes
        #expect(shown.permissions == MountConfig().dirMode)
        #expect(h.store.count("get") - base == 40)
    }

    @Test func aLoneLookupReadsItsOwnPlaceholderOnly() async throws {
        let h = harness()
        let t = try await h.fs.lookup(parent: Harness.root, name: "t").attributes.ino
        _ = try await h.readdirAll(t)
        let before = h.store.count("get")
        _ = try await h.fs.lookup(parent: t, name: "d20")
        #expect(h.store.count("get") - before == 1)
    }
}
