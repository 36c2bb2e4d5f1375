import Foundation

/// The Apple SDK's error domain for Storage.
public let StorageErrorDomain: String = "FIRStorageErrorDomain"

/// The Apple SDK's `StorageErrorCode`: the `code` of an `NSError` in `StorageErrorDomain`.
public enum StorageErrorCode: Int, Swift.Error {
    case unknown = -13000
    case objectNotFound = -13010
    case bucketNotFound = -13011
    case projectNotFound = -13012
    case quotaExceeded = -13013
    case unauthenticated = -13020
    case unauthorized = -13021
    case retryLimitExceeded = -13030
    case nonMatchingChecksum = -13031
    case downloadSizeExceeded = -13032
    case cancelled = -13040
    case invalidArgument = -13050
    case bucketMismatch = -13051
    case internalError = -13052
    case pathError = -13053
}

/// The Apple SDK's `StorageError`: every failure of a Storage call, with the cases and associated
/// values the SDK gives, and as an `NSError` (`StorageErrorDomain`, a `StorageErrorCode`, and
/// the SDK's user-info keys). `serverError` holds `bucket`, `object`, `ResponseErrorCode` (the
/// HTTP status, when there was one) and `ResponseBody` (the server's words, or why there was
/// no answer) (docs/LIBRARY.md, "The Apple SDK's API").
public enum StorageError: Error, CustomNSError {
    case unknown(message: String, serverError: [String: Any])
    case objectNotFound(object: String, serverError: [String: Any])
    case bucketNotFound(bucket: String)
    case projectNotFound(project: String)
    case quotaExceeded(bucket: String, serverError: [String: Any])
    case unauthenticated(serverError: [String: Any])
    case unauthorized(bucket: String, object: String, serverError: [String: Any])
    case retryLimitExceeded
    case nonMatchingChecksum
    case downloadSizeExceeded(total: Int64, maxSize: Int64)
    case cancelled
    case invalidArgument(message: String)
    case internalError(message: String)
    case bucketMismatch(message: String)
    case pathError(message: String)

    public static var errorDomain: String { StorageErrorDomain }

    /// The case's `StorageErrorCode`.
    public var errorCode: Int { code.rawValue }

    var code: StorageErrorCode {
        switch self {
        case .unknown: return .unknown
        case .objectNotFound: return .objectNotFound
        case .bucketNotFound: return .bucketNotFound
        case .projectNotFound: return .projectNotFound
        case .quotaExceeded: return .quotaExceeded
        case .unauthenticated: return .unauthenticated
        case .unauthorized: return .unauthorized
        case .retryLimitExceeded: return .retryLimitExceeded
        case .nonMatchingChecksum: return .nonMatchingChecksum
        case .downloadSizeExceeded: return .downloadSizeExceeded
        case .cancelled: return .cancelled
        case .invalidArgument: return .invalidArgument
        case .internalError: return .internalError
        case .bucketMismatch: return .bucketMismatch
        case .pathError: return .pathError
        }
    }

    /// The SDK's descriptions under `NSLocalizedDescriptionKey`, over `serverError`'s keys.
    public var errorUserInfo: [String: Any] {
        func with(_ info: [String: Any], _ text: String) -> [String: Any] {
            var d = info
            d[NSLocalizedDescriptionKey] = text
            return d
        }
        switch self {
        case let .unknown(message, serverError): return with(serverError, message)
        case let .objectNotFound(object, serverError): return with(serverError, "Object \(object) does not exist.")
        case let .bucketNotFound(bucket): return with(["bucket": bucket], "Bucket \(bucket) does not exist.")
        case let .projectNotFound(project): return with(["project": project], "Project \(project) does not exist.")
        case let .quotaExceeded(bucket, serverError):
            return with(serverError, "Quota for bucket \(bucket) exceeded, please view quota on firebase.google.com.")
        case let .unauthenticated(serverError):
            return with(serverError, "User is not authenticated, please authenticate using Firebase Authentication and try again.")
        case let .unauthorized(bucket, object, serverError):
            return with(serverError, "User does not have permission to access gs://\(bucket)/\(object).")
        case .retryLimitExceeded: return with([:], "Max retry time for operation exceeded, please try again.")
        case .nonMatchingChecksum:
            return with([:], "Uploaded/downloaded object's checksum does not match the server's. Please retry the upload/download.")
        case let .downloadSizeExceeded(total, maxSize):
            return with(["totalSize": total, "maxAllowedSize": maxSize],
                        "Attempted to download object with size of \(total) bytes, which exceeds the maximum size of " +
                        "\(maxSize) bytes. Consider raising the maximum download maxSize, or using StorageReference.write")
        case .cancelled: return with([:], "User cancelled the upload/download.")
        case let .invalidArgument(message), let .internalError(message), let .bucketMismatch(message), let .pathError(message):
            return with([:], message)
        }
    }
}

extension StorageError: CustomStringConvertible {
    /// The description, and the server's words when there are any.
    public var description: String {
        let info = errorUserInfo
        let text = info[NSLocalizedDescriptionKey] as? String ?? "\(code)"
        guard let body = info["ResponseBody"] as? String, !body.isEmpty, !text.contains(body) else { return text }
        return "\(text) (\(body))"
    }
}

extension StorageError {
    /// The enum again from its `NSError` form (what handlers and snapshots carry), for the
    /// `async` calls, which throw the enum; any other error as it is.
    static func rebuilt(_ error: Error) -> Error {
        if error is StorageError { return error }
        let ns = error as NSError
        guard ns.domain == StorageErrorDomain, let code = StorageErrorCode(rawValue: ns.code) else { return error }
        var info = ns.userInfo
        let message = info.removeValue(forKey: NSLocalizedDescriptionKey) as? String ?? ""
        let bucket = info["bucket"] as? String ?? "", object = info["object"] as? String ?? ""
        switch code {
        case .unknown: return StorageError.unknown(message: message, serverError: info)
        case .objectNotFound: return StorageError.objectNotFound(object: object, serverError: info)
        case .bucketNotFound: return StorageError.bucketNotFound(bucket: bucket)
        case .projectNotFound: return StorageError.projectNotFound(project: info["project"] as? String ?? "")
        case .quotaExceeded: return StorageError.quotaExceeded(bucket: bucket, serverError: info)
        case .unauthenticated: return StorageError.unauthenticated(serverError: info)
        case .unauthorized: return StorageError.unauthorized(bucket: bucket, object: object, serverError: info)
        case .retryLimitExceeded: return StorageError.retryLimitExceeded
        case .nonMatchingChecksum: return StorageError.nonMatchingChecksum
        case .downloadSizeExceeded:
            return StorageError.downloadSizeExceeded(total: info["totalSize"] as? Int64 ?? 0, maxSize: info["maxAllowedSize"] as? Int64 ?? 0)
        case .cancelled: return StorageError.cancelled
        case .invalidArgument: return StorageError.invalidArgument(message: message)
        case .internalError: return StorageError.internalError(message: message)
        case .bucketMismatch: return StorageError.bucketMismatch(message: message)
        case .pathError: return StorageError.pathError(message: message)
        }
    }
}
