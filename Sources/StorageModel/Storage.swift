import Foundation

/// Firebase's `Storage`: a bucket and the entry point to references.
public struct Storage: Sendable {
    public let store: any ObjectStore
    public var bucket: String { store.bucket }
    /// How many times `listAll` and friends retry a transient error.
    public var maxOperationRetryTime: TimeInterval = 120

    public init(store: any ObjectStore) { self.store = store }

    /// The root reference.
    public func reference() -> StorageReference { StorageReference(storage: self, fullPath: "") }

    /// A reference from a relative path (normalised like `child`).
    public func reference(withPath path: String) -> StorageReference { reference().child(path) }

    /// `gs://bucket/path` or `http(s)://host/v0/b/BUCKET/o/PERCENT-ENCODED-PATH`.
    public func reference(forURL url: String) throws(StorageError) -> StorageReference {
        let (b, path) = try Self.parse(url: url)
        guard b == bucket else { throw .bucketMismatch(expected: bucket, got: b) }
        return StorageReference(storage: self, fullPath: path)
    }

    /// Parses a storage URL into (bucket, normalised path). Rejects anything else, and a bucket
    /// name that breaks Cloud Storage's naming rules (`BucketName`).
    public static func parse(url: String) throws(StorageError) -> (bucket: String, path: String) {
        if url.hasPrefix("gs://") {
            let rest = url.dropFirst(5)
            let bucket = rest.prefix { $0 != "/" }
            guard !bucket.isEmpty else { throw .invalidArgument(message: "no bucket in '\(url)'") }
            let path = rest.dropFirst(bucket.count)
            try BucketName.validate(String(bucket))
            return (String(bucket), StoragePath.normalize(String(path)))
        }
        for scheme in ["https://", "http://"] where url.lowercased().hasPrefix(scheme) {
            let rest = url.dropFirst(scheme.count)
            guard let slash = rest.firstIndex(of: "/"), rest.startIndex != slash else { break }
            var pathPart = String(rest[slash...])
            if let q = pathPart.firstIndex(of: "?") { pathPart = String(pathPart[..<q]) }
            // /v0/b/BUCKET/o/ENCODED or /v0/b/BUCKET/o (root)
            let parts = pathPart.split(separator: "/", omittingEmptySubsequences: false)
            // ["", "v0", "b", BUCKET, "o", ENCODED?]
            guard parts.count >= 5, parts[0].isEmpty, parts[1] == "v0", parts[2] == "b", !parts[3].isEmpty,
                  parts[4] == "o", parts.count <= 6 else { break }
            guard let bucket = parts[3].removingPercentEncoding else { break }
            var object = ""
            if parts.count == 6 {
                guard let decoded = parts[5].removingPercentEncoding else { break }
                object = decoded
            }
            try BucketName.validate(bucket)
            return (bucket, StoragePath.normalize(object))
        }
        throw .invalidArgument(message: "not a storage URL (gs://BUCKET/PATH or http(s)://HOST/v0/b/BUCKET/o/PATH): '\(url)'")
    }
}

/// Firebase's `StorageListResult`.
public struct StorageListResult: Sendable {
    public let prefixes: [StorageReference]
    public let items: [StorageReference]
    public let pageToken: String?
}

/// Firebase's `StorageReference`: a path in a bucket.
public struct StorageReference: Sendable, CustomStringConvertible, Hashable {
    public let storage: Storage
    /// Normalised path, "" for the root.
    public let fullPath: String

    init(storage: Storage, fullPath: String) {
        self.storage = storage
        self.fullPath = fullPath
    }

    public var bucket: String { storage.bucket }
    public var name: String { StoragePath.lastSegment(fullPath) }
    public var description: String { "gs://\(bucket)/\(fullPath)" }

    public func child(_ path: String) -> StorageReference {
        StorageReference(storage: storage, fullPath: StoragePath.join(fullPath, path))
    }

    public func parent() -> StorageReference? {
        StoragePath.parent(fullPath).map { StorageReference(storage: storage, fullPath: $0) }
    }

    public func root() -> StorageReference { StorageReference(storage: storage, fullPath: "") }

    /// A reference to exactly this object name, without `child()`'s normalisation (for names such
    /// as `a//b` that the normalised model cannot express). Validation still applies on use.
    public func exactly(_ name: String) -> StorageReference { StorageReference(storage: storage, fullPath: name) }

    public static func == (a: StorageReference, b: StorageReference) -> Bool {
        a.bucket == b.bucket && a.fullPath == b.fullPath
    }

    public func hash(into h: inout Hasher) {
        h.combine(bucket)
        h.combine(fullPath)
    }

    private func validated() throws(StorageError) -> String {
        try StoragePath.validateObjectName(fullPath)
        return fullPath
    }

    // MARK: metadata

    public func getMetadata() async throws -> StorageMetadata {
        StorageMetadata(try await storage.store.getMetadata(try validated()))
    }

    /// Sends only what `metadata` changed; nil deletes a property; custom keys merge.
    public func updateMetadata(_ metadata: StorageMetadata) async throws -> StorageMetadata {
        try await updateMetadata(patch: metadata.patch)
    }

    public func updateMetadata(patch: MetadataPatch, preconditions: Preconditions = .none) async throws -> StorageMetadata {
        let name = try validated()
        try CustomMetadataLimits.check(patch: patch)
        return StorageMetadata(try await storage.store.patchMetadata(name, patch, preconditions: preconditions))
    }

