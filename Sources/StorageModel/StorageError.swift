import Foundation

/// What is wrong with an object path. Checked before any request is made.
public enum PathProblem: Equatable, Sendable, CustomStringConvertible {
    case empty
    /// fullPath longer than 1024 bytes of UTF-8.
    case tooLong(bytes: Int)
    /// One `/`-separated segment longer than 255 bytes (a filesystem name limit, used by the mount).
    case segmentTooLong(segment: String, bytes: Int)
    /// CR or LF inside the path.
    case containsNewline
    /// A NUL byte inside the path (another tool may write one; no file name can hold it).
    case containsNul
    /// A `.` or `..` segment, or an empty segment (`a//b`), that the mount cannot show.
    case unrepresentableSegment(String)

    public var description: String {
        switch self {
        case .empty: return "the path is empty"
        case .tooLong(let n): return "the path is \(n) bytes of UTF-8; the limit is 1024"
        case .segmentTooLong(let s, let n): return "the name '\(s.prefix(40))…' is \(n) bytes; the limit is 255"
        case .containsNewline: return "the path contains a carriage return or line feed"
        case .containsNul: return "the path contains a NUL byte"
        case .unrepresentableSegment(let s): return "the path has a '\(s)' segment"
        }
    }
}

/// Typed errors of the Firebase Storage shape, mapped from HTTP status codes.
public enum StorageError: Error, Equatable, Sendable, CustomStringConvertible {
    case objectNotFound(path: String)
    case bucketNotFound(bucket: String)
    case unauthenticated(message: String)
    case unauthorized(path: String, message: String)
    case quotaExceeded(message: String)
    case invalidArgument(message: String)
    case bucketMismatch(expected: String, got: String)
    case pathError(path: String, problem: PathProblem)
    case retryLimitExceeded(message: String)
    case nonMatchingChecksum(path: String, expected: String, got: String)
    /// HTTP 412: a generation or metageneration precondition did not hold.
    case preconditionFailed(path: String)
    /// HTTP 409 and friends: the object changed under us in a way the call forbids.
    case conflict(path: String, message: String)
    /// A folder of a hierarchical-namespace bucket that holds objects or folders refused a delete.
    case notEmpty(path: String)
    /// A long-running operation (a folder rename) ended in failure, or could not be followed to its
    /// end; the message names the operation and what the server said.
    case operationFailed(operation: String, message: String)
    case timeout(message: String)
    /// No secure connection could be made (a certificate refused, a failed TLS handshake). The
    /// message names the host, what was wrong and how to fix it. Never transient: repeating the
    /// handshake gets the same certificate (docs/SEMANTICS.md §5).
    case tls(message: String)
    case cancelled
    case unknown(status: Int, message: String)

    public var description: String {
        switch self {
        case .objectNotFound(let p): return "object not found: \(p)"
        case .bucketNotFound(let b): return "bucket not found: \(b)"
        case .unauthenticated(let m): return "unauthenticated: \(m)"
        case .unauthorized(let p, let m): return "not authorised for \(p): \(m)"
        case .quotaExceeded(let m): return "quota exceeded: \(m)"
        case .invalidArgument(let m): return "invalid argument: \(m)"
        case .bucketMismatch(let e, let g): return "bucket mismatch: expected \(e), got \(g)"
        case .pathError(let p, let why): return "invalid path '\(p.prefix(80))': \(why)"
        case .retryLimitExceeded(let m): return "retry limit exceeded: \(m)"
        case .nonMatchingChecksum(let p, let e, let g): return "checksum mismatch for \(p): expected \(e), got \(g)"
        case .preconditionFailed(let p): return "precondition failed (the object changed): \(p)"
        case .conflict(let p, let m): return "conflict on \(p): \(m)"
        case .notEmpty(let p): return "folder not empty: \(p)"
        case .operationFailed(let o, let m): return "operation \(o) failed: \(m)"
        case .timeout(let m): return "timed out: \(m)"
        case .tls(let m): return m
        case .cancelled: return "cancelled"
        // Status 0: no answer came (the message says why), so no "HTTP 0".
        case .unknown(let s, let m): return s == 0 ? m : "HTTP \(s): \(m)"
        }
    }

    /// Maps an HTTP status of the Cloud Storage JSON API to a typed error.
    public static func fromHTTP(status: Int, message: String, path: String, bucket: String = "") -> StorageError {
        switch status {
        case 400: return .invalidArgument(message: message)
        case 401: return .unauthenticated(message: message)
        case 403: return .unauthorized(path: path, message: message)
        case 404: return path.isEmpty ? .bucketNotFound(bucket: bucket) : .objectNotFound(path: path)
        case 409: return .conflict(path: path, message: message)
        case 412: return .preconditionFailed(path: path)
        case 408: return .timeout(message: message)
        case 429: return .quotaExceeded(message: message)
        default: return .unknown(status: status, message: message)
        }
    }

    /// Whether a retry of an idempotent call may help (408, 429, 5xx, timeouts).
    public var isTransient: Bool {
        switch self {
        case .timeout, .quotaExceeded: return true
        case .unknown(let s, _): return s >= 500 || s == 0
        default: return false
        }
    }
}
