import Foundation
import StorageModel

/// What a versioned listing must say before it is shown as a past (docs/SEMANTICS.md §10.1,
/// §10.3): every generation of a name but the live one has a `timeDeleted`, the live one (none)
/// is the newest, and it is the generation a read of the name gets. A server that keeps old
/// generations without their `timeDeleted`, or drops a deleted generation and leaves the older
/// ones looking live, cannot say what was live when: its listing is reported, by name, never
/// shown as a moment.
public enum VersionRules {
    /// One name whose generations break the rules, and how.
    public enum Fault: Sendable, Equatable {
        /// Several generations listed without a `timeDeleted` (only the live one may lack it).
        case severalLive(name: String, generations: [Int64])
        /// The generation listed without a `timeDeleted` is older than one listed with it.
        case liveNotNewest(name: String, live: Int64, newest: Int64)
        /// The generation listed as live is not the name's live object (nil: none listed as
        /// live, or no live object), asked again after the listing.
        case liveDiffers(name: String, listed: Int64?, live: Int64?)

        public var name: String {
            switch self {
            case .severalLive(let n, _), .liveNotNewest(let n, _, _), .liveDiffers(let n, _, _): return n
            }
        }

        /// What the server sent, in words.
        public var description: String {
            switch self {
            case .severalLive(let n, let gs):
                return "'\(n)': generations \(gs.map(String.init).joined(separator: ", ")) are all listed without a timeDeleted (only the live generation may lack one)"
            case .liveNotNewest(let n, let live, let newest):
                return "'\(n)': generation \(live) is listed without a timeDeleted, as live, but the newer generation \(newest) is listed as deleted"
            case .liveDiffers(let n, let listed?, nil):
                return "'\(n)': generation \(listed) is listed as live (no timeDeleted), but the name has no live object: it was deleted and the listing does not say when"
            case .liveDiffers(let n, let listed?, let live?):
                return "'\(n)': generation \(listed) is listed as live (no timeDeleted), but the live object is generation \(live)"
            case .liveDiffers(let n, nil, let live):
                return "'\(n)': the live object (generation \(live.map(String.init) ?? "none")) is not listed as live"
            }
        }
    }

    /// The faults a listing shows on its own, by name in UTF-8 byte order (versions of one name
    /// may come in any order).
    public static func faults(_ versions: [ObjectVersion]) -> [Fault] {
        var byName: [String: [ObjectVersion]] = [:]
        for v in versions { byName[v.info.name, default: []].append(v) }
        return byName.keys.sorted(by: PastSnapshot.byteLess).compactMap { fault($0, byName[$0]!) }
    }

    /// The fault of one name's generations, if any.
    /// (A generation listed twice counts once: fake-gcs-server's versioned pages repeat.)
    public static func fault(_ name: String, _ generations: [ObjectVersion]) -> Fault? {
        let undeleted = Set(generations.filter { $0.timeDeleted == nil }.map(\.info.generation)).sorted()
        if undeleted.count > 1 { return .severalLive(name: name, generations: undeleted) }
        if let live = undeleted.first, let newest = generations.map(\.info.generation).max(), newest > live {
            return .liveNotNewest(name: name, live: live, newest: newest)
        }
        return nil
    }

    /// The generation of `name` listed as live (no `timeDeleted`), if exactly one is.
    static func listedLive(_ generations: [ObjectVersion]) -> Int64? {
        let undeleted = Set(generations.filter { $0.timeDeleted == nil }.map(\.info.generation))
        return undeleted.count == 1 ? undeleted.first : nil
    }
}

/// A versioned listing that breaks `VersionRules`: thrown instead of a past, naming what the
/// server sent.
public struct BrokenVersionListing: Error, CustomStringConvertible, Sendable {
    /// The faults found (the first ones, each checked again after the listing).
    public let faults: [VersionRules.Fault]
    /// Names suspected and not checked again once a fault was confirmed.
    public let more: Int
    /// The prefix listed ("" for the whole bucket or mount).
    public let prefix: String

    public init(faults: [VersionRules.Fault], more: Int = 0, prefix: String) {
        self.faults = faults
        self.more = more
        self.prefix = prefix
    }

    public var description: String {
        let shown = faults.prefix(3).map(\.description).joined(separator: "; ")
        let others = faults.count - min(3, faults.count) + more
        let what = prefix.isEmpty ? "the bucket" : "'\(prefix)'"
        return "the server's versioned listing of \(what) breaks the versioning rules, so it cannot say what was live when: "
            + shown + (others > 0 ? "; and \(others) more name(s)" : "")
            + ". Nothing is shown or restored from it: a bucket that keeps versions lists every generation but the live one with its timeDeleted,"
            + " and keeps a deleted generation (docs/RESTORE.md, \"A listing that breaks the rules\")"
    }
}
