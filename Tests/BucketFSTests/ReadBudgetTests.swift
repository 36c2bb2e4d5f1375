@testable import BucketFS
import Foundation
import Testing

/// The mount's one read budget (docs/SEMANTICS.md §3.6, "One memory budget"): what one holder may
/// take beside the others, and the room that always stays for the next.
@Suite struct ReadBudgetTests {
    private static let mib = 1 << 20

    /// Takes `part`-sized reservations for `holder` until one is refused; how many it got.
    private func fill(_ budget: ReadBudget, _ holder: AnyObject, part: Int) -> Int {
        var n = 0
        while budget.reserve(part, for: holder, floor: Self.mib) { n += 1 }
        return n
    }

    /// Three readers of 5 MiB files beside one reader of a large file (a data set's epoch): the
    /// large one takes what the small ones leave, less a newcomer's even share, not a quarter.
    @Test func aLargeReaderTakesWhatSmallReadersLeave() {
        let budget = ReadBudget(capacity: 128 * Self.mib)
        let small = (0..<3).map { _ in NSObject() }
        for s in small { #expect(budget.reserve(5 * Self.mib, for: s, floor: Self.mib)) }
        let large = NSObject()
        // 128 - 15 held by the others - 128 / 5 (a newcomer's share) = 87.4 MiB: 10 parts of 8.
        #expect(fill(budget, large, part: 8 * Self.mib) == 10)
        // A fourth reader of small files still finds room for its file.
        let newcomer = NSObject()
        #expect(budget.reserve(5 * Self.mib, for: newcomer, floor: Self.mib))
        #expect(budget.invariantViolations().isEmpty)
    }

    /// Two large readers split the budget evenly: neither takes the other's half.
    @Test func twoLargeReadersKeepEvenShares() {
        let budget = ReadBudget(capacity: 128 * Self.mib)
        let a = NSObject(), b = NSObject()
        #expect(budget.reserve(56 * Self.mib, for: a, floor: Self.mib))
        #expect(budget.reserve(56 * Self.mib, for: b, floor: Self.mib))
        // Each takes up to its even share (64 MiB), then nothing more while the other holds its own.
        #expect(fill(budget, a, part: 8 * Self.mib) == 1)
        #expect(fill(budget, b, part: 8 * Self.mib) == 1)
        #expect(fill(budget, a, part: 8 * Self.mib) == 0)
        #expect(budget.reserved(by: a) == 64 * Self.mib)
        #expect(budget.reserved(by: b) == 64 * Self.mib)
        // Once b gives most of it back, a may grow into what b left, less a newcomer's share.
        budget.release(56 * Self.mib, for: b)
        // 128 - 8 (b) - 128 / 3 = 77.3 MiB for a: one more part of 8.
        #expect(fill(budget, a, part: 8 * Self.mib) == 1)
        #expect(budget.invariantViolations().isEmpty)
    }

    /// One reader alone may use the whole budget; nothing past it.
    @Test func aReaderAloneUsesTheWholeBudget() {
        let budget = ReadBudget(capacity: 128 * Self.mib)
        let only = NSObject()
        #expect(fill(budget, only, part: 8 * Self.mib) == 16)
        #expect(budget.inUse == 128 * Self.mib)
    }
}
