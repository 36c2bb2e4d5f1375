import FirebaseStore
import Foundation
import Logging
import StorageModel
import Testing

/// Security Rules decide: a denial is `unauthorized` (EACCES) — even for a name that may not
/// exist — never `objectNotFound`; a listing refused under rules_version 1 says what to change.
@Suite struct FirebaseRulesTests {
    static func isUnauthorized(_ e: StorageError?) -> Bool {
        if case .unauthorized? = e { return true } else { return false }
    }

    @Test func denialsAreUnauthorizedEvenForMissingNames() async throws {
        try await withFirebase(rules: .perUser, uid: "alice") { f in
            f.server.seed("users/bob/diary", Data("secret".utf8))
            f.server.seed("public/notice", Data("hello".utf8))
            // Her own area: everything.
            _ = try await f.store.write("users/alice/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .doesNotExist)
            #expect(try await f.store.read("users/alice/a", generation: nil, range: nil) == Data("a".utf8))
            // Someone else's: refused, whether the name exists or not.
            var e = await storageError { _ = try await f.store.getMetadata("users/bob/diary") }
            #expect(Self.isUnauthorized(e))
            e = await storageError { _ = try await f.store.getMetadata("users/bob/no-such-thing") }
            #expect(Self.isUnauthorized(e), "a 403 on a name that may not exist is EACCES, not ENOENT: \(String(describing: e))")
            e = await storageError { try await f.store.delete("users/bob/no-such-thing", preconditions: .none) }
            #expect(Self.isUnauthorized(e))
            e = await storageError { _ = try await f.store.read("users/bob/diary", generation: nil, range: nil) }
            #expect(Self.isUnauthorized(e))
            guard case .unauthorized(let path, let message)? = e else { return }
            #expect(path == "users/bob/diary")
            #expect(message.contains("Permission denied"), "the server's message is quoted: \(message)")
            // A read-only area.
            #expect(try await f.store.read("public/notice", generation: nil, range: nil) == Data("hello".utf8))
            e = await storageError {
                _ = try await f.store.write("public/mine", from: .data(Data("m".utf8)), metadata: .init(), preconditions: .doesNotExist)
            }
            #expect(Self.isUnauthorized(e))
            var patch = MetadataPatch()
            patch.contentType = .set("text/plain")
            e = await storageError { _ = try await f.store.patchMetadata("public/notice", patch, preconditions: .none) }
            #expect(Self.isUnauthorized(e))
            // Listing someone else's prefix, or the root.
            e = await storageError { _ = try await f.store.list(ListRequest(prefix: "users/bob/", delimiter: "/")) }
            #expect(Self.isUnauthorized(e))
            e = await storageError { _ = try await f.store.list(ListRequest(prefix: "", delimiter: "/")) }
            guard case .unauthorized(let lp, let lm)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(lp == "firebase://\(f.server.bucket)/")
            #expect(lm.contains("rules_version = '2'") && lm.contains("allow list"), "says what listing needs: \(lm)")
            #expect(f.server.object("public/mine") == nil)
        }
    }

    @Test func aListingUnderRulesVersionOneSaysSoAndWhatToChange() async throws {
        try await withFirebase(flavour: .production, rules: TestRules(version: 1, TestRules.signedIn.rules)) { f in
            f.server.seed("a", Data("a".utf8))
            let size = try await f.store.getMetadata("a").size
            #expect(size == 1, "everything else still works")
            let e = await storageError { _ = try await f.store.list(ListRequest(prefix: "", delimiter: "/")) }
            guard case .unauthorized(_, let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("disallowed for rules_version = \"1\""), "the server's message: \(m)")
            #expect(m.contains("rules_version = '2';") && m.contains("firebase deploy --only storage"), "what to change: \(m)")
            let probe = await storageError { try await f.store.probe(timeout: .seconds(3)) }
            #expect(Self.isUnauthorized(probe), "a mount is refused at once")
        }
    }

    @Test func objectsListedButNotReadableShowAndFailOnUse() async throws {
        try await withFirebase(rules: .perUser, uid: "alice") { f in
            f.server.seed("shared/bob/his", Data("bob's".utf8))
            _ = try await f.store.write("shared/alice/hers", from: .data(Data("alice's".utf8)), metadata: .init(), preconditions: .none)
            for _ in 0..<2 {
                let page = try await f.store.list(ListRequest(prefix: "shared/", delimiter: "/"))
                #expect(page.prefixes == ["shared/alice/", "shared/bob/"])
            }
            let bob = try await f.store.list(ListRequest(prefix: "shared/bob/", delimiter: "/"))
            #expect(bob.items.map(\.name) == ["shared/bob/his"])
            let his = try #require(bob.items.first)
            #expect(his.generation == 0 && his.size == 1, "unknown, and not empty: a read must ask")
            // A read as the core makes it, of the generation and range the listing gave.
            let e = await storageError { try await f.store.stream("shared/bob/his", generation: his.generation, range: 0..<his.size) { _ in } }
            #expect(Self.isUnauthorized(e), "reading it fails with EACCES")
            let r = await storageError { _ = try await f.store.read("shared/bob/his", generation: nil, range: nil) }
            #expect(Self.isUnauthorized(r))
            _ = try await f.store.list(ListRequest(prefix: "shared/bob/", delimiter: "/"))
            let lines = f.logs.all.filter { $0.contains("shared/bob/his") && $0.contains("listed, but the Security Rules deny reading it") }
            #expect(lines.count == 1, "logged once per object: \(lines)")
            let alice = try await f.store.list(ListRequest(prefix: "shared/alice/", delimiter: "/"))
            #expect(alice.items.first?.size == 7)
        }
    }

    @Test func noRulesetLoadedRefusesEverything() async throws {
        try await withFirebase(rules: nil) { f in
            let e = await storageError { _ = try await f.store.getMetadata("x") }
            guard case .unauthorized(_, let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("no loaded ruleset"))
        }
    }

    @Test func aCreateInAWriteOnlyAreaGoesAheadUnchecked() async throws {
        let dropbox = TestRules([TestRules.Rule(path: "inbox/{rest=**}", allow: [.create], when: .signedIn)])
        try await withFirebase(rules: dropbox) { f in
            let info = try await f.store.write("inbox/letter", from: .data(Data("hi".utf8)), metadata: .init(),
                                               preconditions: .doesNotExist)
            #expect(info.size == 2)
            #expect(f.server.object("inbox/letter")?.data == Data("hi".utf8))
            // Overwriting is an update, which these rules do not allow.
            let e = await storageError {
                _ = try await f.store.write("inbox/letter", from: .data(Data("again".utf8)), metadata: .init(), preconditions: .doesNotExist)
            }
            #expect(Self.isUnauthorized(e))
        }
    }

    @Test func rulesModel() {
        let r = TestRules.perUser
        #expect(r.allows(.get, path: "users/a/x/y", uid: "a"))
        #expect(!r.allows(.get, path: "users/a/x/y", uid: "b"))
        #expect(r.allows(.list, path: "users/a", uid: "a"), "{rest=**} matches zero segments (rules version 2)")
        #expect(!r.allows(.list, path: "", uid: "a"))
        #expect(r.allows(.get, path: "public/p", uid: "z") && !r.allows(.create, path: "public/p", uid: "z"))
        #expect(!r.allows(.get, path: "public/p", uid: nil))
        #expect(!TestRules(version: 1, r.rules).allows(.list, path: "users/a", uid: "a"))
    }
}
