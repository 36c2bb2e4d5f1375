import Foundation

/// How a bucket names its directories (docs/SEMANTICS.md, "Hierarchical-namespace buckets").
public enum BucketLayout: String, Sendable, Equatable {
    /// Directories are only prefixes of object names (and the placeholder objects `dir/` that
    /// mkdir makes): renaming one renames each object under it.
    case flat
    /// The bucket has a hierarchical namespace: folders are resources of their own, made by mkdir
    /// or by an upload under them, kept when emptied, and renamed in one atomic step.
    case hierarchical
}

/// A folder of a bucket with a hierarchical namespace (the JSON API's Folder resource).
public struct FolderInfo: Sendable, Equatable {
    /// The folder's full name, ending in "/" (`a/b/`).
    public var name: String
    public var metageneration: Int64
    public var createTime: Date?
    public var updateTime: Date?

    public init(name: String, metageneration: Int64 = 1, createTime: Date? = nil, updateTime: Date? = nil) {
        self.name = name
        self.metageneration = metageneration
        self.createTime = createTime
        self.updateTime = updateTime
    }
}

/// The folders of a bucket with a hierarchical namespace (`ObjectStore.folders`). Names end in
/// "/". A store hands one out only for such a bucket; a flat bucket has none.
public protocol FolderStore: Sendable {
    /// Creates the folder and any missing parent (`recursive=true`). `.conflict` when it exists.
    func createFolder(_ name: String) async throws -> FolderInfo
    /// The folder's resource; `.objectNotFound` when there is none.
    func getFolder(_ name: String) async throws -> FolderInfo
    /// Deletes an empty folder. `.notEmpty` when it holds an object or a folder; `.objectNotFound`
    /// when there is no such folder.
    func deleteFolder(_ name: String) async throws
    /// Renames the folder, with every folder and object under it, in one atomic step, and follows
    /// the server's long-running operation to its end (polled with backoff, bounded by the store's
    /// deadline for one call). `.conflict` when the destination exists, `.objectNotFound` when the
    /// source does not; an operation that ends in failure, or cannot be followed to its end in
    /// time, is `.operationFailed` naming the operation. Nothing is half done either way: the
    /// server moves all or nothing.
    func renameFolder(_ source: String, to destination: String) async throws -> FolderInfo
}

/// The folder every ancestor directory of `name` is: `a/b/c` → `a/`, `a/b/`.
public func ancestorFolders(of name: String) -> [String] {
    var out: [String] = []
    var i = name.startIndex
    while let slash = name[i...].firstIndex(of: "/") {
        out.append(String(name[...slash]))
        i = name.index(after: slash)
    }
    return out
}

/// A `FolderStore` seen through a store wrapper: `around` runs around each call (the metrics'
/// timer, the request log's line, the sign-in watch) with the call's name ("folder_create",
/// "folder_get", "folder_delete", "folder_rename") and the folder it names.
public struct WrappedFolders: FolderStore {
    public typealias Around = @Sendable (_ op: String, _ name: String,
                                         _ call: @Sendable () async throws -> FolderInfo?) async throws -> FolderInfo?
    private let inner: any FolderStore
    private let around: Around

    public init(_ inner: any FolderStore, around: @escaping Around) {
        self.inner = inner
        self.around = around
    }

    public func createFolder(_ name: String) async throws -> FolderInfo {
        try await required(around("folder_create", name) { [inner] in try await inner.createFolder(name) }, name)
    }
    public func getFolder(_ name: String) async throws -> FolderInfo {
        try await required(around("folder_get", name) { [inner] in try await inner.getFolder(name) }, name)
    }
    public func deleteFolder(_ name: String) async throws {
        _ = try await around("folder_delete", name) { [inner] in try await inner.deleteFolder(name); return nil }
    }
    public func renameFolder(_ source: String, to destination: String) async throws -> FolderInfo {
        try await required(around("folder_rename", source) { [inner] in try await inner.renameFolder(source, to: destination) }, destination)
    }

    private func required(_ info: FolderInfo?, _ name: String) throws -> FolderInfo {
        guard let info else { throw StorageError.objectNotFound(path: name) }
        return info
    }
}
