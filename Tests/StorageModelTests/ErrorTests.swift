import StorageModel
import Testing

@Suite struct ErrorTests {
    @Test func fromHTTPMapsStatusCodes() {
        func map(_ s: Int, path: String = "a/b") -> StorageError {
            StorageError.fromHTTP(status: s, message: "m", path: path, bucket: "bkt")
        }
        #expect(map(400) == .invalidArgument(message: "m"))
        #expect(map(401) == .unauthenticated(message: "m"))
        #expect(map(403) == .unauthorized(path: "a/b", message: "m"))
        #expect(map(404) == .objectNotFound(path: "a/b"))
        #expect(map(404, path: "") == .bucketNotFound(bucket: "bkt"))
        #expect(map(408) == .timeout(message: "m"))
        #expect(map(409) == .conflict(path: "a/b", message: "m"))
        #expect(map(412) == .preconditionFailed(path: "a/b"))
        #expect(map(429) == .quotaExceeded(message: "m"))
        #expect(map(500) == .unknown(status: 500, message: "m"))
        #expect(map(503) == .unknown(status: 503, message: "m"))
        #expect(map(418) == .unknown(status: 418, message: "m"))
    }

    @Test func transientErrors() {
        for s in [408, 429, 500, 502, 503, 504] {
            #expect(StorageError.fromHTTP(status: s, message: "", path: "x").isTransient, "\(s) should be retried")
        }
        for s in [400, 401, 403, 404, 409, 412] {
            #expect(!StorageError.fromHTTP(status: s, message: "", path: "x").isTransient, "\(s) must not be retried")
        }
        #expect(StorageError.unknown(status: 0, message: "connection reset").isTransient)
        #expect(!StorageError.cancelled.isTransient)
    }

    @Test func descriptionsNameTheObject() {
        #expect(StorageError.objectNotFound(path: "a/b").description.contains("a/b"))
        #expect(StorageError.preconditionFailed(path: "x/y").description.contains("x/y"))
        #expect(StorageError.pathError(path: "p", problem: .tooLong(bytes: 2000)).description.contains("1024"))
    }
}
