import Foundation
import Testing
@testable import bucketfs

/// `bucketfs --version`: the version from the VERSION file (its one place), and the commit.
@Suite struct VersionTests {
    @Test func theVersionComesFromTheVersionFile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let file = try String(contentsOf: root.appendingPathComponent("VERSION"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!file.isEmpty && BuildInfo.version == file)
        #expect(BucketFSCommand.configuration.version == "bucketfs \(file) (commit \(BuildInfo.commit))")
        // Built from a git checkout: a commit, not "unknown".
        if FileManager.default.fileExists(atPath: root.appendingPathComponent(".git").path) {
            #expect(BuildInfo.commit.range(of: #"^[0-9a-f]{12}(-dirty)?$"#, options: .regularExpression) != nil, "\(BuildInfo.commit)")
        }
    }
}
