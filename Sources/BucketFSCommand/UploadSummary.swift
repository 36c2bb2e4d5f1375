import BucketFS
import Foundation
import Logging
import StorageModel

/// The mount's record of its work for an audit (docs/OPERATING.md, "Logs"): at notice level, one
/// line every `--log-summary-minutes` (and one at unmount) with the uploads finished since the
/// mount started and their bytes, the failed attempts, the files given up (kept in lost+found),
/// the files in lost+found and the files not uploaded yet; the same numbers as JSON fields.
enum UploadSummary {
    static func line(_ core: BucketFileSystem, when: String) -> (message: String, metadata: Logger.Metadata) {
        let t = core.uploadCounters.totals
        let s = core.statistics()
        let message = "summary (\(when)): \(t.uploads) upload(s) (\(t.bytes) bytes), \(t.failedAttempts) failed attempt(s), "
            + "\(t.givenUp) given up, \(s.lostAndFoundEntries) file(s) in lost+found, \(s.dirtyFiles) not uploaded yet"
        let metadata: Logger.Metadata = [
            "event": "summary", "uploads": "\(t.uploads)", "bytes": "\(t.bytes)", "failed_attempts": "\(t.failedAttempts)",
            "given_up": "\(t.givenUp)", "lost_found": "\(s.lostAndFoundEntries)", "pending": "\(s.dirtyFiles)",
        ]
        return (message, metadata)
    }

    static func log(_ core: BucketFileSystem, logger: Logger, when: String) {
        let (m, meta) = line(core, when: when)
        logger.notice("\(m)", metadata: meta)
    }

    /// Logs the summary every `minutes` (none when 0) until cancelled.
    static func every(minutes: Int, _ core: BucketFileSystem, logger: Logger, clock: BucketClock = .real) -> Task<Void, Never> {
        Task {
            guard minutes > 0 else { return }
            while !Task.isCancelled {
                do { try await clock.sleep(for: .seconds(minutes * 60)) } catch { return }
                log(core, logger: logger, when: "every \(minutes) min")
            }
        }
    }
}
