import Foundation
import Logging
import StorageModel

/// What an earlier run left unsaved in this cache directory (docs/OPERATING.md, "lost+found, and
/// recovering from it"): `init` moved its stage files into lost+found, cut-off ones logged at once
/// (StagingArea.recoverOrphans); here the complete ones are checked against the bucket.
extension BucketFileSystem {
    /// A complete file the bucket already has with the same md5 and size (the crash came during
    /// close, after its upload succeeded) is not kept and raises no alarm (logged at notice); each
    /// other one stays in lost+found, logged at error level with the command that uploads it.
    /// Every check runs under one `--op-timeout`; one that fails keeps the file.
    public func settleRecovered(recoverCommand: String) async {
        guard !recovered.isEmpty else { return }
        let end = ContinuousClock.now + .milliseconds(Int64(config.operationTimeout * 1000))
        for e in recovered {
            let object = e.record.object
            var there: ObjectInfo? = nil
            var why = ""
            do {
                there = try await OperationContext.$deadline.withValue(end) { try await store.getMetadata(object) }
            } catch StorageError.objectNotFound {
                why = "not in the bucket"
            } catch {
                why = "the bucket could not be asked: \(error)"
            }
            if let there, let md5 = e.md5, there.md5Hash == md5, there.size == e.bytes {
                e.remove()
                logger.notice("'\(object)' was left unsaved by an earlier mount (crash or kill during its close), and the bucket has it with the same content (md5 \(md5), \(e.bytes) bytes): nothing to recover")
                continue
            }
            if let there { why = "the bucket has other content (generation \(there.generation), \(there.size) bytes)" }
            logger.error("recovered unsaved data of '\(object)' (\(e.bytes) bytes, complete: closed before the mount ended; \(why)) from an earlier mount that did not finish uploading it: kept in \(e.path); upload it with `\(recoverCommand)`")
        }
    }
}

extension StagingArea {
    /// For `bucketfs recover`: takes the directory (its lock, held while the result lives; refused
    /// when a mount holds it) and moves the stage files an earlier run left into lost+found, as a
    /// mount would.
    public static func openForRecovery(_ directory: String, logger: Logger) throws(CacheDirectoryError) -> StagingArea {
        let s = try StagingArea(directory: directory, bucket: "", logger: logger, now: { Date().timeIntervalSince1970 })
        _ = s.recoverOrphans()
        return s
    }

    public var lostAndFoundPath: String { lostAndFound }
}
