import Foundation
import NIOSSL

/// The certificates a store trusts for https endpoints (storage, Auth, token): the system store
/// by default; `SSL_CERT_FILE` / `SSL_CERT_DIR`, when set, in its place, as OpenSSL, curl and Go
/// read them; `--ca-file` added to whichever is in effect (docs/CONFIGURATION.md).
public struct TrustRoots: Sendable, Hashable, CustomStringConvertible {
    /// PEM files added to the trusted roots (`--ca-file`).
    public var caFiles: [String] = []
    /// `SSL_CERT_FILE`: a PEM bundle used instead of the system's.
    public var certFile: String?
    /// `SSL_CERT_DIR`: directories (`:`-separated) of PEM files used instead of the system's.
    public var certDirs: [String] = []

    public init(caFiles: [String] = [], certFile: String? = nil, certDirs: [String] = []) {
        self.caFiles = caFiles
        self.certFile = certFile
        self.certDirs = certDirs
    }

    /// The system store alone.
    public static let system = TrustRoots()

    /// `--ca-file` and the environment's SSL_CERT_FILE / SSL_CERT_DIR (empty values are ignored).
    public static func resolve(caFile: String?, environment: [String: String]) -> TrustRoots {
        let file = environment["SSL_CERT_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        let dirs = (environment["SSL_CERT_DIR"] ?? "").split(separator: ":").map(String.init)
        return TrustRoots(caFiles: caFile.map { [$0] } ?? [], certFile: file, certDirs: dirs)
    }

    /// Whether the system store is in use (neither SSL_CERT_FILE nor SSL_CERT_DIR replaces it).
    public var usesSystemStore: Bool { certFile == nil && certDirs.isEmpty }

    /// Where trust comes from, for messages: "the system store and --ca-file /x.pem".
    public var description: String {
        var parts: [String] = []
        if usesSystemStore { parts.append("the system store") }
        if let certFile { parts.append("SSL_CERT_FILE=\(certFile)") }
        if !certDirs.isEmpty { parts.append("SSL_CERT_DIR=\(certDirs.joined(separator: ":"))") }
        parts += caFiles.map { "--ca-file \($0)" }
        return parts.joined(separator: " and ")
    }

    /// The client TLS configuration, every file read and checked now: a file that cannot be read
    /// or holds no PEM certificate is a `TrustProblem` naming it (directories skip such files,
    /// as OpenSSL does).
    public func tlsConfiguration() throws(TrustProblem) -> TLSConfiguration {
        var c = TLSConfiguration.makeClientConfiguration()
        if !usesSystemStore {
            var roots: [NIOSSLCertificate] = []
            if let certFile { roots += try Self.load(certFile, origin: "SSL_CERT_FILE=\(certFile)") }
            for dir in certDirs { roots += Self.loadDirectory(dir) }
            c.trustRoots = .certificates(Self.once(roots))
        }
        for f in caFiles {
            c.additionalTrustRoots.append(.certificates(try Self.load(f, origin: "--ca-file \(f)")))
        }
        return c
    }

    static func load(_ path: String, origin: String) throws(TrustProblem) -> [NIOSSLCertificate] {
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw TrustProblem("\(origin): the file cannot be read (missing, or no permission)")
        }
        let certs: [NIOSSLCertificate]
        do { certs = try NIOSSLCertificate.fromPEMFile(path) } catch {
            throw TrustProblem("\(origin): no PEM certificate could be read (\(error)); give a file of "
                + "-----BEGIN CERTIFICATE----- blocks, the CA that signed the server's certificate")
        }
        if certs.isEmpty { throw TrustProblem("\(origin): the file holds no PEM certificate") }
        return certs
    }

    /// Each certificate once, in first-seen order. A system directory holds every root several
    /// times (Debian's /etc/ssl/certs: the bundle file, a `.pem` link and a hash link per root; the
    /// bundle is SSL_CERT_FILE too): kept four times over, they held 6 MB for a mount's life.
    static func once(_ certs: [NIOSSLCertificate]) -> [NIOSSLCertificate] {
        var seen = Set<NIOSSLCertificate>()
        return certs.filter { seen.insert($0).inserted }
    }

    static func loadDirectory(_ dir: String) -> [NIOSSLCertificate] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.sorted().flatMap { name in
            (try? NIOSSLCertificate.fromPEMFile((dir as NSString).appendingPathComponent(name))) ?? []
        }
    }
}

/// A trust setting that cannot work (a CA file that is missing or holds no certificate).
public struct TrustProblem: Error, CustomStringConvertible, Equatable {
    public let description: String
    public init(_ s: String) { description = s }
}
