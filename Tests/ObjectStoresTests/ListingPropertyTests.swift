import Foundation
import TestSupport
import PropertyBased
@testable import ObjectStores
import StorageModel
import Testing


/// The plain model of `objects.list` the store is checked against.
enum ListingModel {
    static func byteSorted(_ s: some Sequence<String>) -> [String] {
        s.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// The JSON API answer: prefixes keep their delimiter (`/` or none), items are names.
    static func list(_ names: Set<String>, prefix: String, delimiter: String?) -> (prefixes: [String], items: [String]) {
        precondition(delimiter == nil || delimiter == "/")
        var prefixes = Set<String>()
        var items: [String] = []
        for n in names where n.utf8.starts(with: prefix.utf8) {
            let rest = Array(n.utf8.dropFirst(prefix.utf8.count))
            if delimiter != nil, let i = rest.firstIndex(of: UInt8(ascii: "/")) {
                prefixes.insert(prefix + String(decoding: rest[...i], as: UTF8.self))
            } else {
                items.append(n)
            }
        }
        return (byteSorted(prefixes), byteSorted(items))
    }

    /// What the Firebase-shaped facade shows for `fullPath`.
    static func facade(_ names: Set<String>, fullPath: String) -> (prefixes: [String], items: [String]) {
        let raw = list(names, prefix: fullPath.isEmpty ? "" : fullPath + "/", delimiter: "/")
        let prefixes = raw.prefixes.map { String($0.dropLast()) }.filter { !$0.isEmpty && !$0.hasSuffix("/") && !$0.contains("//") }
        let items = raw.items.filter { !$0.contains("//") && !$0.hasSuffix("/") }
        return (prefixes, items)
    }
}

/// A page walk: what it returned, page by page.
struct Walk {
    var prefixes: [String] = []
    var items: [String] = []
    var pages = 0
}

@Suite struct ListingPropertyTests {
    let segments = ["a", "b", "B", "dir", "d2", "é", "x y", "0", "~", "", "dir.x"]

    func randomName(_ rng: inout SplitMix64, root: String) -> String {
        let depth = Int.random(in: 1...3, using: &rng)
        var segs = (0..<depth).map { _ in segments.randomElement(using: &rng)! }
        if segs.last == "" { segs[segs.count - 1] = "f" }
        var name = root + "/" + segs.joined(separator: "/")
        if Int.random(in: 0..<8, using: &rng) == 0 { name += "/" }
        return name
    }

    /// Walks pages until the token runs out, running `between` after each page but the last.
    func walk(pageSize: Int, fetch: (Int, String?) async throws -> (prefixes: [String], items: [String], token: String?),
                     between: () async throws -> Void = {}) async throws -> Walk {
        var w = Walk()
        var token: String?
        repeat {
            let page = try await fetch(pageSize, token)
            #expect(page.prefixes.count + page.items.count <= pageSize)
            w.prefixes += page.prefixes
            w.items += page.items
            w.pages += 1
            token = page.token
            try #require(w.pages <= 2000, "the walk does not end")
            if token != nil { try await between() }
        } while token != nil
        return w
    }

    /// `key` gives the name the store sorted by (the facade shows prefixes without their `/`).
    func checkOrderedAndUnique(_ xs: [String], _ what: String, key: (String) -> String = { $0 }) {
        #expect(Set(xs).count == xs.count, "duplicate \(what) in one walk: \(xs)")
        let keys = xs.map(key)
        #expect(keys == ListingModel.byteSorted(keys), "\(what) out of byte order: \(xs)")
    }

    @Test func pageWalksEqualListAll() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = try EmbeddedStore(directory: dir.path, bucket: "prop", pageSizeLimit: 1000, durable: false)
        let storage = Storage(store: store)
        let iteration = Counter()
        await propertyCheck(count: 100, input: Gen<UInt64>.value(), Gen.int(in: 1...1000)) { seed, bigPage in
            var rng = SplitMix64(seed: seed)
            let root = "t\(iteration.next())"
            var names = Set<String>()
            for _ in 0..<Int.random(in: 0...40, using: &rng) { names.insert(randomName(&rng, root: root)) }
            for n in names { _ = try await store.write(n, from: .data(Data(n.utf8)), metadata: .init(), preconditions: .none) }

            let smallPage = Int.random(in: 1...4, using: &rng)
            let sub = [root, root + "/dir", root + "/a", root + "/é"].randomElement(using: &rng)!
            let ref = storage.reference().child(sub)
            let expectedFacade = ListingModel.facade(names, fullPath: sub)

            // Through the facade, with a large and a small page size.
            let all = try await ref.listAll()
            #expect(all.prefixes.map(\.fullPath) == expectedFacade.prefixes)
            #expect(all.items.map(\.fullPath) == expectedFacade.items)
            for n in [bigPage, smallPage] {
                let w = try await walk(pageSize: n) { size, token in
                    let r = try await ref.list(maxResults: size, pageToken: token)
                    return (r.prefixes.map(\.fullPath), r.items.map(\.fullPath), r.pageToken)
                }
                #expect(w.prefixes == all.prefixes.map(\.fullPath))
                #expect(w.items == all.items.map(\.fullPath))
            }

            // Directly through the store, with and without a delimiter, prefix not always at a boundary.
            let prefix = [root + "/", root + "/d", root + "/dir/", root + "/a/", root].randomElement(using: &rng)!
            let delimiter: String? = Bool.random(using: &rng) ? "/" : nil
            let expected = ListingModel.list(names, prefix: prefix, delimiter: delimiter)
            for n in [bigPage, smallPage] {
                let w = try await walk(pageSize: n) { size, token in
                    let p = try await store.list(ListRequest(prefix: prefix, delimiter: delimiter, maxResults: size, pageToken: token))
                    return (p.prefixes, p.items.map(\.name), p.nextPageToken)
                }
                #expect(w.prefixes == expected.prefixes)
                #expect(w.items == expected.items)
                let entries = expected.prefixes.count + expected.items.count
                #expect(w.pages == max(1, (entries + n - 1) / n), "pages are full until the last")
            }
        }
    }

