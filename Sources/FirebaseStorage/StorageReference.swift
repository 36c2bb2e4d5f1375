import Foundation
import StorageModel

/// The Apple SDK's `StorageReference`: a path in a bucket, and the calls on the object there
/// (docs/LIBRARY.md, "The Apple SDK's API"). Uploads and downloads are tasks
/// (`StorageUploadTask`, `StorageDownloadTask`); the other calls take a completion handler, run
/// on the Storage's `callbackQueue`, or are `async`. Handlers and snapshots get errors as the SDK
/// gives them, `NSError`s (`as? NSError` matches); `async` calls throw `StorageError` (`catch
/// let e as StorageError` matches): on Linux Swift cannot cast one into the other.
open class StorageReference: NSObject {
    public let storage: Storage
    private let bucketName: String
    private let path: String

    init(storage: Storage, path: String, bucket: String? = nil) {
        self.storage = storage
        self.path = path
        bucketName = bucket ?? storage.storageBucket
        super.init()
    }

    public var bucket: String { bucketName }
    /// The object's full path; "" for the root.
    public var fullPath: String { path }
    /// The last segment of the path; "" for the root.
    public var name: String { StoragePath.lastSegment(path) }

    open func root() -> StorageReference { StorageReference(storage: storage, path: "", bucket: bucketName) }

    /// nil for the root.
    open func parent() -> StorageReference? {
        StoragePath.parent(path).map { StorageReference(storage: storage, path: $0, bucket: bucketName) }
    }

    /// A path below this one; leading, trailing and repeated `/` are dropped.
    open func child(_ path: String) -> StorageReference {
        StorageReference(storage: storage, path: StoragePath.join(self.path, path), bucket: bucketName)
    }

    // MARK: uploads

    @discardableResult
    open func putData(_ uploadData: Data, metadata: StorageMetadata? = nil) -> StorageUploadTask {
        putData(uploadData, metadata: metadata, completion: nil)
    }

    @discardableResult
    open func putData(_ uploadData: Data, metadata: StorageMetadata? = nil,
                      completion: ((_: StorageMetadata?, _: Error?) -> Void)?) -> StorageUploadTask {
        upload(StorageUploadTask(reference: self, source: .data(uploadData), file: nil, metadata: metadata), completion)
    }

    /// Objective-C's `putData:` (no metadata), as the SDK names it in Swift.
    @discardableResult
    open func __putData(_ uploadData: Data) -> StorageUploadTask { putData(uploadData, metadata: nil, completion: nil) }

    /// Objective-C's `putFile:` (no metadata), as the SDK names it in Swift.
    @discardableResult
    open func __putFile(from fileURL: URL) -> StorageUploadTask { putFile(from: fileURL, metadata: nil, completion: nil) }

    @discardableResult
    open func putFile(from fileURL: URL, metadata: StorageMetadata? = nil) -> StorageUploadTask {
        putFile(from: fileURL, metadata: metadata, completion: nil)
    }

    @discardableResult
    open func putFile(from fileURL: URL, metadata: StorageMetadata? = nil,
                      completion: ((_: StorageMetadata?, _: Error?) -> Void)?) -> StorageUploadTask {
        upload(StorageUploadTask(reference: self, source: .file(path: fileURL.path), file: fileURL, metadata: metadata), completion)
    }

    private func upload(_ task: StorageUploadTask, _ completion: ((StorageMetadata?, Error?) -> Void)?) -> StorageUploadTask {
        if let completion {
            task.observe(.success) { completion($0.metadata, nil) }
            task.observe(.failure) { completion(nil, $0.error) }
        }
        task.enqueue()
        return task
    }

    // MARK: downloads

    /// The whole object into memory; refused with `downloadSizeExceeded` when it is larger than
    /// `maxSize`, before any byte is read.
    @discardableResult
    open func getData(maxSize: Int64, completion: @escaping ((_: Data?, _: Error?) -> Void)) -> StorageDownloadTask {
        let task = StorageDownloadTask(reference: self, file: nil, maxSize: maxSize)
        task.observe(.success) { _ in completion(task.downloadedData, nil) }
        task.observe(.failure) { completion(nil, $0.error) }
        task.enqueue()
        return task
    }

    /// The object's download URL (a read of it by anyone who holds it, whatever the rules say).
    open func downloadURL(completion: @escaping ((_: URL?, _: Error?) -> Void)) {
        call(completion) { store in try await store.downloadURL(self.path) }
    }

    open func downloadURL() async throws -> URL {
        try await asyncCall { store in try await store.downloadURL(self.path) }
    }

    /// The object into the file at `fileURL` (made, or replaced, when the download completes).
    @discardableResult
    open func write(toFile fileURL: URL) -> StorageDownloadTask {
        write(toFile: fileURL, completion: nil)
    }

    @discardableResult
    open func write(toFile fileURL: URL, completion: ((_: URL?, _: Error?) -> Void)?) -> StorageDownloadTask {
        let task = StorageDownloadTask(reference: self, file: fileURL, maxSize: nil)
        if let completion {
            task.observe(.success) { _ in completion(fileURL, nil) }
            task.observe(.failure) { completion(nil, $0.error) }
        }
        task.enqueue()
        return task
    }

