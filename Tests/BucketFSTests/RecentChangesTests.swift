@testable import BucketFS
import Testing

/// `RecentChanges`: what changed after a mark, per directory, the last kind of change of each
/// path; and no answer (never a partial one) once changes after the mark were forgotten.
@Suite struct RecentChangesTests {
    @Test func answersTheLastChangeOfEachPathInTheDirectoryAfterTheMark() {
        var r = RecentChanges(limit: 8)
        r.note(1, "d/a", .changed)
        r.note(2, "d/b", .changed)
        r.note(3, "d/a", .left)
        r.note(4, "e/c", .changed)
        r.note(5, "d/sub/x", .changed)
        r.note(6, "top", .left)
        #expect(r.since(0, in: "d") == ["d/a": .left, "d/b": .changed])
        #expect(r.since(2, in: "d") == ["d/a": .left])
        #expect(r.since(3, in: "d") == [:])
        #expect(r.since(0, in: "") == ["top": .left])
        #expect(r.since(6, in: "d") == [:])
    }

    @Test func forgottenChangesGiveNoAnswer() {
        var r = RecentChanges(limit: 4)
        for seq in UInt64(1)...10 { r.note(seq, "d/f\(seq)", .changed) }
        #expect(r.since(6, in: "d") == ["d/f7": .changed, "d/f8": .changed, "d/f9": .changed, "d/f10": .changed])
        #expect(r.since(5, in: "d") == nil, "changes 6 and before were overwritten: the answer would miss them")
    }

    /// Change numbers the cache counted without a path (none today) leave their slot holding an
    /// older change, which is not taken for theirs.
    @Test func aSlotHoldingAnOlderChangeIsSkipped() {
        var r = RecentChanges(limit: 4)
        r.note(1, "d/a", .changed)
        r.note(6, "d/b", .changed)
        #expect(r.since(2, in: "d") == ["d/b": .changed])
    }
}
