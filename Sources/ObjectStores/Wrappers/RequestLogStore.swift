import Foundation
import StorageModel

/// A decorator that appends one line per store request to a file (`--request-log`): the
/// operation and the object name or list prefix. Used by tests and for debugging what a shell
/// command costs; it never logs credentials (stores see none).
public final class RequestLogStore: StoreWrapper, @unchecked Sendable {
    let inner: any ObjectStore
    public var wrapped: any ObjectStore { inner }
    public var isLocal: Bool { inner.isLocal }
    public var listsUnderPartialNames: Bool { inner.listsUnderPartialNames }
    public var boundsListsByOffsets: Bool { inner.boundsListsByOffsets }
    /// A local store's reads of an open file are one "read" (its file, opened).
    public func openLocal(_ name: String, generation: Int64) async throws -> Int32? {
        note("read", name); return try await inner.openLocal(name, generation: generation)
    }
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        note("read", name); try await inner.stream(name, generation: generation, range: range, deliver: deliver)
    }
    /// A create probe is one request of a store that asks (a `probe` line); none otherwise.
    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        do {
            let answer = try await inner.probeCreate(name, metadata: metadata)
            if answer != nil { note("probe", name) }
            return answer
        } catch {
            note("probe", name)
            throw error
        }
    }
    let fd: Int32
    public var bucket: String { inner.bucket }
    /// The inner store's past, logged: a versioned listing is a `list` line with its prefix, the
    /// bucket's versioning state a `get` line with no name (the bucket's own metadata).
    public var versions: (any VersionListing)? {
        guard let listing = inner.versions else { return nil }
        return LoggedVersions(inner: listing, log: self)
    }

    public init(_ inner: any ObjectStore, path: String) throws {
        self.inner = inner
        fd = PrivateFiles.open(path, O_WRONLY | O_APPEND)  // 0600: it names every object touched
        if fd < 0 { throw StorageError.invalidArgument(message: "cannot open request log \(path)") }
        // The store's own requests (v0's guard GETs, a probe's cancel): one line each too.
        (inner.innermost as? any InnerRequestReporting)?.innerRequests.add { [weak self] op, name, _ in self?.note(op, name) }
    }

    deinit { close(fd) }

    func note(_ op: String, _ name: String) {
        let line = Array("\(op) \(name)\n".utf8)
        _ = line.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    public func list(_ r: ListRequest) async throws -> ListPage {
        note("list", r.prefix); return try await inner.list(r)
    }
    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        note("get", name); return try await inner.getMetadata(name)
    }
    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        note("patch", name); return try await inner.patchMetadata(name, patch, preconditions: preconditions)
    }
    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        note("read", name); return try await inner.read(name, generation: generation, range: range)
    }
    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata, preconditions: Preconditions) async throws -> ObjectInfo {
        note("write", name); return try await inner.write(name, from: source, metadata: metadata, preconditions: preconditions)
    }
    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        guard let upload = try await inner.beginGrowingUpload(name, file: path, metadata: metadata, preconditions: preconditions) else { return nil }
        return WrappedGrowingUpload(upload) { [self] finish in note("write", name); return try await finish() }
    }
    public func delete(_ name: String, preconditions: Preconditions) async throws {
        note("delete", name); try await inner.delete(name, preconditions: preconditions)
    }
    public func copy(from source: String, sourceGeneration: Int64?, to destination: String, metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        note("copy", source); return try await inner.copy(from: source, sourceGeneration: sourceGeneration, to: destination, metadata: metadata, preconditions: preconditions)
    }
    /// A line when a move was asked of the server (it answered an object or an error); none when
    /// the store has no move and said so without a request (nil), so a copy and delete follow. (The
    /// one request by which a Cloud Storage store learns that its server has none is not logged.)
    public func move(from source: String, sourceGeneration: Int64, to destination: String, preconditions: Preconditions) async throws -> ObjectInfo? {
        do {
            let moved = try await inner.move(from: source, sourceGeneration: sourceGeneration, to: destination, preconditions: preconditions)
            if moved != nil { note("move", source) }
            return moved
        } catch {
            note("move", source)
            throw error
        }
    }
    /// The inner store's folders, logged: one line a call ("folder_create", "folder_rename"...).
    public var folders: (any FolderStore)? {
        guard let f = inner.folders else { return nil }
        return WrappedFolders(f) { [self] op, name, call in note(op, name); return try await call() }
    }
}

/// `RequestLogStore.versions`.
struct LoggedVersions: VersionListing {
    let inner: any VersionListing
    let log: RequestLogStore

    func listVersions(_ request: ListRequest) async throws -> VersionPage {
        log.note("list", request.prefix); return try await inner.listVersions(request)
    }
    func versioningState() async throws -> VersioningState {
        log.note("get", ""); return try await inner.versioningState()
    }
}
