import Foundation
import StorageModel

/// Making a past generation live again (docs/SEMANTICS.md §10.3): a plan
/// compares what was live at a moment with what is live now, from one versioned listing; each
/// restore is a server-side copy of the old generation onto its name, guarded by
/// `ifGenerationMatch` of the live generation seen (0 when the name did not exist), so it never
/// overwrites a change it did not see.
public enum Restorer {
    public enum Step: Sendable, Equatable {
        /// Copy `generation` of `name` over the live generation `over` (0: none now), with
        /// `metadata` when the copy's must differ from the generation's (`pinned`).
        case restore(name: String, generation: Int64, over: Int64, metadata: WritableMetadata?)
        /// The live object already equals the one of the moment (same generation, or same
        /// bytes and metadata): nothing to do.
        case equal(name: String)
        /// Created after the moment: left alone.
        case newer(name: String, live: Int64)
        /// Created after the moment, and removal was asked for (`--delete`): deleted, guarded
        /// by its live generation.
        case remove(name: String, live: Int64)
    }

    public struct Summary: Sendable {
        public var restored: [String] = []
        public var equal: [String] = []
        public var newer: [String] = []
        public var removed: [String] = []
        /// Names a concurrent change reached first: nothing was written to them.
        public var refused: [String] = []
        public var failed: [(name: String, error: String)] = []
        public init() {}
    }

    /// The same bytes and metadata (`past`'s own, or as a restore writes it), so restoring
    /// `past` over `live` would change nothing but the generation.
    public static func same(_ past: ObjectInfo, _ live: ObjectInfo) -> Bool {
        if past.generation == live.generation { return true }
        guard past.size == live.size, live.writable == past.writable || live.writable == pinned(past) else { return false }
        if let x = past.md5Hash, let y = live.md5Hash { return x == y }
        if let x = past.crc32c, let y = live.crc32c { return x == y }
        return false
    }

    /// The metadata a restored copy of `past` gets when it must differ from `past`'s: a copy is
    /// a new object whose `updated` is the copy's time, so a generation without an mtime key
    /// (whose mtime a mount shows as its `updated`) gets its old `updated` time in
    /// `goog-reserved-file-mtime`, in seconds with their fraction, and keeps the mtime it had.
    /// nil: the generation's own metadata, as the copy copies it.
    public static func pinned(_ past: ObjectInfo) -> WritableMetadata? {
        let custom = past.customMetadata
        guard custom[XattrName.mtimeKey] == nil, custom["gcsfuse_mtime"] == nil else { return nil }
        var w = past.writable
        w.customMetadata[XattrName.mtimeKey] = String(past.updated.timeIntervalSince1970)
        return w
    }

    /// The steps that make the live names under the plan's prefix what they were: `past` is what
    /// was live at the moment, `live` what is live now (both of one versioned listing).
    public static func plan(past: [ObjectInfo], live: [ObjectInfo], deleteNewer: Bool) -> [Step] {
        let now = Dictionary(live.map { ($0.name, $0) }, uniquingKeysWith: { a, b in a.generation > b.generation ? a : b })
        let then = Set(past.map(\.name))
        var steps: [Step] = []
        for p in past {
            if let l = now[p.name], same(p, l) { steps.append(.equal(name: p.name)); continue }
            steps.append(.restore(name: p.name, generation: p.generation, over: now[p.name]?.generation ?? 0,
                                  metadata: pinned(p)))
        }
        for l in live where !then.contains(l.name) {
            steps.append(deleteNewer ? .remove(name: l.name, live: l.generation) : .newer(name: l.name, live: l.generation))
        }
        return steps.sorted { PastSnapshot.byteLess(name(of: $0), name(of: $1)) }
    }

    public static func name(of step: Step) -> String {
        switch step {
        case .restore(let n, _, _, _), .equal(let n), .newer(let n, _), .remove(let n, _): return n
        }
    }

    /// One versioned listing of `prefix`, checked against the live names (`PastListing`: a
    /// listing that breaks the versioning rules throws `BrokenVersionListing`, and nothing is
    /// planned from it): what was live at `moment`, and what is live now.
    public static func load(_ listing: any VersionListing, live store: any ObjectStore, prefix: String, moment: Date) async throws
        -> (past: PastSnapshot, live: [ObjectInfo]) {
        let checked = try await PastListing.load(listing, live: store, prefix: prefix)
        let live = checked.versions.filter { $0.isLive && $0.info.name.utf8.starts(with: prefix.utf8) }.map(\.info)
        return (PastSnapshot(moment: moment, scope: prefix, versions: checked.versions, requests: checked.requests), live)
    }

    /// Runs the steps, `concurrency` at a time; `progress` hears of each step done (name, what
    /// happened). A precondition failure is a concurrent change: that name is refused, untouched.
    public static func run(_ steps: [Step], on store: any ObjectStore, concurrency: Int = 8,
                           progress: @escaping @Sendable (String, String) -> Void = { _, _ in }) async -> Summary {
        var summary = Summary()
        await withTaskGroup(of: (Step, String?).self) { group in
            var next = 0
            func add() {
                guard next < steps.count else { return }
                let step = steps[next]
                next += 1
                group.addTask { (step, await perform(step, on: store)) }
            }
            for _ in 0..<max(1, concurrency) { add() }
            while let (step, outcome) = await group.next() {
                let n = name(of: step)
                switch (step, outcome) {
                case (.equal, _): summary.equal.append(n); progress(n, "equal")
                case (.newer, _): summary.newer.append(n); progress(n, "newer")
                case (_, "refused"?): summary.refused.append(n); progress(n, "refused")
                case (_, let e?): summary.failed.append((n, e)); progress(n, "failed")
                case (.restore, nil): summary.restored.append(n); progress(n, "restored")
                case (.remove, nil): summary.removed.append(n); progress(n, "removed")
                }
                add()
            }
        }
        for keyPath in [\Summary.restored, \.equal, \.newer, \.removed, \.refused] {
            summary[keyPath: keyPath].sort(by: PastSnapshot.byteLess)
        }
        summary.failed.sort { PastSnapshot.byteLess($0.name, $1.name) }
        return summary
    }

    /// nil when done; "refused" for a concurrent change; else the error's words.
    static func perform(_ step: Step, on store: any ObjectStore) async -> String? {
        do {
            switch step {
            case .equal, .newer: return nil
            case .restore(let name, let generation, let over, let metadata):
                _ = try await store.copy(from: name, sourceGeneration: generation, to: name, metadata: metadata,
                                         preconditions: Preconditions(ifGenerationMatch: over))
            case .remove(let name, let live):
                try await store.delete(name, preconditions: Preconditions(ifGenerationMatch: live))
            }
            return nil
        } catch StorageError.preconditionFailed {
            return "refused"
        } catch {
            return "\(error)"
        }
    }
}
