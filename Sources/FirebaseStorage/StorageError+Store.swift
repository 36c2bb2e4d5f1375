import Foundation
import StorageModel

extension StorageError {
    /// The SDK's error for what a call on `bucket`/`object` met: the store's typed errors by their
    /// meaning (docs/LIBRARY.md, "The Apple SDK's API": 401 unauthenticated, 402 quota, 403 unauthorized with the
    /// bucket and object, 404 not found), the rest as `unknown` with the store's words.
    static func from(_ error: Error, bucket: String, object: String) -> StorageError {
        if let e = error as? StorageError { return e }
        if error is CancellationError { return .cancelled }
        guard let e = error as? StorageModel.StorageError else {
            let ns = error as NSError
            return .unknown(message: "\(error)", serverError: server(bucket, object, status: nil, body: ns.localizedDescription))
        }
        switch e {
        case .objectNotFound(let path):
            return .objectNotFound(object: path.isEmpty ? object : path, serverError: server(bucket, object, status: 404, body: "\(e)"))
        case .bucketNotFound(let b): return .bucketNotFound(bucket: b)
        case .unauthenticated(let m): return .unauthenticated(serverError: server(bucket, object, status: 401, body: m))
        case .unauthorized(_, let m): return .unauthorized(bucket: bucket, object: object, serverError: server(bucket, object, status: 403, body: m))
        case .quotaExceeded(let m): return .quotaExceeded(bucket: bucket, serverError: server(bucket, object, status: 402, body: m))
        case .invalidArgument(let m): return .invalidArgument(message: m)
        case .bucketMismatch(let want, let got):
            return .bucketMismatch(message: "Provided bucket: `\(got)` does not match the Storage bucket of the current instance: `\(want)`")
        case .pathError: return .pathError(message: "\(e)")
        case .retryLimitExceeded, .timeout: return .retryLimitExceeded
        case .nonMatchingChecksum: return .nonMatchingChecksum
        case .cancelled: return .cancelled
        case .unknown(let status, let m):
            return .unknown(message: status == 0 ? m : "Unexpected \(status) code from backend",
                            serverError: server(bucket, object, status: status == 0 ? nil : status, body: m))
        case .preconditionFailed, .conflict, .tls, .notEmpty, .operationFailed:
            return .unknown(message: "\(e)", serverError: server(bucket, object, status: nil, body: "\(e)"))
        }
    }

    private static func server(_ bucket: String, _ object: String, status: Int?, body: String) -> [String: Any] {
        var d: [String: Any] = ["bucket": bucket, "ResponseBody": body]
        if !object.isEmpty { d["object"] = object }
        if let status { d["ResponseErrorCode"] = status }
        return d
    }
}
