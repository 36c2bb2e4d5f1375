import Foundation
import FirebaseCore
import FirebaseStore
import Logging
import StorageModel

/// A `Storage`'s one v0 store (`FirebaseStore`), made at the first call: to production, the
/// emulator given, or `FIREBASE_STORAGE_EMULATOR_HOST`; with the app's Auth's tokens; retrying
/// transient faults for up to the longest of the Storage's retry times read then.
final class StorageBackend: @unchecked Sendable {
    private let app: FirebaseApp
    let bucket: String
    /// Guards the fields below.
    private let lock = NSLock()
    private var emulator: String?
    private var configured = false
    private var made: FirebaseStore?
    private var deadline: TimeInterval = 600

    init(app: FirebaseApp, bucket: String) {
        self.app = app
        self.bucket = bucket
    }

    /// The first reference fixes the configuration (the emulator can no longer change).
    func configure(_ storage: Storage) {
        lock.withLock {
            if !configured {
                deadline = max(storage.maxUploadRetryTime, storage.maxDownloadRetryTime, storage.maxOperationRetryTime)
            }
            configured = true
        }
    }

    /// False once configured.
    func useEmulator(host: String, port: Int) -> Bool {
        lock.withLock {
            guard !configured else { return false }
            let h = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
            emulator = "http://\(h):\(port)"
            return true
        }
    }

    /// The store, made on first use.
    func store() throws -> FirebaseStore {
        try lock.withLock {
            if let made { return made }
            guard !bucket.isEmpty else {
                throw StorageError.invalidArgument(message: "this Storage has no bucket (the app's options give no STORAGE_BUCKET)")
            }
            let endpoints: FirebaseEndpoints
            do {
                endpoints = try FirebaseEndpoints.resolve(storage: emulator, auth: nil,
                                                          environment: ProcessInfo.processInfo.environment)
            } catch {
                throw StorageError.from(error, bucket: bucket, object: "")
            }
            var logger = Logger(label: "FirebaseStorage")
            logger.logLevel = .warning
            let s = FirebaseStore(bucket: bucket, prefix: "", endpoints: endpoints, tokens: AppTokens(app: app),
                                  logger: logger, requestTimeout: .seconds(60), deadline: .seconds(max(1, deadline)),
                                  maxConnections: 16)
            made = s
            return s
        }
    }

    /// The model's view of the same store, for what it already does (validation, listing pages).
    func model() throws -> StorageModel.Storage {
        StorageModel.Storage(store: try store())
    }

    /// `op` within `seconds`, else `retryLimitExceeded` (the call is cancelled). Kept on the real
    /// clock, the one this module's stores run on.
    static func bounded<T: Sendable>(_ seconds: TimeInterval, _ op: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await op() }
            group.addTask {
                try await BucketClock.real.sleep(for: .nanoseconds(Int64(max(0, seconds) * 1e9)))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw StorageError.retryLimitExceeded }
            return value
        }
    }
}

/// The app's Auth's tokens for the store: the current user's, refreshed by Auth. With no user
/// signed in, requests go without a token, as the SDK sends them, and the rules decide.
struct AppTokens: FirebaseOptionalIDTokenSource {
    let app: FirebaseApp

    func idTokenIfSignedIn(afterUnauthorized: Bool) async throws -> String? {
        try await app.authInterop?.idToken(forcingRefresh: afterUnauthorized)
    }

    func idToken(afterUnauthorized: Bool) async throws -> String {
        guard let token = try await idTokenIfSignedIn(afterUnauthorized: afterUnauthorized) else {
            throw StorageModel.StorageError.unauthenticated(
                message: "no user is signed in: sign in with Auth.auth().signIn(withEmail:password:), signIn(withCustomToken:) or signInAnonymously() first")
        }
        return token
    }

    var expiresAt: Date? { get async { nil } }
}
