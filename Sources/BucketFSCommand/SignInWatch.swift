import BucketFS
import Foundation
import StorageModel

/// Whether a running mount is signed out (docs/OPERATING.md, "A mount signed out"): its last
/// store call that reached the server was refused as unauthenticated (HTTP 401: an expired static
/// token, a revoked sign-in or refresh token), so every operation fails with EACCES until a call
/// is answered again. Kept as the file `CACHE_DIR/.signed-out` (the time and the server's words),
/// which `bucketfs status` reads and the metrics endpoint exports as `bucketfs_signed_out`.
final class SignInWatch: @unchecked Sendable {
    static let fileName = ".signed-out"
    let path: String
    private let lock = NSLock()
    /// nil until the first call that reached the server: then a stale file of an earlier mount goes.
    private var signedOut: Bool?

    init(cacheDirectory: String) { path = cacheDirectory + "/" + Self.fileName }

    /// What a store call's outcome says: a 401 signs the mount out; an answer from the server
    /// (success, not found, a 403 of permissions, a precondition…) signs it back in; no answer
    /// (a timeout, a reset, a cancel) says nothing about the sign-in.
    func saw(_ error: (any Error)?) {
        guard let error else { return answered() }
        guard let e = error as? StorageError else { return }
        switch e {
        case .unauthenticated(let m): refused(m)
        case .objectNotFound, .bucketNotFound, .unauthorized, .invalidArgument, .preconditionFailed, .conflict, .quotaExceeded,
             .nonMatchingChecksum:
            answered()
        default: return
        }
    }

    private func refused(_ message: String) {
        lock.withLock {
            guard signedOut != true else { return }
            signedOut = true
            let text = Array("\(RFC3339.format(Date()))\t\(message.replacingOccurrences(of: "\n", with: " "))\n".utf8)
            // 0600 from its creation, as every file of the cache directory (PrivateFiles).
            let fd = PrivateFiles.open(path, O_WRONLY | O_TRUNC)
            guard fd >= 0 else { return }
            _ = text.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            Glibc.close(fd)
        }
    }

    private func answered() {
        lock.withLock {
            guard signedOut != false else { return }
            signedOut = false
            unlink(path)
        }
    }

    /// Since when and why the mount holding `cacheDirectory` is signed out, or nil.
    static func read(_ cacheDirectory: String) -> (since: String, reason: String)? {
        guard let d = FileManager.default.contents(atPath: cacheDirectory + "/" + fileName) else { return nil }
        let parts = String(decoding: d, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            .split(separator: "\t", maxSplits: 1).map(String.init)
        return (parts.first ?? "?", parts.count > 1 ? parts[1] : "")
    }
}

/// A store whose outcomes `SignInWatch` sees: the outermost wrapper of a mount's store.
final class SignInWatchStore: StoreWrapper {
    let inner: any ObjectStore
    let watch: SignInWatch
    var wrapped: any ObjectStore { inner }

    init(_ inner: any ObjectStore, watch: SignInWatch) {
        self.inner = inner
        self.watch = watch
    }

    private func seen<T>(_ body: () async throws -> T) async throws -> T {
        do {
            let v = try await body()
            watch.saw(nil)
            return v
        } catch {
            watch.saw(error)
            throw error
        }
    }

    var isLocal: Bool { inner.isLocal }
    var listsUnderPartialNames: Bool { inner.listsUnderPartialNames }
    var boundsListsByOffsets: Bool { inner.boundsListsByOffsets }
    var bucket: String { inner.bucket }
    /// Past moments are read-only views of their own; their calls are not watched.
    var versions: (any VersionListing)? { inner.versions }

    func openLocal(_ name: String, generation: Int64) async throws -> Int32? {
        try await seen { try await inner.openLocal(name, generation: generation) }
    }
    func stream(_ name: String, generation: Int64, range: Range<Int64>, deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        try await seen { try await inner.stream(name, generation: generation, range: range, deliver: deliver) }
    }
    func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        try await seen { try await inner.probeCreate(name, metadata: metadata) }
    }
    func list(_ r: ListRequest) async throws -> ListPage { try await seen { try await inner.list(r) } }
    func getMetadata(_ name: String) async throws -> ObjectInfo { try await seen { try await inner.getMetadata(name) } }
    func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        try await seen { try await inner.patchMetadata(name, patch, preconditions: preconditions) }
    }
    func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        try await seen { try await inner.read(name, generation: generation, range: range) }
    }
    func write(_ name: String, from source: UploadSource, metadata: WritableMetadata, preconditions: Preconditions) async throws -> ObjectInfo {
        try await seen { try await inner.write(name, from: source, metadata: metadata, preconditions: preconditions) }
    }
    func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                            preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        guard let upload = try await seen({ try await inner.beginGrowingUpload(name, file: path, metadata: metadata, preconditions: preconditions) })
        else { return nil }
        return WrappedGrowingUpload(upload) { [self] finish in try await seen { try await finish() } }
    }
    func delete(_ name: String, preconditions: Preconditions) async throws {
        try await seen { try await inner.delete(name, preconditions: preconditions) }
    }
    func move(from source: String, sourceGeneration: Int64, to destination: String, preconditions: Preconditions) async throws -> ObjectInfo? {
        try await seen { try await inner.move(from: source, sourceGeneration: sourceGeneration, to: destination, preconditions: preconditions) }
    }
    var folders: (any FolderStore)? {
        guard let f = inner.folders else { return nil }
        return WrappedFolders(f) { [self] _, _, call in try await seen { try await call() } }
    }
    func copy(from source: String, sourceGeneration: Int64?, to destination: String, metadata: WritableMetadata?,
              preconditions: Preconditions) async throws -> ObjectInfo {
        try await seen { try await inner.copy(from: source, sourceGeneration: sourceGeneration, to: destination, metadata: metadata,
                                              preconditions: preconditions) }
    }
}
