import CloudHTTP
import StorageModel

extension HTTPDialect {
    /// The Cloud Storage JSON API: Google's retryable statuses, errors as `StorageError.fromHTTP`.
    static func gcs(bucket: String) -> HTTPDialect {
        HTTPDialect(label: "GCS", bucketURL: "gs://\(bucket)", retryable: RetryPolicy.isRetryable(status:),
                    error: { status, message, path, bucket in
                        StorageError.fromHTTP(status: status, message: message, path: path, bucket: bucket)
                    })
    }
}
