@testable import FirebaseStorage
import Foundation
import StorageModel
import Testing

/// The SDK's `StorageError`: its cases from the store's errors, its `NSError` form (domain, codes,
/// user info), and the enum again from that form (docs/LIBRARY.md, "The Apple SDK's API").
@Suite struct StorageErrorTests {
    @Test func aRefusalOfTheRulesIsUnauthorizedWithItsBucketAndObject() {
        let e = FirebaseStorage.StorageError.from(StorageModel.StorageError.unauthorized(path: "a/b.txt", message: "Permission denied."),
                                                  bucket: "bkt", object: "a/b.txt")
        guard case let .unauthorized(bucket, object, server) = e else { Issue.record("\(e)"); return }
        #expect(bucket == "bkt" && object == "a/b.txt")
        #expect(server["ResponseErrorCode"] as? Int == 403 && server["ResponseBody"] as? String == "Permission denied.")
        let ns = e as NSError
        #expect(ns.domain == "FIRStorageErrorDomain" && ns.code == -13021)
        #expect(ns.localizedDescription == "User does not have permission to access gs://bkt/a/b.txt.")
        #expect(ns.userInfo["bucket"] as? String == "bkt" && ns.userInfo["object"] as? String == "a/b.txt")
    }

    @Test func theStoresErrorsMapToTheSDKsCodes() {
        let cases: [(StorageModel.StorageError, StorageErrorCode)] = [
            (.objectNotFound(path: "x"), .objectNotFound), (.bucketNotFound(bucket: "b"), .bucketNotFound),
            (.unauthenticated(message: "m"), .unauthenticated), (.quotaExceeded(message: "q"), .quotaExceeded),
            (.invalidArgument(message: "i"), .invalidArgument), (.bucketMismatch(expected: "a", got: "b"), .bucketMismatch),
            (.pathError(path: "", problem: .empty), .pathError), (.retryLimitExceeded(message: "r"), .retryLimitExceeded),
            (.timeout(message: "t"), .retryLimitExceeded), (.nonMatchingChecksum(path: "x", expected: "1", got: "2"), .nonMatchingChecksum),
            (.cancelled, .cancelled), (.unknown(status: 500, message: "boom"), .unknown), (.preconditionFailed(path: "x"), .unknown),
        ]
        for (store, code) in cases {
            let e = FirebaseStorage.StorageError.from(store, bucket: "bkt", object: "x")
            #expect((e as NSError).code == code.rawValue, "\(store)")
        }
        #expect((FirebaseStorage.StorageError.from(CancellationError(), bucket: "b", object: "x") as NSError).code == -13040)
    }

    @Test func theNSErrorFormGivesTheEnumBack() throws {
        let all: [FirebaseStorage.StorageError] = [
            .unknown(message: "m", serverError: ["bucket": "b"]), .objectNotFound(object: "o", serverError: ["bucket": "b", "object": "o"]),
            .bucketNotFound(bucket: "b"), .quotaExceeded(bucket: "b", serverError: ["bucket": "b"]),
            .unauthenticated(serverError: [:]), .unauthorized(bucket: "b", object: "o", serverError: ["bucket": "b", "object": "o"]),
            .retryLimitExceeded, .nonMatchingChecksum, .downloadSizeExceeded(total: 4096, maxSize: 1024), .cancelled,
            .invalidArgument(message: "i"), .internalError(message: "n"), .bucketMismatch(message: "bm"), .pathError(message: "p"),
        ]
        for e in all {
            let back = try #require(FirebaseStorage.StorageError.rebuilt(e as NSError) as? FirebaseStorage.StorageError)
            #expect((back as NSError).code == (e as NSError).code)
            #expect(back.errorUserInfo[NSLocalizedDescriptionKey] as? String == e.errorUserInfo[NSLocalizedDescriptionKey] as? String)
        }
        let size = FirebaseStorage.StorageError.rebuilt(FirebaseStorage.StorageError.downloadSizeExceeded(total: 4096, maxSize: 1024) as NSError)
        guard case let .downloadSizeExceeded(total, maxSize) = size as? FirebaseStorage.StorageError else { Issue.record("\(size)"); return }
        #expect(total == 4096 && maxSize == 1024)
        // an error of another domain is left as it is
        let other = NSError(domain: "elsewhere", code: 1)
        #expect((FirebaseStorage.StorageError.rebuilt(other) as NSError).domain == "elsewhere")
    }
}
