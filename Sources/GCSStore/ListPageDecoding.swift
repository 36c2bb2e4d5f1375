import CloudHTTP
import Foundation
import StorageModel

/// A list page decoded with `JSONDecoder` into plain structs: a page of a large listing parses into
/// far fewer, smaller objects than `JSONSerialization`'s dictionaries (the emulator answers a
/// listing of 20,000 objects in one 15 MB page).
struct ListPageJSON: Decodable, Equatable {
    var prefixes: [String]?
    var items: [ObjectJSON]?
    var nextPageToken: String?
}

/// An object resource; numbers come as strings (int64 in JSON), some servers send numbers.
struct ObjectJSON: Decodable, Equatable {
    var bucket: String?
    var name: String?
    var generation: Int64Text?
    var metageneration: Int64Text?
    var size: Int64Text?
    var timeCreated: String?
    var updated: String?
    var md5Hash: String?
    var crc32c: String?
    var cacheControl: String?
    var contentDisposition: String?
    var contentEncoding: String?
    var contentLanguage: String?
    var contentType: String?
    var metadata: [String: String?]?
    /// When this generation stopped being live (a versioned listing's noncurrent generations).
    var timeDeleted: String?

    func info(stripPrefix: String, interning strings: Interner? = nil) throws -> ObjectInfo {
        guard var name else { throw StorageError.unknown(status: 200, message: "object resource without a name") }
        if !stripPrefix.isEmpty, name.hasPrefix(stripPrefix) { name = String(name.dropFirst(stripPrefix.count)) }
        let s = strings ?? Interner()
        // Keys repeat across objects (a tool's mtime key): one copy of each.
        var custom: [String: String] = [:]
        for (k, v) in metadata ?? [:] { if let v { custom[s[k] ?? k] = v } }
        let created = timeCreated.flatMap(RFC3339.parse)
        // Equal for an object never changed after its upload: parsed once.
        let updatedDate = updated == timeCreated ? created : updated.flatMap(RFC3339.parse)
        func p(_ v: String?) -> String? { v?.isEmpty == false ? v : nil }  // "" is not set (ObjectResource.property)
        let writable = WritableMetadata(cacheControl: s[p(cacheControl)], contentDisposition: s[p(contentDisposition)],
                                        contentEncoding: s[p(contentEncoding)], contentLanguage: s[p(contentLanguage)],
                                        contentType: s[p(contentType)], customMetadata: s[custom])
        return ObjectInfo(bucket: s[bucket] ?? "", name: name, generation: generation?.value ?? 0,
                          metageneration: metageneration?.value ?? 1, size: size?.value ?? 0,
                          timeCreated: created ?? updatedDate ?? Date(timeIntervalSince1970: 0),
                          updated: updatedDate ?? created ?? Date(timeIntervalSince1970: 0),
                          md5Hash: md5Hash, crc32c: crc32c, writable: writable)
    }
}

/// A page of `objects.list` with `versions=true`.
struct VersionPageJSON: Decodable {
    var prefixes: [String]?
    var items: [ObjectJSON]?
    var nextPageToken: String?
}

/// The fields of a bucket resource that say what it keeps of the past (`buckets.get`).
struct BucketVersioningJSON: Decodable {
    struct Versioning: Decodable { var enabled: Bool? }
    struct SoftDeletePolicy: Decodable { var retentionDurationSeconds: Int64Text? }
    var versioning: Versioning?
    var softDeletePolicy: SoftDeletePolicy?
}

/// An int64 sent as a JSON string (the API's way) or as a number.
struct Int64Text: Decodable, Equatable {
    let value: Int64
    init(_ value: Int64) { self.value = value }
    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let s = try? c.decode(String.self), let v = Int64(s) { value = v; return }
        value = try c.decode(Int64.self)
    }
}

/// Shares the storage of strings and small maps that repeat across the objects of a list page
/// (bucket, content type, cache control, custom metadata written by one tool): a listing keeps
/// one copy of each instead of one per object. Only for values of at most 256 bytes, and at most
/// 1,000 distinct ones per page, so a page of all-different values costs little. Maps are no
/// longer looked up once the first 64 of a page were all different (a tool's per-object mtime:
/// hashing each map was a tenth of a listing's parse).
final class Interner {
    private var strings: Set<String> = []
    private var maps: Set<[String: String]> = []
    private var mapLookups = 0
    private var mapHits = 0

    subscript(_ s: String?) -> String? {
        guard let s, s.utf8.count > 15, s.utf8.count <= 256 else { return s }  // ≤ 15 bytes: stored inline
        if let i = strings.firstIndex(of: s) { return strings[i] }
        if strings.count < 1000 { strings.insert(s) }
        return s
    }

    subscript(_ m: [String: String]) -> [String: String] {
        guard !m.isEmpty, m.count <= 8, mapHits > 0 || mapLookups < 64 else { return m }
        mapLookups += 1
        if let i = maps.firstIndex(of: m) { mapHits += 1; return maps[i] }
        if maps.count < 1000 { maps.insert(m) }
        return m
    }
}
