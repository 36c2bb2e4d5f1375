import Foundation
import StorageModel

/// URL pieces and JSON shapes of the Cloud Storage JSON API alone (pure functions, no I/O); the
/// object resource and the URL encoding it shares with Firebase's v0 API are `ObjectResource`
/// and `CloudURL` (CloudHTTP).
enum GCSJSONAPI {
    /// The object fields `ObjectInfo` uses (the `fields=` selector).
    static let objectFields = "bucket,name,generation,metageneration,size,timeCreated,updated,md5Hash,crc32c,"
        + "cacheControl,contentDisposition,contentEncoding,contentLanguage,contentType,metadata"
    static let listFields = "items(\(objectFields)),prefixes,nextPageToken"

    static func preconditionItems(_ p: Preconditions) -> [(String, String?)] {
        [("ifGenerationMatch", p.ifGenerationMatch.map(String.init)),
         ("ifGenerationNotMatch", p.ifGenerationNotMatch.map(String.init)),
         ("ifMetagenerationMatch", p.ifMetagenerationMatch.map(String.init)),
         ("ifMetagenerationNotMatch", p.ifMetagenerationNotMatch.map(String.init))]
    }

    /// Parses a `Range: bytes=0-N` header of a 308 answer into the number of bytes persisted.
    static func persistedBytes(rangeHeader: String?) -> Int64 {
        guard let h = rangeHeader?.trimmingCharacters(in: .whitespaces), h.hasPrefix("bytes=") else { return 0 }
        let parts = h.dropFirst(6).split(separator: "-")
        guard parts.count == 2, let last = Int64(parts[1]) else { return 0 }
        return last + 1
    }
}
