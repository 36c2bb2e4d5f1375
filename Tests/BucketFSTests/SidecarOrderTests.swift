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
        let write = s.sidecarTargetUnshared(object: "old")
        let rename = s.sidecarTargetUnshared(object: "new")
        staging.rerecord(s, rename)
        #expect(Self.sidecar(s) == nil, "clean content has no sidecar: a rename writes none")
        staging.recordIfNeeded(s, write)
        #expect(Self.sidecar(s)?.object == "new")
        #expect(Self.sidecar(s)?.closed == false)
        // A later target wins again; an older one handed after it changes nothing.
        staging.recordClosed(s, s.sidecarTargetUnshared(object: "newer"))
        staging.rerecord(s, rename)
        #expect(Self.sidecar(s)?.object == "newer")
        #expect(Self.sidecar(s)?.closed == true)
    }

    /// A rename or an xattr read its target under the superblock's lock, then the stage's upload
    /// ended and the stage was discarded before it wrote the sidecar: nothing is written after the
    /// discard (a sidecar naming no stage file would be left in the cache directory for good).
    @Test func nothingIsRecordedAfterADiscard() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-sidecar-order-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let staging = try StagingArea(directory: dir, bucket: "b", logger: Logger(label: "test"), clock: ManualClock().clock)
        let s = try staging.makeStage(origin: .createdHere, metadata: WritableMetadata(), dirty: true, object: "a")
        #expect(Self.sidecar(s)?.object == "a")
        let rename = s.sidecarTargetUnshared(object: "b")
        let xattr = s.sidecarTargetUnshared(object: "b")
        let close = s.sidecarTargetUnshared(object: "b")
        staging.discard(s)
        staging.rerecord(s, rename)
        staging.recordIfNeeded(s, content: false, xattr)
        staging.recordClosed(s, close)
        staging.record(s, close)
        let left = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("stage-") }
        #expect(left == [], "left in the cache directory after the discard: \(left)")
    }
}
