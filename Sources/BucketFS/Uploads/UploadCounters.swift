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

    init() {}

    func attemptFailed() { lock.withLock { failedAttempts += 1 } }

    func cacheError(_ e: Errno) {
        let name = Self.name(e)
        lock.withLock { cacheErrors[name, default: 0] += 1 }
    }

    var snapshot: (failedAttempts: Int, cacheErrors: [String: Int]) { lock.withLock { (failedAttempts, cacheErrors) } }

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
