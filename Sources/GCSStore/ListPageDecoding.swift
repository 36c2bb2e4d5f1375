import Foundation
import StorageModel

/// A list page decoded with `JSONDecoder` into plain structs: a page of a large listing parses into
/// far fewer, smaller objects than `JSONSerialization`'s dictionaries (the emulator answers a
/// listing of 20,000 objects in one 15 MB page).
struct ListPageJSON: Decodable {
    var prefixes: [String]?
    var items: [ObjectJSON]?
    var nextPageToken: String?
}

/// An object resource; numbers come as strings (int64 in JSON), some servers send numbers.
struct ObjectJSON: Decodable {
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

    func info(stripPrefix: String) throws -> ObjectInfo {
        guard var name else { throw StorageError.unknown(status: 200, message: "object resource without a name") }
        if !stripPrefix.isEmpty, name.hasPrefix(stripPrefix) { name = String(name.dropFirst(stripPrefix.count)) }
        var custom: [String: String] = [:]
        for (k, v) in metadata ?? [:] { if let v { custom[k] = v } }
        let created = timeCreated.flatMap(RFC3339.parse)
        let updatedDate = updated.flatMap(RFC3339.parse)
        let writable = WritableMetadata(cacheControl: cacheControl, contentDisposition: contentDisposition,
                                        contentEncoding: contentEncoding, contentLanguage: contentLanguage,
                                        contentType: contentType, customMetadata: custom)
        return ObjectInfo(bucket: bucket ?? "", name: name, generation: generation?.value ?? 0,
                          metageneration: metageneration?.value ?? 1, size: size?.value ?? 0,
                          timeCreated: created ?? updatedDate ?? Date(timeIntervalSince1970: 0),
                          updated: updatedDate ?? created ?? Date(timeIntervalSince1970: 0),
                          md5Hash: md5Hash, crc32c: crc32c, writable: writable)
    }
}

/// An int64 sent as a JSON string (the API's way) or as a number.
struct Int64Text: Decodable {
    let value: Int64
    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let s = try? c.decode(String.self), let v = Int64(s) { value = v; return }
        value = try c.decode(Int64.self)
    }
}
