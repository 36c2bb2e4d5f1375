import Foundation
import CloudHTTP
import StorageModel

/// Object resources as v0 gives them (firebase-v0.md §2): numbers as strings (or numbers), the
/// download tokens beside the metadata, the emulator's crc32c as a decimal string.
enum V0Metadata {
    /// The GCS custom key that holds download tokens; reserved, never shown, never written.
    static let downloadTokensKey = "firebaseStorageDownloadTokens"

    /// `ObjectInfo` without any download token (neither `downloadTokens` nor the GCS key), and
    /// without a crc32c that is not base64 of four bytes (the emulator's decimal one).
    static func objectInfo(_ json: [String: Any], stripPrefix: String) throws -> ObjectInfo {
        var o = json
        o["downloadTokens"] = nil
        if var m = o["metadata"] as? [String: Any] {
            m[downloadTokensKey] = nil
            o["metadata"] = m
        }
        if let c = o["crc32c"] as? String, Data(base64Encoded: c)?.count != 4 { o["crc32c"] = nil }
        return try ObjectResource.objectInfo(o, stripPrefix: stripPrefix)
    }

    /// Metadata for an upload without the reserved key.
    static func writable(_ w: WritableMetadata) -> WritableMetadata {
        var w = w
        w.customMetadata[downloadTokensKey] = nil
        return w
    }
}
