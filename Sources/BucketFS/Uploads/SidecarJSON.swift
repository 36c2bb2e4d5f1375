import Foundation
import StorageModel

/// A stage's sidecar as JSON text (`JSONText`: written by hand, keys in byte order). Every
/// create and every close writes one. Read back with `JSONSerialization` like any sidecar
/// (`StageRecord(json:)`).
enum SidecarJSON {
    /// `record.json` with `created` (RFC 3339).
    static func data(_ record: StageRecord, created: String) -> Data {
        var fields: [(String, JSONText.Value)] = [
            ("baseGeneration", .int(record.baseGeneration)), ("bucket", .string(record.bucket)),
            ("closed", .bool(record.closed)), ("created", .string(created)),
            ("metadata", .object(metadata(record.metadata))), ("object", .string(record.object)),
        ]
        if let size = record.size { fields.append(("size", .int(size))) }
        return JSONText.object(fields)
    }

    /// `StageRecord.encode(m)`, typed.
    static func metadata(_ m: WritableMetadata) -> [(String, JSONText.Value)] {
        var o: [(String, JSONText.Value)] = [("customMetadata", JSONText.strings(m.customMetadata))]
        for (k, v) in [("cacheControl", m.cacheControl), ("contentDisposition", m.contentDisposition),
                       ("contentEncoding", m.contentEncoding), ("contentLanguage", m.contentLanguage),
                       ("contentType", m.contentType), ("mode", m.customMetadata[PosixAttributes.modeKey]),
                       ("uid", m.customMetadata[PosixAttributes.uidKey]), ("gid", m.customMetadata[PosixAttributes.gidKey]),
                       ("mtime", m.customMetadata[XattrName.mtimeKey])] {
            if let v { o.append((k, .string(v))) }
        }
        return o
    }
}
