import Foundation
import StorageModel

/// URL pieces and JSON shapes of the Cloud Storage JSON API (pure functions, no I/O).
public enum GCSJSONAPI {
    /// The object fields `ObjectInfo` uses (the `fields=` selector).
    static let objectFields = "bucket,name,generation,metageneration,size,timeCreated,updated,md5Hash,crc32c,"
        + "cacheControl,contentDisposition,contentEncoding,contentLanguage,contentType,metadata"
    static let listFields = "items(\(objectFields)),prefixes,nextPageToken"

    private static let unreserved: Set<UInt8> = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8))

    /// Percent-encodes everything but RFC 3986 unreserved characters, so an object name is one path
    /// segment (`/` → `%2F`, space → `%20`, `#` → `%23`, `?` → `%3F`, UTF-8 bytes → `%XX`).
    public static func encode(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            if unreserved.contains(b) { out.unicodeScalars.append(UnicodeScalar(b)) } else {
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// A name as one URL path segment: `encode`d, and a name that is `.` or `..` as `%2E` / `%2E%2E`,
    /// which no client or server may take as a dot-segment (`/o/..` would be resolved to the
    /// bucket, `/b/../o` to another path). Every path segment of every URL goes through here.
    public static func segment(_ s: String) -> String {
        let e = encode(s)
        return e == "." || e == ".." ? String(repeating: "%2E", count: e.count) : e
    }

    /// `?k=v&…` for the items that have values (in order), or "" when none do.
    package static func query(_ items: [(String, String?)]) -> String {
        let parts = items.compactMap { k, v in v.map { "\(encode(k))=\(encode($0))" } }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    static func preconditionItems(_ p: Preconditions) -> [(String, String?)] {
        [("ifGenerationMatch", p.ifGenerationMatch.map(String.init)),
         ("ifGenerationNotMatch", p.ifGenerationNotMatch.map(String.init)),
         ("ifMetagenerationMatch", p.ifMetagenerationMatch.map(String.init)),
         ("ifMetagenerationNotMatch", p.ifMetagenerationNotMatch.map(String.init))]
    }

    private static func int64(_ v: Any?) -> Int64? {
        switch v {
        case let s as String: return Int64(s)
        case let n as NSNumber: return n.int64Value
        default: return nil
        }
    }

    /// A writable property of an object resource (`cacheControl`, `contentDisposition`,
    /// `contentEncoding`, `contentLanguage`, `contentType`): the value, or nil when it is not set.
    /// An empty string is not set: each of these is the value of an HTTP header served with the
    /// object's data (Cache-Control, Content-Disposition, Content-Encoding, Content-Language,
    /// Content-Type), where an empty value carries no directive, disposition, coding, language or
    /// media type; and Cloud Storage's own gRPC API (`google.storage.v2.Object`) declares them as
    /// proto3 strings without presence, where "" and unset are one and the same value. So a server
    /// that answers `"cacheControl": ""` for an object without one (fake-gcs-server 1.54 does, in
    /// its PATCH answers) does not make the property look set to "". Custom metadata values are
    /// not touched: "" is a value a custom key can hold.
    static func property(_ v: Any?) -> String? {
        guard let s = v as? String, !s.isEmpty else { return nil }
        return s
    }

    /// An object resource → `ObjectInfo`, with `stripPrefix` removed from the name.
    package static func objectInfo(_ o: [String: Any], stripPrefix: String = "") throws -> ObjectInfo {
        guard var name = o["name"] as? String else {
            throw StorageError.unknown(status: 200, message: "object resource without a name")
        }
        if !stripPrefix.isEmpty, name.hasPrefix(stripPrefix) { name = String(name.dropFirst(stripPrefix.count)) }
        var custom: [String: String] = [:]
        if let m = o["metadata"] as? [String: Any] {
            for (k, v) in m where !(v is NSNull) { custom[k] = (v as? String) ?? "\(v)" }
        }
        let created = (o["timeCreated"] as? String).flatMap(RFC3339.parse)
        let updated = (o["updated"] as? String).flatMap(RFC3339.parse)
        let writable = WritableMetadata(
            cacheControl: property(o["cacheControl"]), contentDisposition: property(o["contentDisposition"]),
            contentEncoding: property(o["contentEncoding"]), contentLanguage: property(o["contentLanguage"]),
            contentType: property(o["contentType"]), customMetadata: custom)
        return ObjectInfo(bucket: (o["bucket"] as? String) ?? "", name: name,
                          generation: int64(o["generation"]) ?? 0, metageneration: int64(o["metageneration"]) ?? 1,
                          size: int64(o["size"]) ?? 0,
                          timeCreated: created ?? updated ?? Date(timeIntervalSince1970: 0),
                          updated: updated ?? created ?? Date(timeIntervalSince1970: 0),
                          md5Hash: o["md5Hash"] as? String, crc32c: o["crc32c"] as? String, writable: writable)
    }

    /// The PATCH body: only named fields; `.remove` and nil custom values as JSON null.
    public static func patchBody(_ p: MetadataPatch) -> Data {
        var o: [String: Any] = [:]
        func put(_ key: String, _ c: FieldChange<String>) {
            switch c {
            case .keep: break
            case .set(let v): o[key] = v
            case .remove: o[key] = NSNull()
            }
        }
        put("cacheControl", p.cacheControl)
        put("contentDisposition", p.contentDisposition)
        put("contentEncoding", p.contentEncoding)
        put("contentLanguage", p.contentLanguage)
        put("contentType", p.contentType)
        if !p.customMetadata.isEmpty {
            var m: [String: Any] = [:]
            for (k, v) in p.customMetadata { m[k] = v.map { $0 as Any } ?? NSNull() }
            o["metadata"] = m
        }
        return (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
    }

    /// An object resource for uploads and rewrites: the set writable fields (and the name, when given).
    /// Written by hand (`JSONText`): every upload sends one.
    public static func resourceBody(name: String?, _ w: WritableMetadata) -> Data {
        var o: [(String, JSONText.Value)] = []
        for (k, v) in [("name", name), ("cacheControl", w.cacheControl), ("contentDisposition", w.contentDisposition),
                       ("contentEncoding", w.contentEncoding), ("contentLanguage", w.contentLanguage),
                       ("contentType", w.contentType)] {
            if let v { o.append((k, .string(v))) }
        }
        if !w.customMetadata.isEmpty { o.append(("metadata", JSONText.strings(w.customMetadata))) }
        return JSONText.object(o)
    }

    /// Parses a `Range: bytes=0-N` header of a 308 answer into the number of bytes persisted.
    static func persistedBytes(rangeHeader: String?) -> Int64 {
        guard let h = rangeHeader?.trimmingCharacters(in: .whitespaces), h.hasPrefix("bytes=") else { return 0 }
        let parts = h.dropFirst(6).split(separator: "-")
        guard parts.count == 2, let last = Int64(parts[1]) else { return 0 }
        return last + 1
    }
}
