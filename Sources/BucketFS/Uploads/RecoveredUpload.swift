import Foundation
import StorageModel

/// The upload of one complete file an earlier run left unsaved (in lost+found), as a remount on
/// the same cache directory and `bucketfs recover` make it (docs/OPERATING.md, "lost+found, and
/// recovering from it"): nothing when the bucket has the same content; else an upload with the
/// file's metadata on condition that the object is still the generation the file was written
/// over (or absent, for a file created in the mount): a newer object is never replaced. When the
/// name has moved on (a lost race's winner, or a delete), `recover` puts the file beside it,
/// under `NAME.recovered-TIME` (`besideName`), never over anything.
public enum RecoveredUpload {
    public enum Outcome: Equatable, Sendable {
        /// Uploaded (the new generation; nil for a dry run).
        case uploaded(Int64?)
        /// The bucket has this content already (the crash came after the upload).
        case alreadyThere
        /// The bucket has a newer object than the one the file was written over (0: none any
        /// more): left.
        case newer(Int64)
        /// The name had moved on (`winner`: its generation now, 0 when deleted): uploaded beside
        /// it as `name` (the new generation; nil for a dry run), or found there already.
        case beside(name: String, generation: Int64?, winner: Int64)
    }

    /// Uploads `e` (unless `dryRun`) and removes it from lost+found when the bucket has it.
    /// `besideNewer`: a file whose name has moved on goes beside it (`besideName`) instead of
    /// staying. `elsewhere`: the store is not the source the file was written for (`recover
    /// --to`), so the generation it was written over means nothing there: the name must be free.
    public static func run(_ e: LostEntry, to store: any ObjectStore, contentTypes: ContentTypePolicy,
                           dryRun: Bool = false, besideNewer: Bool = false, elsewhere: Bool = false) async throws -> Outcome {
        let object = e.record.object
        let base = elsewhere ? 0 : e.record.baseGeneration
        var written = e.record.metadata
        if written.contentType == nil { written.contentType = contentTypes.type(for: object) }
        let meta = written
        func movedOn(_ winner: Int64) async throws -> Outcome {
            guard besideNewer else { return .newer(winner) }
            return try await beside(e, winner: winner, metadata: meta, store: store, dryRun: dryRun)
        }
        if let there = try await metadata(object, store) {
            if sameContent(e, there) {
                if !dryRun { e.remove() }
                return .alreadyThere
            }
            if there.generation != base { return try await movedOn(there.generation) }
        } else if base != 0 {
            // Written over an object that is gone since: someone else deleted it; not brought back
            // under its name.
            return try await movedOn(0)
        }
        if dryRun { return .uploaded(nil) }
        do {
            let info = try await store.write(object, from: .file(path: e.path), metadata: meta,
                                             preconditions: Preconditions(ifGenerationMatch: base))
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
            return try await movedOn(now?.generation ?? 0)
        }
    }

    /// Uploads `e` beside its moved-on name: `besideName`, then `-2` … `-9` after it while a name
    /// holds other content, each with `ifGenerationMatch=0` (nothing is overwritten).
    static func beside(_ e: LostEntry, winner: Int64, metadata: WritableMetadata, store: any ObjectStore,
                       dryRun: Bool) async throws -> Outcome {
        let stem = besideName(e)
        for i in 1...9 {
            let name = i == 1 ? stem : "\(stem)-\(i)"
            if let there = try await self.metadata(name, store) {
                if sameContent(e, there) {
                    if !dryRun { e.remove() }
                    return .beside(name: name, generation: there.generation, winner: winner)
                }
                continue
            }
            if dryRun { return .beside(name: name, generation: nil, winner: winner) }
            do {
                let info = try await store.write(name, from: .file(path: e.path), metadata: metadata,
                                                 preconditions: Preconditions(ifGenerationMatch: 0))
                e.remove()
                return .beside(name: name, generation: info.generation, winner: winner)
            } catch StorageError.preconditionFailed {
                continue  // taken meanwhile: the next name
            }
        }
        throw StorageError.conflict(path: stem, message: "'\(stem)' and its -2 to -9 all hold other content: move one away, or put \(e.path) by hand")
    }

    /// `OBJECT.recovered-YYYYMMDDTHHMMSSZ`: the object's name and when the file was kept (the
    /// milliseconds of its lost+found name, UTC; for a name without them, the file's last change),
    /// so that a second run finds the same name.
    public static func besideName(_ e: LostEntry) -> String {
        var base = (e.path as NSString).lastPathComponent
        if base.hasSuffix(LostEntry.cutOffSuffix) { base = String(base.dropLast(LostEntry.cutOffSuffix.count)) }
        let ms = base.split(separator: ".").last.flatMap { Int64($0) }
        let kept = ms.map { Date(timeIntervalSince1970: Double($0) / 1000) }
            ?? (try? FileManager.default.attributesOfItem(atPath: e.path))?[.modificationDate] as? Date ?? Date(timeIntervalSince1970: 0)
        return e.record.object + ".recovered-" + stamp(kept)
    }

    static func stamp(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970.rounded(.down))
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }

    static func metadata(_ object: String, _ store: any ObjectStore) async throws -> ObjectInfo? {
        do { return try await store.getMetadata(object) } catch StorageError.objectNotFound { return nil }
    }

    static func sameContent(_ e: LostEntry, _ there: ObjectInfo) -> Bool {
        guard let md5 = e.md5 else { return false }
        return there.md5Hash == md5 && there.size == e.bytes
    }
}
