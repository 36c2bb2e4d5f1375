@testable import BucketFS
import Foundation
import Logging
import StorageModel
import TestSupport
import Testing

/// A stage's sidecar is written from what its caller read under the superblock's lock and handed
/// over (the staging area never calls back into the core): of two callers, the one that read
/// first may write last, and the sidecar must still name the object's current path.
@Suite struct SidecarOrderTests {
    static func sidecar(_ s: StagedFile) -> StageRecord? {
        guard let d = FileManager.default.contents(atPath: s.path + ".json"),
              let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any] else { return nil }
        return StageRecord(json: o)
    }

    /// A write read its target, then a rename moved the file and asked for the sidecar to be
    /// written again before the write wrote its first one: the write's sidecar names the new path.
    @Test func aSidecarWrittenLastNamesTheNewestPathWhoeverReadFirst() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-sidecar-order-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let staging = try StagingArea(directory: dir, bucket: "b", logger: Logger(label: "test"), clock: ManualClock().clock)
        let s = try staging.makeStage(origin: .createdHere, metadata: WritableMetadata(), dirty: false, object: "old")
        defer { staging.discard(s) }
        let write = s.sidecarTarget(object: "old")
        let rename = s.sidecarTarget(object: "new")
        staging.rerecord(s, rename)
        #expect(Self.sidecar(s) == nil, "clean content has no sidecar: a rename writes none")
        staging.recordIfNeeded(s, write)
        #expect(Self.sidecar(s)?.object == "new")
        #expect(Self.sidecar(s)?.closed == false)
        // A later target wins again; an older one handed after it changes nothing.
        staging.recordClosed(s, s.sidecarTarget(object: "newer"))
        staging.rerecord(s, rename)
        #expect(Self.sidecar(s)?.object == "newer")
        #expect(Self.sidecar(s)?.closed == true)
    }
}
