import Foundation
import Testing

/// Every HTTP request goes through CloudHTTP (docs/ARCHITECTURE.md, "One transport"): no other
/// target imports AsyncHTTPClient, and the package graph gives it to no other.
@Suite struct OneTransportTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("no source outside Sources/CloudHTTP imports AsyncHTTPClient")
    func onlyCloudHTTPImportsTheClient() throws {
        let importing = try NSRegularExpression(pattern: #"^\s*(@\w+\s+)*import\s+(\w+\s+)?AsyncHTTPClient\b"#,
                                                options: [.anchorsMatchLines])
        var offenders: [String] = []
        var inCloudHTTP = 0
        for folder in ["Sources", "Examples", "Plugins"] {
            let base = Self.root.appendingPathComponent(folder)
            guard let walk = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walk where url.pathExtension == "swift" {
                let text = try String(contentsOf: url, encoding: .utf8)
                let ns = text as NSString
                guard importing.firstMatch(in: text, range: NSRange(location: 0, length: ns.length)) != nil else { continue }
                if url.path.contains("/Sources/CloudHTTP/") { inCloudHTTP += 1 } else { offenders.append(url.path) }
            }
        }
        #expect(offenders.isEmpty, "send HTTP requests through CloudHTTP (HTTPTransport, CredentialRequests): \(offenders)")
        #expect(inCloudHTTP > 0, "the scan found CloudHTTP's own imports")
    }

    /// The targets of `manifest` whose dependencies name the AsyncHTTPClient product.
    static func clientTargets(_ manifest: String) throws -> Set<String> {
        let start = try NSRegularExpression(pattern: #"\.(target|executableTarget|testTarget|plugin)\(\s*name:\s*"([^"]+)""#)
        let ns = manifest as NSString
        let matches = start.matches(in: manifest, range: NSRange(location: 0, length: ns.length))
        var names: Set<String> = []
        for (i, m) in matches.enumerated() {
            let end = i + 1 < matches.count ? matches[i + 1].range.location : ns.length
            let body = ns.substring(with: NSRange(location: m.range.location, length: end - m.range.location))
            if body.contains(#"name: "AsyncHTTPClient""#) { names.insert(ns.substring(with: m.range(at: 2))) }
        }
        return names
    }

    @Test("the check reads a manifest's targets")
    func checkReadsTargets() throws {
        let manifest = """
            .target(name: "A", dependencies: [.product(name: "AsyncHTTPClient", package: "async-http-client")]),
            .target(
                name: "B",
                dependencies: ["A", .product(name: "NIOCore", package: "swift-nio")]
            ),
            .testTarget(name: "C", dependencies: [.product(name: "AsyncHTTPClient", package: "async-http-client")]),
            """
        #expect(try Self.clientTargets(manifest) == ["A", "C"])
    }

    @Test("Package.swift gives the AsyncHTTPClient product to CloudHTTP alone")
    func onlyCloudHTTPDependsOnTheClient() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        #expect(try Self.clientTargets(manifest) == ["CloudHTTP"])
    }
}
