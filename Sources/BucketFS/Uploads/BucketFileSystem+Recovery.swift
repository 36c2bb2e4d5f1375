import Foundation
import Logging
import StorageModel

/// What an earlier run left unsaved in this cache directory (docs/OPERATING.md, "lost+found, and
/// recovering from it"): `init` found its stage files by name only (`StagingArea.findLeftovers`,
/// CrashLeftovers.swift); here, in the background while the mount serves, the complete ones are
/// uploaded from where they lie, or found in the bucket, and the rest go to lost+found.
extension BucketFileSystem {
    /// First each leftover is sorted, a batch at a time off the async threads: one never dirty
    /// goes, a cut-off one (not closed, or not the size it had at close) is moved into lost+found
    /// and logged at error level. Then each complete one (closed before the crash, its size as
    /// at close) is uploaded as `bucketfs recover` would (`RecoveredUpload`): not at all when the
    /// bucket has the same md5 and size (the crash came after its upload; logged at notice),
    /// else with its metadata on condition that the object is still the one it was written
    /// over (logged at notice); either way its stage file then goes. What the bucket holds newer,
    /// or what cannot be uploaded, is moved into lost+found, logged at error level with the
    /// command that uploads it. Up to `uploadConcurrency` at once, each under its own
    /// `--op-timeout` (docs/SEMANTICS.md §5.2). A read-only mount uploads nothing and keeps
    /// them all. Cancelled (the unmount), it stops: what is not done yet stays as stage files,
    /// for the next mount or `bucketfs recover`.
    public func settleRecovered(recoverCommand: String) async {
        guard !leftovers.isEmpty else { return }
        let staging = staging
        var complete: [String] = []
        var next = 0
        while next < leftovers.count, !Task.isCancelled {
            let batch = Array(leftovers[next..<min(next + Self.sortBatch, leftovers.count)])
            next += batch.count
            complete += await Self.offAsyncThreads {
                batch.compactMap { name -> String? in
                    guard let l = staging.readLeftover(name) else { return nil }
                    if l.complete { return name }
                    _ = staging.moveLeftover(l)
                    return nil
                }
            }
        }
        let unsorted = leftovers.count - next
        let width = max(1, config.uploadConcurrency)
        var uploaded = 0
        var cut = 0
        next = 0
        await withTaskGroup(of: Settled.self) { group in
            func add() {
                guard next < complete.count, !Task.isCancelled else { return }
                let name = complete[next]
                next += 1
                group.addTask { await self.settle(name, recoverCommand: recoverCommand) }
            }
            for _ in 0..<width { add() }
            while let done = await group.next() {
                if done == .uploaded { uploaded += 1 }
                if done == .left { cut += 1 }
                add()
            }
        }
        let left = unsorted + complete.count - next + cut
        if left > 0 {
            logger.error("the mount ended before \(left) file(s) an earlier mount left unsaved were uploaded: they stay in \(config.cacheDirectory) as stage files, for the next mount on it; or upload them with `\(recoverCommand)`")
        }
        if uploaded > 0 {
            logger.notice("uploaded \(uploaded) of \(complete.count) complete file(s) an earlier mount of this cache directory left unsaved")
        }
    }

    /// Leftovers sorted per trip off the async threads: a cancellation is seen between batches.
    static let sortBatch = 256

