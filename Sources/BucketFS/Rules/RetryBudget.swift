import Foundation

/// Every retry limit of the core in one place, with the reason for each. They differ because
/// the faults they answer differ; all of them run inside the one deadline of the operation
/// (`MountConfig.operationTimeout`, docs/SEMANTICS.md §5), which bounds the time whatever the counts say.
///
/// Beneath them, the store retries each request by itself: Cloud Storage requests follow Google's
/// retry strategy (GCSStore's `RetryPolicy`: 408, 429, 5xx, resets and timeouts, jittered
/// backoff 100 ms doubling to 5 s, idempotent calls only, until the deadline). The budgets here
/// are for what the store cannot see as a fault: an answer of the wrong length, a part whose
/// stream broke after some of its bytes, a precondition that failed because someone else
/// changed the object meanwhile, an upload that failed after all of the store's retries.
enum RetryBudget {
    /// Attempts of a ranged read whose answer has another length than asked (a transport fault
    /// the HTTP layer accepted: a body cut short without a Content-Length). Each attempt is a
    /// whole request that already had the store's retries, so a few are enough to ride out a
    /// flaky connection; pauses 200 ms, 400 ms… up to 3.2 s between them.
    static let wrongLengthReadAttempts = 5
    static func wrongLengthReadPause(after attempt: Int) -> Duration { .milliseconds(100 << min(attempt, 5)) }

    /// Times a part fetched ahead whose stream broke after some of its bytes is fetched again
    /// from where its bytes stop, before its rest is read on demand (which has its own retries):
    /// a refill keeps the bytes already in and their checksum, a read on demand does not.
    static let partRefills = 3

    /// Attempts of a metadata PATCH whose `ifMetagenerationMatch` failed: someone else changed the
    /// object's metadata in between; each attempt re-reads and re-applies this mount's one
    /// change. Past a few, the object is changing faster than we can follow: ESTALE.
    static let metadataPatchAttempts = 5

    /// Attempts to create a directory's placeholder to carry an attribute, when another writer
    /// created it in between (`ifGenerationMatch=0` failed): the next attempt patches theirs.
    static let placeholderCreateAttempts = 3

    /// Background attempts after an upload failed with a transient error are a user option,
    /// `--upload-retries` (`MountConfig.uploadRetries`, default 5), then the data goes to
    /// lost+found: how long to wait before giving a file up depends on the network and on how
    /// long the mount runs. Pauses 1 s, 2 s, 4 s… up to `--retry-backoff-max`. A lost race (412)
    /// or a refusal (401/403/400) is never retried: another attempt cannot cure it, and a later
    /// success would contradict what close reported.
    static func uploadPause(beforeAttempt attempt: Int, max: Double) -> Double {
        min(max, pow(2, Double(attempt - 1)))
    }
}
