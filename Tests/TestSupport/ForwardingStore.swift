import Foundation
import StorageModel

/// A test double that changes a few of a store's calls and hands the rest to `inner` as they are:
/// a conforming type writes only the calls it changes. The optional calls (`stream`, `isLocal`,
/// `probeCreate`, `versions`, `listsUnderPartialNames`...) keep `StoreBackend`'s defaults, not
/// `inner`'s: a double that needs one of them forwarded says so itself.
public protocol ForwardingStore: StoreBackend {
    associatedtype Inner: ObjectStore
    var inner: Inner { get }
}

extension ForwardingStore {
    public var bucket: String { inner.bucket }
    public func list(_ request: ListRequest) async throws -> ListPage { try await inner.list(request) }
    public func getMetadata(_ name: String) async throws -> ObjectInfo { try await inner.getMetadata(name) }
    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        try await inner.patchMetadata(name, patch, preconditions: preconditions)
    }
    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        try await inner.read(name, generation: generation, range: range)
    }
    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                      preconditions: Preconditions) async throws -> ObjectInfo {
        try await inner.write(name, from: source, metadata: metadata, preconditions: preconditions)
    }
    public func delete(_ name: String, preconditions: Preconditions) async throws {
        try await inner.delete(name, preconditions: preconditions)
    }
    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
                     metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        try await inner.copy(from: source, sourceGeneration: sourceGeneration, to: destination,
                             metadata: metadata, preconditions: preconditions)
    }
}
