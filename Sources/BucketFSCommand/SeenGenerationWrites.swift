import Foundation
import StorageModel

/// The command line's writes (`put`, `rm`, `meta set|rm`), each sent with the generation (or
/// metageneration) it saw as its precondition, as the mount's are: the server refuses it (412)
/// if the object changed in between, so a write whose answer is lost can be sent again safely,
/// and a 503 or a reset is retried instead of failing the command (docs/SEMANTICS.md §5.7).
/// What the user asked for stays what happens: `put` still replaces whatever is there and `rm`
/// still deletes it. When another writer changed the object between the look and the write, the
/// object is looked at again and the write repeated, a few times.
enum SeenGenerationWrites {
    /// Looks at the object at most this many times (another writer changing it each time in between).
    static let looks = 5

    /// An upload of `name` over whatever generation is there (`ifGenerationMatch=0` when there
    /// is none); with `noClobber`, only when there is none (a 412 then says it exists).
    static func put<T>(_ store: any ObjectStore, _ name: String, noClobber: Bool,
                       _ upload: (Preconditions) async throws -> T) async throws -> T {
        if noClobber { return try await upload(.doesNotExist) }
        var look = 0
        while true {
            look += 1
            let seen = try await generation(store, name) ?? 0
            do {
                return try await upload(Preconditions(ifGenerationMatch: seen))
            } catch StorageError.preconditionFailed where look < looks {
                continue  // written or deleted by someone else in between: look again
            }
        }
    }

    /// Deletes the live generation of `name` (ENOENT, as before, when there is none).
    static func delete(_ store: any ObjectStore, _ name: String) async throws {
        var look = 0
        while true {
            look += 1
            let info = try await store.getMetadata(name)
            do {
                return try await store.delete(name, preconditions: Preconditions(ifGenerationMatch: info.generation))
            } catch StorageError.preconditionFailed where look < looks {
                continue
            }
        }
    }

    /// A PATCH of `name`'s metadata against the metageneration seen.
    static func patch(_ ref: StorageReference, _ patch: MetadataPatch) async throws -> StorageMetadata {
        try StoragePath.validateObjectName(ref.fullPath)
        var look = 0
        while true {
            look += 1
            let info = try await ref.storage.store.getMetadata(ref.fullPath)
            do {
                return try await ref.updateMetadata(patch: patch, preconditions: Preconditions(ifMetagenerationMatch: info.metageneration))
            } catch StorageError.preconditionFailed where look < looks {
                continue
            }
        }
    }

    /// The live generation of `name`, or nil when there is none.
    static func generation(_ store: any ObjectStore, _ name: String) async throws -> Int64? {
        do {
            return try await store.getMetadata(name).generation
        } catch StorageError.objectNotFound {
            return nil
        }
    }
}
