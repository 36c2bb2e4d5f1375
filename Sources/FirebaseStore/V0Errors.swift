import Foundation
import CloudHTTP
import StorageModel

/// How v0 answers read as typed errors (firebase-v0.md §8): 401 unauthenticated, 402 and 429
/// quota (retried), 403 unauthorized — even for a name that may not exist, since v0 cannot tell
/// the two apart — and 404 not found. A listing refused under `rules_version = "1"` says so and
/// what to change.
enum V0Errors {
    static func dialect(bucket: String) -> HTTPDialect {
        HTTPDialect(label: "Firebase", bucketURL: "firebase://\(bucket)", retryable: isRetryable, error: error)
    }

    /// 402, 408, 429 and 5xx (the SDKs retry 5xx, 408 and 429; 402 is a quota too).
    static func isRetryable(_ status: Int) -> Bool {
        status == 402 || status == 408 || status == 429 || (500...599).contains(status)
    }

    /// `path` is "" for bucket-level calls (listings).
    static func error(status: Int, message: String, path: String, bucket: String) -> StorageError {
        switch status {
        case 401: return .unauthenticated(message: message)
        case 402, 429: return .quotaExceeded(message: message)
        case 403 where path.isEmpty: return .unauthorized(path: "firebase://\(bucket)", message: listRefusal(message))
        case 403: return .unauthorized(path: path, message: message)
        case 404 where path.isEmpty: return .bucketNotFound(bucket: bucket)
        default: return .fromHTTP(status: status, message: message, path: path, bucket: bucket)
        }
    }

    /// A refused listing, with what to change in the bucket's Security Rules.
    static func listRefusal(_ message: String) -> String {
        if message.contains("rules_version") {
            return "\(message) — the bucket's Security Rules are rules_version = '1', under which every list is refused: put rules_version = '2'; as the first line of storage.rules, allow list (or read) where listing should work, and deploy them (firebase deploy --only storage)"
        }
        // The server did not say which rules version it runs: the hint holds for both.
        return "\(message) (no rule allows listing this path: that needs an allow list or allow read rule matching it, in rules that start with rules_version = '2'; — under rules_version = '1' every list is refused)"
    }
}
