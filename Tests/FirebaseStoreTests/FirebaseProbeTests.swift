import FirebaseStore
import Foundation
import StorageModel
import Testing

/// The create probe (`FirebaseStore.probeCreate`, docs/FIREBASE.md "Refused creates"): the start
/// of a resumable upload, which production checks against the write rule before any byte is
/// sent, then cancelled. Nothing is written, and no session stays open.
@Suite struct FirebaseProbeTests {
    static func waitForNoSessions(_ server: FirebaseTestServer) async throws {
        let end = ContinuousClock.now + .seconds(10)
        while server.openSessions > 0, ContinuousClock.now < end { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.openSessions == 0, "the probe's session was cancelled")
    }

    static func starts(_ server: FirebaseTestServer) -> [FirebaseTestServer.Recorded] {
        server.recorded.filter { $0.headers.first(where: { $0.key.lowercased() == "x-goog-upload-command" })?.value.lowercased() == "start" }
    }

    @Test func productionRefusesAtTheStartAndAnAllowedProbeWritesNothing() async throws {
        try await withFirebase(flavour: .production, rules: .perUser, uid: "alice") { f in
            f.server.clearRecorded()
            let refused = try await f.store.probeCreate("public/new.txt", metadata: WritableMetadata(contentType: "text/plain"))
            guard case .refused(let m)? = refused else { Issue.record("got \(String(describing: refused))"); return }
            #expect(m.contains("Permission denied"))
            let other = try await f.store.probeCreate("users/bob/x", metadata: WritableMetadata())
            #expect(other != .allowed)
            let mine = try await f.store.probeCreate("users/alice/new.txt", metadata: WritableMetadata(contentType: "text/plain"))
            #expect(mine == .allowed)
            try await Self.waitForNoSessions(f.server)
            #expect(f.server.object("users/alice/new.txt") == nil && f.server.object("public/new.txt") == nil)
            // One start per probe (plus the cancel of the allowed one), no byte of content.
            let starts = Self.starts(f.server)
            #expect(starts.count == 3)
            #expect(starts.allSatisfy { $0.method == "POST" && $0.headers.first(where: { $0.key.lowercased() == "x-goog-upload-header-content-length" })?.value == "1" })
            #expect(f.server.recorded.filter { $0.isStorage }.count == 4)
            // The probe's answer is the store's only: a write where it said yes still works.
            _ = try await f.store.write("users/alice/new.txt", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            #expect(f.server.object("users/alice/new.txt") != nil)
        }
    }

    /// The Firebase emulator checks a resumable upload only at finalize: its probe says yes, and
    /// the refusal comes with the upload (as the emulator's own conformance tests expect).
    @Test func theEmulatorChecksAtFinalizeSoItsProbeAllows() async throws {
        try await withFirebase(flavour: .emulator, rules: .perUser, uid: "alice") { f in
            let answer = try await f.store.probeCreate("public/new.txt", metadata: WritableMetadata(contentType: "text/plain"))
            #expect(answer == .allowed)
            try await Self.waitForNoSessions(f.server)
            let e = await storageError {
                _ = try await f.store.write("public/new.txt", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            }
            guard case .unauthorized? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(f.server.object("public/new.txt") == nil)
        }
    }
}
