import Foundation
import StorageModel

/// Every version under a prefix, from one versioned listing, checked against `VersionRules`
/// before anything is shown or restored from it (docs/SEMANTICS.md §10.3): the listing's own
/// faults, and, from one live listing of the same prefix, whether each generation listed as
/// live is the one a read gets. A name that looks wrong is asked again (its versions listed
/// anew, its live object twice), so that a change between the listings is not taken for a
/// fault; one confirmed fault throws `BrokenVersionListing`.
public struct PastListing: Sendable {
    public var versions: [ObjectVersion]
    /// The requests it took: the versioned listing's, the live listing's, and the checks'.
    public var requests: Int

    public static func load(_ listing: any VersionListing, live store: any ObjectStore, prefix: String,
                            pageSize: Int = 1000) async throws -> PastListing {
        var requests = 0
        var versions = try await allVersions(listing, prefix: prefix, pageSize: pageSize, requests: &requests)
        var liveNow: [String: Int64] = [:]
        var token: String?
        repeat {
            let page = try await store.list(ListRequest(prefix: prefix, delimiter: nil, maxResults: pageSize, pageToken: token))
            requests += 1
            for item in page.items { liveNow[item.name] = item.generation }
            token = page.nextPageToken
        } while token != nil
        var byName: [String: [ObjectVersion]] = [:]
        for v in versions where v.info.name.utf8.starts(with: prefix.utf8) { byName[v.info.name, default: []].append(v) }
        let suspects = byName.keys.filter { name in
            let gs = byName[name]!
            if VersionRules.fault(name, gs) != nil { return true }
            guard let listed = VersionRules.listedLive(gs) else { return false }
            return liveNow[name] != listed
        }.sorted(by: PastSnapshot.byteLess)
        var replaced: [String: [ObjectVersion]] = [:]
        for (i, name) in suspects.enumerated() {
            let (fresh, fault) = try await check(name, listing, store, pageSize: pageSize, requests: &requests)
            if let fault { throw BrokenVersionListing(faults: [fault], more: suspects.count - i - 1, prefix: prefix) }
            replaced[name] = fresh
        }
        if !replaced.isEmpty {
            // What changed between the listings, as it is now.
            versions = versions.filter { replaced[$0.info.name] == nil } + replaced.values.flatMap { $0 }
        }
        return PastListing(versions: versions, requests: requests)
    }

    static func allVersions(_ listing: any VersionListing, prefix: String, pageSize: Int, exactly name: String? = nil,
                            requests: inout Int) async throws -> [ObjectVersion] {
        var versions: [ObjectVersion] = []
        var token: String?
        repeat {
            let page = try await listing.listVersions(ListRequest(prefix: prefix, delimiter: nil, maxResults: pageSize, pageToken: token))
            requests += 1
            versions += name.map { n in page.versions.filter { $0.info.name == n } } ?? page.versions
            token = page.nextPageToken
        } while token != nil
        return versions
    }

    /// One suspect asked again: the live object, its versions listed anew, the live object once
    /// more. A fault when the fresh versions break the rules, or name another live generation
    /// than the live object both times; else the fresh versions (a change between the listings).
    static func check(_ name: String, _ listing: any VersionListing, _ store: any ObjectStore, pageSize: Int,
                      requests: inout Int) async throws -> ([ObjectVersion], VersionRules.Fault?) {
        let before = try await liveGeneration(name, store)
        let fresh = try await allVersions(listing, prefix: name, pageSize: pageSize, exactly: name, requests: &requests)
        let after = try await liveGeneration(name, store)
        requests += 2
        if let fault = VersionRules.fault(name, fresh) { return (fresh, fault) }
        let listed = VersionRules.listedLive(fresh)
        if before == after, listed != after { return (fresh, .liveDiffers(name: name, listed: listed, live: after)) }
        return (fresh, nil)
    }

    static func liveGeneration(_ name: String, _ store: any ObjectStore) async throws -> Int64? {
        do { return try await store.getMetadata(name).generation } catch StorageError.objectNotFound { return nil }
    }
}
