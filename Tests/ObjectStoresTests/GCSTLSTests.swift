import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import Logging
import NIOSSL
import StorageModel
import Testing

/// TLS trust (docs/SEMANTICS.md §5.6): the in-process JSON API server serving https with
/// certificates from a private CA (made by `Scripts/tls-front.sh certs`): untrusted, expired and
/// wrong-name certificates fail at once with a message that says so and is never retried;
/// `--ca-file` (TrustRoots.caFiles) and SSL_CERT_FILE make the same server work.
@Suite struct GCSTLSTests {
    /// The CA and certificates, made once per test process.
    static let certs: String? = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bucketfs-tls-tests-\(getpid())").path
        let p = Process()
        p.executableURL = root.appendingPathComponent("Scripts/tls-front.sh")
        p.arguments = ["certs"]
        p.environment = ProcessInfo.processInfo.environment.merging(["TLS_FRONT_DIR": dir]) { $1 }
        p.standardOutput = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return nil }
        p.waitUntilExit()
        return p.terminationStatus == 0 ? dir : nil
    }()

    static func dir() throws -> String {
        try #require(certs, "Scripts/tls-front.sh certs failed (is openssl installed?)")
    }

    static func serverContext(_ name: String) throws -> NIOSSLContext {
        let d = try dir()
        var c = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile("\(d)/\(name).pem").map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: "\(d)/\(name).key", format: .pem)))
        c.applicationProtocols = ["http/1.1"]
        return try NIOSSLContext(configuration: c)
    }

    /// The store against an https server presenting `certificate`, trusting `trust`.
    func withTLSServer(_ certificate: String, trust: TrustRoots, httpVersion: HTTPVersionChoice = .auto,
                       _ body: (GCSTestServer, GCSStore) async throws -> Void) async throws {
        let server = try await GCSTestServer.start(tls: try Self.serverContext(certificate))
        var t = fastTuning
        t.trust = trust
        t.httpVersion = httpVersion
        let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous,
                             logger: Logger(label: "tls-test"), requestTimeout: .seconds(15), deadline: .seconds(20),
                             tuning: t, environment: [:])
        do { try await body(server, store) } catch {
            try? await store.shutdown(); try? await server.stop(); throw error
        }
        try await store.shutdown()
        try await server.stop()
    }

    /// Bound on the probe: a certificate error retried as a network fault would take all of it.
    /// "At once" is shown by counting connections, not by timing them (a retry is a connection
    /// more); the real-mount test `test_tls.py` holds the mount check to its bound.
    static let probeTimeout: Duration = .seconds(20)

    /// The probe's error.
    func refusal(_ store: GCSStore) async -> String {
        do {
            try await store.probe(timeout: Self.probeTimeout)
            return "no error"
        } catch StorageError.tls(let m) {
            return m
        } catch {
            return "not a TLS error: \(error)"
        }
    }

    @Test func untrustedCertificateFailsAtOnceSaysSoAndIsNotRetried() async throws {
        try await withTLSServer("server", trust: .system) { server, store in
            let m = await refusal(store)
            #expect(m.contains("certificate") && m.contains("127.0.0.1:\(server.port)") && m.contains("not trusted")
                    && m.contains("--ca-file"), "\(m)")
            // One handshake for the request, one to read the certificate for the message; no retry.
            #expect(server.read { $0.connectionsAccepted } <= 2, "connections: \(server.read { $0.connectionsAccepted })")
            #expect(server.recorded.isEmpty)
        }
    }

    @Test func expiredCertificateSaysExpired() async throws {
        let ca = "\(try Self.dir())/ca.pem"
        try await withTLSServer("expired", trust: TrustRoots(caFiles: [ca])) { server, store in
            let m = await refusal(store)
            #expect(m.contains("certificate") && m.contains("127.0.0.1:\(server.port)") && m.contains("expired on 2020-02-01"), "\(m)")
            // One handshake for the request, one to read the certificate for the message; no retry.
            #expect(server.read { $0.connectionsAccepted } <= 2, "connections: \(server.read { $0.connectionsAccepted })")
            #expect(server.recorded.isEmpty)
        }
    }

    @Test func certificateForAnotherNameSaysWrongName() async throws {
        let ca = "\(try Self.dir())/ca.pem"
        try await withTLSServer("wrongname", trust: TrustRoots(caFiles: [ca])) { server, store in
            let m = await refusal(store)
            #expect(m.contains("certificate") && m.contains("127.0.0.1:\(server.port)") && m.contains("wrong name"), "\(m)")
            #expect(server.read { $0.connectionsAccepted } == 1)
        }
    }

    @Test func caFileMakesThePrivateCATrusted() async throws {
        let ca = "\(try Self.dir())/ca.pem"
        try await withTLSServer("server", trust: TrustRoots(caFiles: [ca])) { server, store in
            try await store.probe(timeout: .seconds(5))
            let data = Data("over TLS".utf8)
            let info = try await store.write("a", from: .data(data), metadata: .init(), preconditions: .none)
            #expect(try await store.read("a", generation: info.generation, range: nil) == data)
            // Requests share connections: a handful at most, never one per request; the store
            // counts each, and its handshake.
            let accepted = server.read { $0.connectionsAccepted }
            #expect(accepted <= 2)
            let counted = store.connections
            #expect(counted.total == accepted && counted.http1 == accepted && counted.tlsHandshakes == accepted, "\(counted)")
        }
    }

    /// Everything over https is handled on one event loop (ClientSettings
    /// `httpsEventLoopGroup`): every chunk of several streamed reads at once is delivered on the
    /// same thread, the one its connection reads on, with no hop between loops per chunk; under
    /// `auto` (object data on a client of its own) and `1.1` (one client for all). With a loop per
    /// core, the reads' chunks came on several threads.
    @Test(arguments: [HTTPVersionChoice.auto, .http1_1])
    func streamedReadsOverHTTPSAreDeliveredOnOneEventLoop(_ version: HTTPVersionChoice) async throws {
        let ca = "\(try Self.dir())/ca.pem"
        try await withTLSServer("server", trust: TrustRoots(caFiles: [ca]), httpVersion: version) { _, store in
            var bytes = [UInt8](repeating: 0, count: 4 << 20)
            for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 13) }
            let data = Data(bytes)
            let info = try await store.write("big", from: .data(data), metadata: .init(), preconditions: .none)
            let threads = ThreadSet()
            let part = Int64(data.count / 8)
            let pieces = try await withThrowingTaskGroup(of: (Int64, Data).self) { group in
                for k in 0..<Int64(8) {
                    group.addTask {
                        let got = Pieces()
                        try await store.stream("big", generation: info.generation, range: (k * part)..<((k + 1) * part)) { chunk in
                            threads.note()
                            got.append(chunk)
                        }
                        return (k, got.data)
                    }
                }
                var all: [(Int64, Data)] = []
                for try await p in group { all.append(p) }
                return all.sorted { $0.0 < $1.0 }.map(\.1)
            }
            #expect(pieces.reduce(Data(), +) == data)
            #expect(threads.count == 1, "chunks delivered on \(threads.count) threads")
        }
    }

    @Test func sslCertFileReplacesTheSystemStore() async throws {
        let ca = "\(try Self.dir())/ca.pem"
        let trust = TrustRoots.resolve(caFile: nil, environment: ["SSL_CERT_FILE": ca])
        #expect(trust.certFile == ca && !trust.usesSystemStore)
        try await withTLSServer("server", trust: trust) { _, store in
            try await store.probe(timeout: .seconds(5))
        }
    }

    /// A root given several times (a bundle file, and a directory holding it under two names, as
    /// Debian's /etc/ssl/certs does) is kept once; the server it signed is still trusted.
    @Test func aRootGivenSeveralTimesIsKeptOnce() async throws {
        let d = try Self.dir()
        let dir = "\(d)/twice-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.copyItem(atPath: "\(d)/ca.pem", toPath: "\(dir)/ca.pem")
        try FileManager.default.createSymbolicLink(atPath: "\(dir)/1a2b3c4d.0", withDestinationPath: "ca.pem")
        let trust = TrustRoots.resolve(caFile: nil, environment: ["SSL_CERT_FILE": "\(d)/ca.pem", "SSL_CERT_DIR": dir])
        guard case .certificates(let roots) = try trust.tlsConfiguration().trustRoots else {
            Issue.record("SSL_CERT_FILE and SSL_CERT_DIR did not replace the system store"); return
        }
        #expect(roots.count == 1, "the CA kept \(roots.count) times")
        try await withTLSServer("server", trust: trust) { _, store in
            try await store.probe(timeout: .seconds(5))
        }
    }

    @Test func trustSettingsFromOptionsAndEnvironment() throws {
        let t = TrustRoots.resolve(caFile: "/x/ca.pem", environment: ["SSL_CERT_DIR": "/a:/b", "SSL_CERT_FILE": ""])
        #expect(t.caFiles == ["/x/ca.pem"] && t.certFile == nil && t.certDirs == ["/a", "/b"])
        #expect(t.description == "SSL_CERT_DIR=/a:/b and --ca-file /x/ca.pem")
        #expect(TrustRoots.resolve(caFile: nil, environment: [:]) == .system)
        #expect(TrustRoots.system.description == "the system store")

        #expect(throws: TrustProblem("--ca-file /no/such.pem: the file cannot be read (missing, or no permission)")) {
            _ = try TrustRoots(caFiles: ["/no/such.pem"]).tlsConfiguration()
        }
        let junk = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-ca-\(getpid()).pem").path
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: junk))
        defer { try? FileManager.default.removeItem(atPath: junk) }
        do {
            _ = try TrustRoots(caFiles: [junk]).tlsConfiguration()
            Issue.record("a file with no certificate was accepted")
        } catch {
            #expect(error.description.hasPrefix("--ca-file \(junk): "), "\(error)")
        }
        _ = try TrustRoots(caFiles: ["\(try Self.dir())/ca.pem"]).tlsConfiguration()
    }

    @Test func tlsErrorsAreNeverTransient() {
        #expect(!StorageError.tls(message: "x").isTransient)
    }
}

/// The threads that delivered chunks.
private final class ThreadSet: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: Set<UInt> = []
    func note() { let me = UInt(pthread_self()); lock.withLock { _ = seen.insert(me) } }
    var count: Int { lock.withLock { seen.count } }
}

/// The chunks of one streamed read, in order.
private final class Pieces: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes = Data()
    func append(_ d: Data) { lock.withLock { bytes.append(d) } }
    var data: Data { lock.withLock { bytes } }
}
