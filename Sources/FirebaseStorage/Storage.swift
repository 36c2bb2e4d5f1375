import Foundation
import FirebaseCore
import StorageModel

/// The Apple SDK's `Storage`: a Cloud Storage for Firebase bucket of a `FirebaseApp`, and the
/// entry to references (docs/LIBRARY.md, "The Apple SDK's API"). One instance per app and bucket.
/// Its requests are the library's v0 store's (`FirebaseStore`, the one the mount uses), as the
/// app's `Auth.auth().currentUser`, to production, or to the emulator given to `useEmulator`, else
/// to `FIREBASE_STORAGE_EMULATOR_HOST` when it is set.
open class Storage: NSObject {
    /// The default app's storage, for the bucket of its options (`STORAGE_BUCKET`).
    open class func storage() -> Storage {
        storage(app: defaultApp())
    }

    /// The default app's storage for the bucket `url` names (`gs://BUCKET`).
    open class func storage(url: String) -> Storage {
        storage(app: defaultApp(), url: url)
    }

    open class func storage(app: FirebaseApp) -> Storage {
        guard let bucket = app.options.storageBucket else {
            fatalError("No default Storage bucket found. Did you configure Firebase Storage properly?")
        }
        return instance(app: app, bucket: bucket.isEmpty ? "" : Self.bucket(of: "gs://\(bucket)/"))
    }

    open class func storage(app: FirebaseApp, url: String) -> Storage {
        instance(app: app, bucket: url.isEmpty ? "" : bucket(of: url))
    }

    public let app: FirebaseApp

    /// How long an upload may go without progress, its retries of transient faults included (600 s).
    public var maxUploadRetryTime: TimeInterval = 600
    /// The same for downloads (600 s).
    public var maxDownloadRetryTime: TimeInterval = 600
    /// How long a metadata, list or delete call may take, its retries included (120 s).
    public var maxOperationRetryTime: TimeInterval = 120
    /// Bytes per upload request; `.max`: the store's chunk (8 MiB). Rounded down to 256 KiB's multiple.
    public var uploadChunkSizeBytes: Int64 = .max
    /// Where completion handlers and task observers run.
    public var callbackQueue: DispatchQueue = .main

    let storageBucket: String
    let backend: StorageBackend

    init(app: FirebaseApp, bucket: String) {
        self.app = app
        storageBucket = bucket
        backend = StorageBackend(app: app, bucket: bucket)
        super.init()
    }

    /// The root of the bucket.
    open func reference() -> StorageReference {
        backend.configure(self)
        return StorageReference(storage: self, path: "")
    }

    /// A reference for `gs://BUCKET/PATH` or `http(s)://HOST/v0/b/BUCKET/o/PATH`; stops the program
    /// for a URL of another bucket or no storage URL, as the SDK does (`reference(for:)` throws).
    open func reference(forURL url: String) -> StorageReference {
        do {
            return try reference(for: URL(string: url) ?? URL(fileURLWithPath: "/"), text: url)
        } catch {
            fatalError("\(error)")
        }
    }

    open func reference(for url: URL) throws -> StorageReference {
        try reference(for: url, text: url.absoluteString)
    }

    private func reference(for url: URL, text: String) throws -> StorageReference {
        backend.configure(self)
        let parsed: (bucket: String, path: String)
        do {
            parsed = try StorageModel.Storage.parse(url: text)
        } catch {
            throw StorageError.pathError(message: "\(error)")
        }
        if !storageBucket.isEmpty, parsed.bucket != storageBucket {
            throw StorageError.bucketMismatch(message: "Provided bucket: `\(parsed.bucket)` does not match the Storage " +
                "bucket of the current instance: `\(storageBucket)`")
        }
        return StorageReference(storage: self, path: parsed.path, bucket: parsed.bucket)
    }

    open func reference(withPath path: String) -> StorageReference {
        reference().child(path)
    }

    /// Sends this instance's requests to the Storage emulator at `host:port` (http). Must come
    /// before the first reference, as in the SDK.
    open func useEmulator(withHost host: String, port: Int) {
        guard !host.isEmpty else { fatalError("Invalid host argument: Cannot connect to empty host.") }
        guard port >= 0 else { fatalError("Invalid port argument: Port must be greater or equal to zero.") }
        guard backend.useEmulator(host: host, port: port) else {
            fatalError("Cannot connect to emulator after Storage SDK initialization. Call useEmulator(host:port:) " +
                "before creating a Storage reference or trying to load data.")
        }
    }

    override open func copy() -> Any {
        let s = Storage(app: app, bucket: storageBucket)
        s.callbackQueue = callbackQueue
        return s
    }

    override open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? Storage else { return false }
        return other.app == app && other.storageBucket == storageBucket
    }

    override open var hash: Int { app.hash ^ storageBucket.hashValue }

    // MARK: instances

    private static let lock = NSLock()
    nonisolated(unsafe) private static var instances: [String: Storage] = [:]

    private static func instance(app: FirebaseApp, bucket: String) -> Storage {
        lock.withLock {
            let key = "\(app.name)|\(bucket)"
            if let s = instances[key], s.app === app { return s }
            let s = Storage(app: app, bucket: bucket)
            instances[key] = s
            return s
        }
    }

    private static func defaultApp() -> FirebaseApp {
        guard let app = FirebaseApp.app() else {
            fatalError("The default FirebaseApp instance must be configured before the default Storage instance " +
                "can be initialized. One way to ensure this is to call `FirebaseApp.configure()` first.")
        }
        return app
    }

    /// The bucket of `gs://BUCKET[/]`; a URL naming an object, or none, stops the program.
    private static func bucket(of url: String) -> String {
        guard let parsed = try? StorageModel.Storage.parse(url: url), parsed.path.isEmpty else {
            fatalError("Internal Error: Storage bucket cannot be initialized with a path: \(url)")
        }
        return parsed.bucket
    }
}