    // MARK: data

    public func data(maxSize: Int64) async throws -> Data {
        let name = try validated()
        let info = try await storage.store.getMetadata(name)
        if info.size > maxSize {
            throw StorageError.invalidArgument(message: "object \(name) is \(info.size) bytes, over maxSize \(maxSize)")
        }
        return try await storage.store.read(name, generation: info.generation, range: nil)
    }

    @discardableResult
    public func putData(_ data: Data, metadata: StorageMetadata? = nil,
                        preconditions: Preconditions = .none) async throws -> StorageMetadata {
        let name = try validated()
        let w = metadata?.writable ?? WritableMetadata()
        try CustomMetadataLimits.check(w.customMetadata)
        return StorageMetadata(try await storage.store.write(name, from: .data(data), metadata: w, preconditions: preconditions))
    }

    @discardableResult
    public func putFile(from path: String, metadata: StorageMetadata? = nil,
                        preconditions: Preconditions = .none) async throws -> StorageMetadata {
        let name = try validated()
        let w = metadata?.writable ?? WritableMetadata()
        try CustomMetadataLimits.check(w.customMetadata)
        return StorageMetadata(try await storage.store.write(name, from: .file(path: path), metadata: w, preconditions: preconditions))
    }

    public func delete() async throws {
        try await storage.store.delete(try validated(), preconditions: .none)
    }

    // MARK: list

    public func list(maxResults: Int) async throws -> StorageListResult {
        try await list(maxResults: maxResults, pageToken: nil)
    }

    public func list(maxResults: Int, pageToken: String?) async throws -> StorageListResult {
        guard (1...1000).contains(maxResults) else {
            throw StorageError.invalidArgument(message: "maxResults must be 1…1000, got \(maxResults)")
        }
        if let t = pageToken, t.isEmpty { throw StorageError.invalidArgument(message: "empty page token") }
        let prefix = fullPath.isEmpty ? "" : fullPath + "/"
        let page = try await storage.store.list(ListRequest(prefix: prefix, delimiter: "/", maxResults: maxResults, pageToken: pageToken))
        return Self.result(page, storage: storage)
    }

    /// Follows `nextPageToken` to the end.
    public func listAll() async throws -> StorageListResult {
        var prefixes: [StorageReference] = []
        var items: [StorageReference] = []
        var token: String? = nil
        repeat {
            let r = try await list(maxResults: 1000, pageToken: token)
            prefixes += r.prefixes
            items += r.items
            token = r.pageToken
        } while token != nil
        return StorageListResult(prefixes: prefixes, items: items, pageToken: nil)
    }

    /// Turns a JSON API page into the model's result: prefixes lose one trailing `/`;
    /// items whose names contain `//` or end in `/` are dropped, and so are prefixes that only
    /// such names make (`wrongPrefix//` when listing `wrongPrefix`, `/` at the root).
    static func result(_ page: ListPage, storage: Storage) -> StorageListResult {
        let prefixes = page.prefixes.compactMap { p -> StorageReference? in
            let trimmed = p.hasSuffix("/") ? String(p.dropLast()) : p
            if trimmed.isEmpty || trimmed.hasSuffix("/") || trimmed.contains("//") { return nil }
            return StorageReference(storage: storage, fullPath: trimmed)
        }
        let items = page.items.compactMap { i -> StorageReference? in
            if i.name.contains("//") || i.name.hasSuffix("/") { return nil }
            return StorageReference(storage: storage, fullPath: i.name)
        }
        return StorageListResult(prefixes: prefixes, items: items, pageToken: page.nextPageToken)
    }
}

/// Cloud Storage's custom-metadata limits, checked before any request.
public enum CustomMetadataLimits {
    public static let maxKeyBytes = 1024
    public static let maxValueBytes = 4096
    public static let maxTotalBytes = 8192

    public enum Violation: Error, Equatable, Sendable {
        case keyTooLong(String)
        case valueTooLong(String)
        case totalTooLarge(Int)
        case emptyKey
    }

    /// Size of a custom metadata map as GCS counts it: keys plus values.
    public static func totalBytes(_ m: [String: String]) -> Int {
        m.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
    }

    public static func violation(_ m: [String: String]) -> Violation? {
        for (k, v) in m {
            if k.isEmpty { return .emptyKey }
            if k.utf8.count > maxKeyBytes { return .keyTooLong(k) }
            if v.utf8.count > maxValueBytes { return .valueTooLong(k) }
        }
        let t = totalBytes(m)
        return t > maxTotalBytes ? .totalTooLarge(t) : nil
    }

    public static func check(_ m: [String: String]) throws(StorageError) {
        if let v = violation(m) { throw .invalidArgument(message: "custom metadata limit: \(v)") }
    }

    /// Checks the keys and values a patch sets (the total is checked by the store, which knows
    /// the merged result).
    public static func check(patch: MetadataPatch) throws(StorageError) {
        var set: [String: String] = [:]
        for (k, v) in patch.customMetadata {
            if k.isEmpty || k.utf8.count > maxKeyBytes { throw .invalidArgument(message: "custom metadata key too long or empty") }
            if let v { set[k] = v }
        }
        for (k, v) in set where v.utf8.count > maxValueBytes {
            throw .invalidArgument(message: "custom metadata value for '\(k)' is over \(maxValueBytes) bytes")
        }
    }
}