    @Test func pageWalksUnderConcurrentChanges() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = try EmbeddedStore(directory: dir.path, bucket: "prop", pageSizeLimit: 1000, durable: false)
        let storage = Storage(store: store)
        let iteration = Counter()
        await propertyCheck(count: 100, input: Gen<UInt64>.value(), Gen.bool) { seed, viaFacade in
            var rng = SplitMix64(seed: seed)
            let root = "c\(iteration.next())"
            var live = Set<String>()
            for _ in 0..<Int.random(in: 0...40, using: &rng) { live.insert(randomName(&rng, root: root)) }
            for n in live { _ = try await store.write(n, from: .data(Data()), metadata: .init(), preconditions: .none) }
            var touched = Set<String>()   // added or removed during the walk
            var everLive = live
            let initial = live
            let pageSize = Int.random(in: 1...5, using: &rng)
            let delimiter: String? = Bool.random(using: &rng) ? "/" : nil
            let prefix = root + "/"

            var mutationRng = SplitMix64(seed: rng.next())
            let mutate: () async throws -> Void = {
                for _ in 0..<Int.random(in: 0...2, using: &mutationRng) {
                    let n = randomName(&mutationRng, root: root)
                    if live.contains(n) { continue }
                    _ = try await store.write(n, from: .data(Data()), metadata: .init(), preconditions: .doesNotExist)
                    live.insert(n); everLive.insert(n); touched.insert(n)
                }
                for _ in 0..<Int.random(in: 0...2, using: &mutationRng) {
                    guard let n = live.randomElement(using: &mutationRng) else { break }
                    try await store.delete(n, preconditions: .none)
                    live.remove(n); touched.insert(n)
                }
            }

            let w: Walk
            let mustSee: (prefixes: [String], items: [String])
            let maySee: (prefixes: [String], items: [String])
            // Computed after the walk, once `touched` is known.
            var stable: Set<String> { initial.subtracting(touched) }
            if viaFacade {
                let ref = storage.reference().child(root)
                w = try await walk(pageSize: pageSize, fetch: { size, token in
                    let r = try await ref.list(maxResults: size, pageToken: token)
                    return (r.prefixes.map(\.fullPath), r.items.map(\.fullPath), r.pageToken)
                }, between: mutate)
                mustSee = ListingModel.facade(stable, fullPath: root)
                maySee = ListingModel.facade(everLive, fullPath: root)
            } else {
                w = try await walk(pageSize: pageSize, fetch: { size, token in
                    let p = try await store.list(ListRequest(prefix: prefix, delimiter: delimiter, maxResults: size, pageToken: token))
                    return (p.prefixes, p.items.map(\.name), p.nextPageToken)
                }, between: mutate)
                mustSee = ListingModel.list(stable, prefix: prefix, delimiter: delimiter)
                maySee = ListingModel.list(everLive, prefix: prefix, delimiter: delimiter)
            }
            checkOrderedAndUnique(w.prefixes, "prefixes", key: { viaFacade ? $0 + "/" : $0 })
            checkOrderedAndUnique(w.items, "items")
            // Nothing that existed throughout is skipped; nothing that never existed appears.
            #expect(Set(mustSee.prefixes).isSubset(of: w.prefixes), "skipped prefixes \(Set(mustSee.prefixes).subtracting(w.prefixes))")
            #expect(Set(mustSee.items).isSubset(of: w.items), "skipped items \(Set(mustSee.items).subtracting(w.items))")
            #expect(Set(w.prefixes).isSubset(of: maySee.prefixes))
            #expect(Set(w.items).isSubset(of: maySee.items))
            // Once quiet again, the walk agrees with listAll and the model exactly.
            let quiet = try await walk(pageSize: pageSize) { size, token in
                let p = try await store.list(ListRequest(prefix: prefix, delimiter: delimiter, maxResults: size, pageToken: token))
                return (p.prefixes, p.items.map(\.name), p.nextPageToken)
            }
            let now = ListingModel.list(live, prefix: prefix, delimiter: delimiter)
            #expect(quiet.prefixes == now.prefixes)
            #expect(quiet.items == now.items)
            let all = try await storage.reference().child(root).listAll()
            let facadeNow = ListingModel.facade(live, fullPath: root)
            #expect(all.prefixes.map(\.fullPath) == facadeNow.prefixes)
            #expect(all.items.map(\.fullPath) == facadeNow.items)
        }
    }
}

/// A thread-safe counter for unique per-iteration roots.
final class Counter: @unchecked Sendable {
    private var value = 0
    private let lock = NSLock()
    func next() -> Int { lock.withLock { value += 1; return value } }
}
