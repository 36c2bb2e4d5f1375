import Foundation
import StorageModel

/// The upload of one complete file an earlier run left unsaved (in lost+found), as a remount on
/// the same cache directory and `bucketfs recover` make it (docs/OPERATING.md, "lost+found, and
/// recovering from it"): nothing when the bucket has the same content; else an upload with the
/// file's metadata on condition that the object is still the generation the file was written
/// over (or absent, for a file created in the mount): a newer object is never replaced.
public enum RecoveredUpload {
    public enum Outcome: Equatable, Sendable {
        /// Uploaded (the new generation; nil for a dry run).
        case uploaded(Int64?)
        /// The bucket has this content already (the crash came after the upload).
        case alreadyThere
        /// The bucket has a newer object than the one the file was written over: left.
        case newer(Int64)
    }

    /// Uploads `e` (unless `dryRun`) and removes it from lost+found when the bucket has it.
    public static func run(_ e: LostEntry, to store: any ObjectStore, contentTypes: ContentTypePolicy,
                           dryRun: Bool = false) async throws -> Outcome {
        let object = e.record.object
        if let there = try await metadata(object, store) {
            if sameContent(e, there) {
                if !dryRun { e.remove() }
                return .alreadyThere
            }
            if there.generation != e.record.baseGeneration { return .newer(there.generation) }
        } else if e.record.baseGeneration != 0 {
            // Written over an object that is gone since: someone else deleted it; not brought back.
            return .newer(0)
        }
        if dryRun { return .uploaded(nil) }
        var meta = e.record.metadata
        if meta.contentType == nil { meta.contentType = contentTypes.type(for: object) }
        do {
            let info = try await store.write(object, from: .file(path: e.path), metadata: meta,
                                             preconditions: Preconditions(ifGenerationMatch: e.record.baseGeneration))
            e.remove()
            return .uploaded(info.generation)
        } catch StorageError.preconditionFailed {
            // Someone wrote first, or an upload of this very content that was in flight at the
            // crash landed meanwhile: the second is no reason to keep the file.
            let now = try await metadata(object, store)
            if let now, sameContent(e, now) {
                e.remove()
                return .alreadyThere
            }
            return .newer(now?.generation ?? 0)
        }
    }

    static func metadata(_ object: String, _ store: any ObjectStore) async throws -> ObjectInfo? {
        do { return try await store.getMetadata(object) } catch StorageError.objectNotFound { return nil }
    }

    static func sameContent(_ e: LostEntry, _ there: ObjectInfo) -> Bool {
        guard let md5 = e.md5 else { return false }
        return there.md5Hash == md5 && there.size == e.bytes
    }
}
