import Foundation
import StorageModel

/// Object resources as JSON, the shape the Cloud Storage JSON API and Firebase's v0 API share
/// (pure functions, no I/O): an answer's resource as `ObjectInfo`, and the bodies of a PATCH,
/// an upload and a rewrite.
public enum ObjectResource {
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
    package static func property(_ v: Any?) -> String? {
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
}
