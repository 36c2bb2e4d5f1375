@testable import BucketFS
import Foundation
import FuseKit
import PropertyBased
import StorageModel
import Testing
import TestSupport

/// A listing's entries are put in the bucket's order (UTF-8 bytes of the paths), whether they
/// came as whole pages in any order (the runs are ordered as wholes) or scattered (each sorted).
@Suite struct SortByPathTests {
    static func entries(_ paths: [String]) -> [SnapshotEntry] {
        paths.enumerated().map { SnapshotEntry(node: Node(ino: UInt64($0.offset + 2), path: $0.element, type: .regular), shown: nil) }
    }

    static func check(_ paths: [String], pageStarts: [Int] = []) {
        var all = entries(paths)
        let nodes = Set(all.map { ObjectIdentifier($0.node) })
        let pathOf = Dictionary(uniqueKeysWithValues: paths.enumerated().map { (UInt64($0.offset + 2), $0.element) })
        Superblock.sortByPath(&all, pageStarts: pageStarts, path: { pathOf[$0.ino]! })
        #expect(all.map { pathOf[$0.node.ino]! } == paths.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        #expect(Set(all.map { ObjectIdentifier($0.node) }) == nodes)  // the same entries, moved
    }

    /// Distinct names cut into pages of 1 to 40, the pages in any order, sometimes one name
    /// moved elsewhere (a file created here, appended after the pages).
    @Test func pagesInAnyOrderComeOutSorted() async {
        let input = zip(Gen.int(in: 0...400), Gen.int(in: 1...40), Gen.uint64(in: 0...UInt64.max), Gen.bool(0.3))
        await propertyCheck(input: input) { n, pageSize, seed, moveOne in
            var rng = SplitMix64(seed: seed)
            let names = (0..<n).map { "d/" + ["é", "a", "Z", "0", "日"][Int(rng.next() % 5)] + String($0) }
                .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            var pages = stride(from: 0, to: names.count, by: pageSize).map { Array(names[$0..<min($0 + pageSize, names.count)]) }
            for i in pages.indices.reversed() where i > 0 { pages.swapAt(i, Int(rng.next() % UInt64(i + 1))) }
            var paths = pages.flatMap { $0 }
            var starts: [Int] = []
            for p in pages { starts.append((starts.last ?? 0) + (starts.isEmpty ? 0 : pages[starts.count - 1].count)) }
            Self.check(paths, pageStarts: starts)
            if moveOne, paths.count > 1 { paths.append(paths.remove(at: Int(rng.next() % UInt64(paths.count)))) }
            Self.check(paths)
        }
    }

    @Test func scatteredNamesAreSortedOneByOne() {
        Self.check((0..<10_000).map { "f\(($0 * 7919) % 10_000)" })  // over 4,096 runs
        Self.check((0..<100).reversed().map { "f\($0)" })
        Self.check([])
        Self.check(["only"])
    }
}
