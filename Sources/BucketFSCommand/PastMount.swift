import BucketFS
import Foundation
import Logging
import StorageModel

/// `mount --at TIME` and the library commands' `--at`: the store beneath wrapped in a view of
/// the bucket at that moment (docs/RESTORE.md "The bucket as it was").
enum PastMount {
    /// Why a source cannot show its past (no versions kept, or none shown by its API).
    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    /// The read-only view of `store` at `at`, after checking that the bucket keeps old versions.
    static func view(_ store: any ObjectStore, at: String, source: String, scope: String = "",
                     logger: Logger) async throws -> PastStore {
        let moment = try PointInTime(parsing: at, now: BucketClock.real.date)
        let listing = try await keptPast(store, source: source)
        logger.info("showing \(source) as it was at \(moment)")
        return PastStore(base: store, listing: listing, moment: moment.date, scope: scope, logger: logger)
    }

    /// The store's versioned listing, or a refusal naming what the bucket keeps.
    static func keptPast(_ store: any ObjectStore, source: String) async throws -> any VersionListing {
        guard let listing = store.versions else { throw Refusal(description: KeptPast.none(source: source)) }
        if let refusal = KeptPast.refusal(try await listing.versioningState(), source: source) {
            throw Refusal(description: refusal)
        }
        return listing
    }

    /// The command line with a duration after `--at` replaced by the time it means now, so the
    /// mount process started in the background shows the moment the user asked for.
    static func pinned(_ args: [String], now: Date = Date()) -> [String] {
        var out: [String] = []
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--at", i + 1 < args.count, let t = try? PointInTime(parsing: args[i + 1], now: now) {
                out += ["--at", PointInTime.format(t.date)]
                i += 2
                continue
            }
            if a.hasPrefix("--at="), let t = try? PointInTime(parsing: String(a.dropFirst(5)), now: now) {
                out.append("--at=" + PointInTime.format(t.date))
            } else {
                out.append(a)
            }
            i += 1
        }
        return out
    }
}
