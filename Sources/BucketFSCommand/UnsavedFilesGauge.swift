import BucketFS
import Foundation
import StorageModel

/// `bucketfs_unsaved_files{where, kind}` (docs/OPERATING.md, "Metrics"): the files of this mount's
/// source that no bucket has, so that an alert sees data wherever it lies and clears once it is
/// settled. `where="here"`: this mount's own lost+found (its stage files are its uploads under
/// way, which `bucketfs_dirty_files` counts); `where="elsewhere"`: the stage files and lost+found
/// entries of every other recorded cache directory of the same source (CacheDirectoryRegistry)
/// that no running mount holds (one that is held is that mount's own `here`). `kind`: `complete`
/// (a whole copy, to upload) or `cut_off` (part of a file, to settle by hand or with `recover
/// --drop-cut-off`). Reading the directories costs a listing and a sidecar per file, so the
/// counts are refreshed at most every 30 s, whatever the scrape interval.
final class UnsavedFilesGauge: @unchecked Sendable {
    struct Counts: Equatable {
        var here = CacheDirectoryRegistry.Unsaved()
        var elsewhere = CacheDirectoryRegistry.Unsaved()
    }

    static let refreshInterval: Duration = .seconds(30)

    let source: String
    let ownDirectory: String
    let environment: [String: String]
    private let clock: BucketClock
    private let lock = NSLock()
    private var counts = Counts()
    private var refreshed: BucketClock.Instant?

    init(source: String, ownDirectory: String, clock: BucketClock = .real,
         environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.source = source
        self.ownDirectory = ownDirectory
        self.clock = clock
        self.environment = environment
    }

    /// The counts, read again from the disk when the last reading is 30 s old or more.
    func current() -> Counts {
        lock.withLock {
            let now = clock.now
            if let refreshed, now - refreshed < Self.refreshInterval { return counts }
            counts = Self.read(source: source, own: ownDirectory, environment: environment)
            refreshed = now
            return counts
        }
    }

    static func read(source: String, own: String, environment: [String: String]) -> Counts {
        var c = Counts()
        let lost = LostEntry.all(in: own + "/lost+found")
        c.here.lost = lost.entries.count + lost.unreadable.count
        c.here.cutOff = lost.entries.filter { !$0.complete }.count
        var seen: Set<String> = [own]
        for e in CacheDirectoryRegistry.entries(of: source, environment: environment)
        where seen.insert(e.cacheDirectory).inserted && CacheDirectoryLock.refusal(e.cacheDirectory) == nil {
            let u = CacheDirectoryRegistry.unsaved(in: e.cacheDirectory)
            c.elsewhere.staged += u.staged
            c.elsewhere.stagedCutOff += u.stagedCutOff
            c.elsewhere.lost += u.lost
            c.elsewhere.cutOff += u.cutOff
        }
        return c
    }
}