    // MARK: listing

    /// Every page, followed to the end. Needs rules with `rules_version = '2'`.
    open func listAll(completion: @escaping ((_: StorageListResult?, _: Error?) -> Void)) {
        call(completion) { _ in try await self.listAll() }
    }

    open func listAll() async throws -> StorageListResult {
        try await modelCall { ref in self.result(try await ref.listAll()) }
    }

    /// One page of at most `maxResults` (1…1000).
    open func list(maxResults: Int64, completion: @escaping ((_: StorageListResult?, _: Error?) -> Void)) {
        call(completion) { _ in try await self.page(maxResults, nil) }
    }

    open func list(maxResults: Int64, pageToken: String,
                   completion: @escaping ((_: StorageListResult?, _: Error?) -> Void)) {
        call(completion) { _ in try await self.page(maxResults, pageToken) }
    }

    func page(_ maxResults: Int64, _ token: String?) async throws -> StorageListResult {
        guard (1...1000).contains(maxResults) else {
            throw StorageError.invalidArgument(message: "Argument 'maxResults' must be between 1 and 1000 inclusive.")
        }
        return try await modelCall { ref in self.result(try await ref.list(maxResults: Int(maxResults), pageToken: token)) }
    }

    private func result(_ r: StorageModel.StorageListResult) -> StorageListResult {
        let root = self.root()
        return StorageListResult(prefixes: r.prefixes.map { root.child($0.fullPath) },
                                 items: r.items.map { root.child($0.fullPath) }, pageToken: r.pageToken)
    }

    // MARK: metadata

    open func getMetadata(completion: @escaping ((_: StorageMetadata?, _: Error?) -> Void)) {
        call(completion) { _ in try await self.getMetadata() }
    }

    open func getMetadata() async throws -> StorageMetadata {
        try await modelCall { ref in
            try StoragePath.validateObjectName(ref.fullPath)
            return StorageMetadata(try await ref.storage.store.getMetadata(ref.fullPath))
        }
    }

    /// Sends what `metadata` changed; nil deletes a property.
    open func updateMetadata(_ metadata: StorageMetadata, completion: ((_: StorageMetadata?, _: Error?) -> Void)?) {
        call({ completion?($0, $1) }) { _ in try await self.updateMetadata(metadata) }
    }

    open func updateMetadata(_ metadata: StorageMetadata) async throws -> StorageMetadata {
        let patch = metadata.patch
        return try await modelCall { ref in
            try StoragePath.validateObjectName(ref.fullPath)
            try CustomMetadataLimits.check(patch: patch)
            return StorageMetadata(try await ref.storage.store.patchMetadata(ref.fullPath, patch, preconditions: .none))
        }
    }

    // MARK: delete

    open func delete(completion: ((_: Error?) -> Void)?) {
        call({ (_: Bool?, error: Error?) in completion?(error) }) { _ in
            try await self.delete()
            return true
        }
    }

    open func delete() async throws {
        try await modelCall { ref in try await ref.delete() }
    }

    // MARK: NSObject

    override open func copy() -> Any { StorageReference(storage: storage, path: path, bucket: bucketName) }

    override open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? StorageReference else { return false }
        return other.storage == storage && other.bucketName == bucketName && other.path == path
    }

    override open var hash: Int { storage.hash ^ bucketName.hashValue ^ path.hashValue }

    override open var description: String { "gs://\(bucketName)/\(path)" }

    // MARK: calls

    /// A metadata, list or delete call on the model's reference of this path, within
    /// `maxOperationRetryTime`, its errors as the SDK's.
    func modelCall<T>(_ op: @escaping (StorageModel.StorageReference) async throws -> T) async throws -> T {
        let path = self.path, bucket = self.bucketName, backend = storage.backend
        let box = UncheckedOp(op)
        do {
            let ref = try backend.model().reference().exactly(path)
            return try await StorageBackend.bounded(storage.maxOperationRetryTime) { UncheckedValue(try await box.op(ref)) }.value
        } catch {
            throw StorageError.from(error, bucket: bucket, object: path)
        }
    }

    /// A call on the store, its errors as the SDK's.
    func asyncCall<T>(_ op: @escaping (FirebaseStoreRef) async throws -> T) async throws -> T {
        let path = self.path, bucket = self.bucketName, backend = storage.backend
        let box = UncheckedOp(op)
        do {
            let store = try backend.store()
            return try await StorageBackend.bounded(storage.maxOperationRetryTime) { UncheckedValue(try await box.op(store)) }.value
        } catch {
            throw StorageError.from(error, bucket: bucket, object: path)
        }
    }

    /// `op`, then `completion` on the callback queue.
    func call<T>(_ completion: @escaping (T?, Error?) -> Void, _ op: @escaping (FirebaseStoreRef) async throws -> T) {
        let queue = storage.callbackQueue
        let box = UncheckedValue((completion, op))
        Task {
            do {
                let value = UncheckedValue(try await self.asyncCall(box.value.1))
                queue.async { box.value.0(value.value, nil) }
            } catch {
                let ns = error as NSError
                queue.async { box.value.0(nil, ns) }
            }
        }
    }
}
