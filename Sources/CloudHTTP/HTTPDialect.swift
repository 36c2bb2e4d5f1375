import Foundation
import StorageModel

/// What differs between the APIs the transport speaks: how an error status reads as a typed
/// error, which statuses are worth a retry, and how log lines and messages name the bucket.
package struct HTTPDialect: Sendable {
    /// The first word of log lines ("GCS", "Firebase").
    package var label: String
    /// The bucket as messages show it (`gs://B`, `firebase://B`).
    package var bucketURL: String
    /// Statuses worth retrying for an idempotent call.
    package var retryable: @Sendable (Int) -> Bool
    /// An error answer as a typed error: status, the server's message, the object's name ("" for
    /// bucket-level calls) and the bucket.
    package var error: @Sendable (_ status: Int, _ message: String, _ path: String, _ bucket: String) -> StorageError

    package init(label: String, bucketURL: String, retryable: @escaping @Sendable (Int) -> Bool,
                 error: @escaping @Sendable (Int, String, String, String) -> StorageError) {
        self.label = label
        self.bucketURL = bucketURL
        self.retryable = retryable
        self.error = error
    }
}
