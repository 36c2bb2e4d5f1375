import FuseKit
import Logging
import StorageModel

/// The one place that turns store errors into errno (docs/SEMANTICS.md §5).
public func errno(for error: any Error) -> Errno {
    if let e = error as? Errno { return e }
    if error is CancellationError { return .EINTR }
    guard let s = error as? StorageError else { return .EIO }
    switch s {
    case .objectNotFound, .bucketNotFound: return .ENOENT
    case .unauthenticated, .unauthorized: return .EACCES
    case .preconditionFailed, .conflict: return .ESTALE
    case .notEmpty: return .ENOTEMPTY
    case .operationFailed: return .EIO
    case .pathError(_, let p):
        switch p {
        case .tooLong, .segmentTooLong: return .ENAMETOOLONG
        case .containsNewline, .containsNul, .empty, .unrepresentableSegment: return .EINVAL
        }
    case .invalidArgument, .bucketMismatch: return .EINVAL
    case .quotaExceeded, .retryLimitExceeded, .timeout, .unknown, .nonMatchingChecksum, .tls: return .EIO
    case .cancelled: return .EINTR
    }
}

