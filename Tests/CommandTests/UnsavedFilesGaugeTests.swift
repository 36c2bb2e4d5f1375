import BucketFS
import Foundation
import StorageModel
import Testing
import TestSupport
@testable import bucketfs

/// `bucketfs_unsaved_files{where, kind}` (docs/OPERATING.md, "Metrics"): what the mount's source
/// has unsaved here and in every other recorded cache directory, complete or cut off, read again
/// at most every 30 s on the mount's clock.
@Suite struct UnsavedFilesGaugeTests {
    let base = NSTemporaryDirectory() + "bucketfs-unsaved-" + UUID().uuidString

    func file(_ path: String, _ text: String) {
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
    }

    func lost(_ dir: String, _ name: String, complete: Bool) throws {
        try FileManager.default.createDirectory(atPath: dir + "/lost+found", withIntermediateDirectories: true)
        file(dir + "/lost+found/" + name, "data")
        file(dir + "/lost+found/" + name + ".json", #"{"object":"o","complete":\#(complete),"closed":\#(complete)}"#)
    }

    @Test func countsEveryRecordedCacheDirectoryOfTheSourceByKindAndRefreshesEvery30Seconds() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        let env = ["XDG_STATE_HOME": base + "/state"]
        let (own, old, foreign) = (base + "/own", base + "/old", base + "/foreign")
        for d in [own, old, foreign] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        for (s, d) in [("gs://x", own), ("gs://x", old), ("gs://y", foreign)] {
            #expect(CacheDirectoryRegistry.record(.init(source: s, cacheDirectory: d, mountPoint: "/m"), environment: env) == nil)
        }
        let manual = ManualClock()
        let gauge = UnsavedFilesGauge(source: "gs://x", ownDirectory: own, clock: manual.clock, environment: env)
        #expect(gauge.current() == .init())

        // A crash left in the old directory: a stage closed at its size (complete), one still
        // open (cut off), and a cut-off lost+found entry; here: a complete lost+found entry.
        // Another source's directory counts for nothing.
        file(old + "/stage-AAAAAA", "12345")
        file(old + "/stage-AAAAAA.json", #"{"object":"a","closed":true,"size":5}"#)
        file(old + "/stage-BBBBBB", "123")
        file(old + "/stage-BBBBBB.json", #"{"object":"b","closed":false}"#)
        try lost(old, "c.1.cut-off", complete: false)
        try lost(own, "d.1", complete: true)
        try lost(foreign, "e.1", complete: true)
        // Not read again within 30 s of the last reading...
        manual.advance(by: .seconds(29))
        #expect(gauge.current() == .init())
        // ...then read.
        manual.advance(by: .seconds(1))
        let c = gauge.current()
        #expect(c.here.complete == 1 && c.here.cutOffTotal == 0)
        #expect(c.elsewhere.complete == 1 && c.elsewhere.cutOffTotal == 2)

        // Settled: the metric returns to 0 at the next reading.
        for d in [old, own] { try FileManager.default.removeItem(atPath: d); try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        manual.advance(by: .seconds(30))
        let settled = gauge.current()
        #expect(settled.here.complete + settled.here.cutOffTotal + settled.elsewhere.complete + settled.elsewhere.cutOffTotal == 0)
    }

    @Test func aStageWhoseSizeDiffersFromItsCloseIsCutOff() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        file(base + "/stage-CCCCCC", "1234567")
        file(base + "/stage-CCCCCC.json", #"{"object":"c","closed":true,"size":5}"#)
        let u = CacheDirectoryRegistry.unsaved(in: base)
        #expect(u.staged == 1 && u.stagedCutOff == 1 && u.complete == 0)
    }
}
