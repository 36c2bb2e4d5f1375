import Foundation
import FuseKit

/// What the upload side counts since the mount started, for the metrics (docs/OPERATING.md,
/// "Metrics"): every failed upload attempt, in every mode (close's, fsync's, write-back's, each
/// background one; not one its caller interrupted), and each error writing to the cache directory
/// (stage files, lost+found), by errno name (`ENOSPC`, `EDQUOT`, `EIO`, `EROFS`…). A leaf lock.
public final class UploadCounters: @unchecked Sendable {
    private let lock = NSLock()
    private var failedAttempts = 0
    private var cacheErrors: [String: Int] = [:]
    private var uploads = 0
    private var uploadedBytes: Int64 = 0
    private var givenUp = 0

    init() {}

    func attemptFailed() { lock.withLock { failedAttempts += 1 } }
    func uploaded(bytes: Int64) { lock.withLock { uploads += 1; uploadedBytes += bytes } }
    func gaveUp() { lock.withLock { givenUp += 1 } }

    /// What the summary log line says (docs/OPERATING.md, "Logs"): uploads finished and their
    /// bytes, failed attempts, files given up (kept in lost+found).
    public struct Totals: Equatable, Sendable {
        public var uploads = 0
        public var bytes: Int64 = 0
        public var failedAttempts = 0
        public var givenUp = 0
    }

    public var totals: Totals {
        lock.withLock { Totals(uploads: uploads, bytes: uploadedBytes, failedAttempts: failedAttempts, givenUp: givenUp) }
    }

    func cacheError(_ e: Errno) {
        let name = Self.name(e)
        lock.withLock { cacheErrors[name, default: 0] += 1 }
    }

    var snapshot: (failedAttempts: Int, cacheErrors: [String: Int]) { lock.withLock { (failedAttempts, cacheErrors) } }

    /// The errno names a cache directory's errors are counted under that the metrics export at 0
    /// from the start (so that an alert on `increase()` sees the first one).
    public static let knownNames = ["ENOSPC", "EDQUOT", "EIO", "EROFS", "EACCES", "EMFILE"]

    static func name(_ e: Errno) -> String {
        switch e.rawValue {
        case ENOSPC: return "ENOSPC"
        case EDQUOT: return "EDQUOT"
        case EIO: return "EIO"
        case EROFS: return "EROFS"
        case EACCES: return "EACCES"
        case EMFILE: return "EMFILE"
        default: return "errno \(e.rawValue)"
        }
    }
}
