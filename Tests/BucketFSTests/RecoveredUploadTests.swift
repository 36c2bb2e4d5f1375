@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// `recover` of a complete lost+found file whose name has moved on since it was written (a lost
/// race's winner, a delete): it goes beside the name, as `NAME.recovered-TIME`, never over it
/// (docs/OPERATING.md, "The recovery runbook").
@Suite struct RecoveredUploadTests {
    /// A lost race through the core: the loser's data kept complete in lost+found.
    static func lostRace() async throws -> (Harness, LostEntry, ObjectInfo) {
        let h = Harness()
        h.store.put("shared.txt", "first")
        let ino = try await h.ino("shared.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("the loser's bytes".utf8))
        let winner = h.store.put("shared.txt", "the winner's bytes")
        await #expect(throws: Errno.ESTALE) { try await h.fs.flush(ino: ino, fh: fh) }
        try? await h.fs.release(ino: ino, fh: fh)
        let (entries, _) = LostEntry.all(in: h.config.lostAndFound)
        let e = try #require(entries.first)
        #expect(entries.count == 1 && e.complete)
        return (h, e, winner)
    }

    @Test func aLostRaceGoesBesideTheWinner() async throws {
        let (h, e, winner) = try await Self.lostRace()
        // As a remount leaves it: never over the winner.
        #expect(try await RecoveredUpload.run(e, to: h.store, contentTypes: ContentTypePolicy()) == .newer(winner.generation))
        // A dry run names where it would go and changes nothing.
        let name = RecoveredUpload.besideName(e)
        #expect(name.hasPrefix("shared.txt.recovered-2") && name.hasSuffix("Z") && name.count == "shared.txt.recovered-".count + 16)
        let writes = h.store.writes.count
        #expect(try await RecoveredUpload.run(e, to: h.store, contentTypes: ContentTypePolicy(), dryRun: true, besideNewer: true)
                == .beside(name: name, generation: nil, winner: winner.generation))
        #expect(h.store.writes.count == writes && FileManager.default.fileExists(atPath: e.path))
        // recover: beside it, with the file's metadata; the winner untouched; the entry gone.
        let outcome = try await RecoveredUpload.run(e, to: h.store, contentTypes: ContentTypePolicy(), besideNewer: true)
        let beside = try await h.store.getMetadata(name)
        #expect(outcome == .beside(name: name, generation: beside.generation, winner: winner.generation))
        #expect(h.store.data(name) == Data("the loser's bytes".utf8))
        #expect(h.store.data("shared.txt") == Data("the winner's bytes".utf8))
        #expect(try await h.store.getMetadata("shared.txt").generation == winner.generation)
        #expect(beside.writable.customMetadata == e.record.metadata.customMetadata)
        #expect(!FileManager.default.fileExists(atPath: e.path) && !FileManager.default.fileExists(atPath: e.path + ".json"))
    }

    /// A file put into lost+found by hand, its name without the milliseconds bucketfs gives it:
    /// the time in its beside name is the file's last change (no clock's "now"), the same on
    /// every run.
    @Test func aNameWithoutItsMillisecondsTakesTheFilesLastChange() async throws {
        let (h, e, _) = try await Self.lostRace()
        let byHand = (e.path as NSString).deletingLastPathComponent + "/put-back-by-hand"
        try FileManager.default.moveItem(atPath: e.path, toPath: byHand)
        try FileManager.default.moveItem(atPath: e.path + ".json", toPath: byHand + ".json")
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 1_795_000_000)], ofItemAtPath: byHand)
        let entry = try #require(LostEntry.all(in: h.config.lostAndFound).entries.first { $0.path == byHand })
        #expect(RecoveredUpload.besideName(entry) == "shared.txt.recovered-20261118T110640Z")
    }

    @Test func aBesideNameHoldingOtherContentIsNeverOverwritten() async throws {
        let (h, e, winner) = try await Self.lostRace()
        let name = RecoveredUpload.besideName(e)
        h.store.put(name, "someone else's")
        let outcome = try await RecoveredUpload.run(e, to: h.store, contentTypes: ContentTypePolicy(), besideNewer: true)
        let second = try await h.store.getMetadata(name + "-2")
        #expect(outcome == .beside(name: name + "-2", generation: second.generation, winner: winner.generation))
        #expect(h.store.data(name) == Data("someone else's".utf8))
        #expect(h.store.data(name + "-2") == Data("the loser's bytes".utf8))
    }

    /// `recover --to` another source: the generation the file was written over means nothing
    /// there; the name must be free, and goes beside what holds it.
    @Test func toAnotherSourceTheNameMustBeFree() async throws {
        let (h, e, _) = try await Self.lostRace()
        defer { withExtendedLifetime(h) {} }  // (its cache directory holds the entry)
        let other = MemoryStore()
        #expect(try await RecoveredUpload.run(e, to: other, contentTypes: ContentTypePolicy(), besideNewer: true, elsewhere: true)
                == .uploaded(try await other.getMetadata("shared.txt").generation))
        #expect(other.data("shared.txt") == Data("the loser's bytes".utf8))
        #expect(other.writes.last?.preconditions.ifGenerationMatch == 0)
    }
}
