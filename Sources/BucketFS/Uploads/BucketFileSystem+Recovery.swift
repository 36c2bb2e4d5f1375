import Foundation
import Logging
import StorageModel

/// What an earlier run left unsaved in this cache directory (docs/OPERATING.md, "lost+found, and
/// recovering from it"): `init` moved its stage files into lost+found, cut-off ones logged at once
/// (StagingArea.recoverOrphans); here the complete ones are uploaded, or found in the bucket.
extension BucketFileSystem {
    /// Each complete file (closed before the crash, its size as at close) is uploaded as
    /// `bucketfs recover` would (`RecoveredUpload`): not at all when the bucket has the same md5
    /// and size (the crash came after its upload; logged at notice), else with its metadata on
    /// condition that the object is still the one it was written over, and then removed from
    /// lost+found (logged at notice). What the bucket holds newer, or what cannot be uploaded,
    /// stays in lost+found, logged at error level with the command that uploads it. Up to
    /// `uploadConcurrency` at once, each under its own `--op-timeout` (docs/SEMANTICS.md §5.2).
    /// A read-only mount uploads nothing and keeps them all.
    public func settleRecovered(recoverCommand: String) async {
        guard !recovered.isEmpty else { return }
        let width = max(1, config.uploadConcurrency)
        let entries = recovered
        var uploaded = 0
        var next = 0
        await withTaskGroup(of: Bool.self) { group in
            func add() {
                guard next < entries.count, !Task.isCancelled else { return }
                let e = entries[next]
                next += 1
                group.addTask { await self.settle(e, recoverCommand: recoverCommand) }
            }
            for _ in 0..<width { add() }
            while let done = await group.next() {
                if done { uploaded += 1 }
                add()
            }
        }
        if Task.isCancelled, next < entries.count {
            logger.error("the mount ended before \(entries.count - next) complete file(s) an earlier mount left unsaved were uploaded: they stay in \(config.lostAndFound); upload them with `\(recoverCommand)`")
        }
        if uploaded > 0 {
            logger.notice("uploaded \(uploaded) of \(entries.count) complete file(s) an earlier mount of this cache directory left unsaved")
        }
    }

    /// One complete entry; true when it was uploaded now.
    private func settle(_ e: LostEntry, recoverCommand: String) async -> Bool {
        let object = e.record.object
        var why: String
        do {
            let outcome: RecoveredUpload.Outcome? = try await OperationContext.$clock.withValue(operationClock()) {
                if config.readOnly {
                    guard let there = try await RecoveredUpload.metadata(object, store), RecoveredUpload.sameContent(e, there) else {
                        return nil
                    }
                    e.remove()
                    return .alreadyThere
                }
                return try await RecoveredUpload.run(e, to: store, contentTypes: config.contentTypes)
            }
            switch outcome {
            case .alreadyThere?:
                logger.notice("'\(object)' was left unsaved by an earlier mount (crash or kill during its close), and the bucket has it with the same content (md5 \(e.md5 ?? "?"), \(e.bytes) bytes): nothing to recover")
                return false
            case .uploaded(let g)?:
                logger.notice("uploaded '\(object)' (\(e.bytes) bytes, generation \(g.map(String.init) ?? "?")), left unsaved by an earlier mount of this cache directory (crash or kill after its close)")
                return true
            case .newer(let g)?:
                why = g == 0 ? "the object it was written over is gone from the bucket" : "the bucket has a newer object (generation \(g))"
            case nil:
                why = "a read-only mount uploads nothing"
            }
        } catch {
            why = "it could not be uploaded: \(error)"
        }
        logger.error("recovered unsaved data of '\(object)' (\(e.bytes) bytes, complete: closed before the mount ended; \(why)) from an earlier mount that did not finish uploading it: kept in \(e.path); upload it with `\(recoverCommand)`")
        return false
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