    /// Blocking disk work on a dispatch thread, so that the async threads keep serving.
    static func offAsyncThreads<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { c in
            DispatchQueue.global(qos: .utility).async { c.resume(returning: work()) }
        }
    }

    /// How one complete leftover ended.
    enum Settled { case uploaded, settled, left }

    /// One complete leftover: uploaded now; settled otherwise (in the bucket already, or kept
    /// in lost+found); or left as it was, when the mount ends during its upload (an upload cut
    /// by the unmount is no reason to give up on it: the next mount tries again).
    private func settle(_ name: String, recoverCommand: String) async -> Settled {
        let staging = staging
        guard let found = await Self.offAsyncThreads({ staging.leftoverToUpload(name) }) else { return .settled }
        let (l, e) = found
        defer { staging.leftovers.done(name) }
        let object = l.record.object
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
                return .settled
            case .uploaded(let g)?:
                logger.notice("uploaded '\(object)' (\(e.bytes) bytes, generation \(g.map(String.init) ?? "?")), left unsaved by an earlier mount of this cache directory (crash or kill after its close)")
                return .uploaded
            case .beside(let name, let g, _)?:  // (not asked for here: the name had moved on)
                logger.notice("uploaded '\(object)' beside it as '\(name)' (\(e.bytes) bytes, generation \(g.map(String.init) ?? "?")), left unsaved by an earlier mount of this cache directory")
                return .uploaded
            case .newer(let g)?:
                why = g == 0 ? "the object it was written over is gone from the bucket" : "the bucket has a newer object (generation \(g))"
            case nil:
                why = "a read-only mount uploads nothing"
            }
        } catch {
            if Task.isCancelled { return .left }
            why = "it could not be uploaded: \(error)"
        }
        let kept = await Self.offAsyncThreads { staging.moveLeftover(l) }
        logger.error("recovered unsaved data of '\(object)' (\(e.bytes) bytes, complete: closed before the mount ended; \(why)) from an earlier mount that did not finish uploading it: kept in \(kept?.path ?? l.path); upload it with `\(recoverCommand)`")
        return .settled
    }
}

extension StagingArea {
    /// For `bucketfs recover`: takes the directory (its lock, held while the result lives; refused
    /// when a mount holds it) and moves the stage files an earlier run left into lost+found.
    public static func openForRecovery(_ directory: String, logger: Logger) throws(CacheDirectoryError) -> StagingArea {
        let s = try StagingArea(directory: directory, bucket: "", logger: logger, clock: .real)
        _ = s.recoverOrphans()
        return s
    }

    public var lostAndFoundPath: String { lostAndFound }
}

extension BucketFileSystem {
    /// What one entry of the mount's own lost+found became (`recoverOwnLostAndFound`).
    public struct RecoveredEntry: Sendable {
        public let object: String
        public let path: String
        public let bytes: Int64
        /// Nil for a cut-off entry (never uploaded), else what `RecoveredUpload` did.
        public let outcome: RecoveredUpload.Outcome?
        public let error: String?
    }

    /// Recovery through the running mount (docs/OPERATING.md, "The recovery runbook"): each
    /// complete entry of this mount's lost+found is uploaded with this mount's store, as
    /// `bucketfs recover` would (with its metadata, never over a newer object but beside it, as
    /// `NAME.recovered-TIME`; removed when the bucket has it), while the mount serves. Cut-off
    /// entries are listed and left. Each upload runs under its own `--op-timeout`.
    public func recoverOwnLostAndFound() async -> [RecoveredEntry] {
        let (entries, _) = LostEntry.all(in: staging.lostAndFound)
        var out: [RecoveredEntry] = []
        for e in entries {
            guard e.complete else {
                out.append(RecoveredEntry(object: e.record.object, path: e.path, bytes: e.bytes, outcome: nil, error: nil))
                continue
            }
            do {
                let outcome = try await OperationContext.$clock.withValue(operationClock()) {
                    try await RecoveredUpload.run(e, to: store, contentTypes: config.contentTypes, besideNewer: true)
                }
                if case .beside(let name, let g?, let winner) = outcome {
                    logger.notice("uploaded '\(e.record.object)' (\(e.bytes) bytes) from \(e.path) beside it, as '\(name)' (generation \(g)), recovered through the running mount: the name had moved on (generation \(winner) now)")
                } else if case .uploaded(let g) = outcome {
                    logger.notice("uploaded '\(e.record.object)' (\(e.bytes) bytes, generation \(g.map(String.init) ?? "?")) from \(e.path), recovered through the running mount")
                }
                out.append(RecoveredEntry(object: e.record.object, path: e.path, bytes: e.bytes, outcome: outcome, error: nil))
            } catch {
                out.append(RecoveredEntry(object: e.record.object, path: e.path, bytes: e.bytes, outcome: nil, error: "\(error)"))
            }
        }
        return out
    }
}
