import Foundation
@testable import ObjectStores
import StorageModel
import Testing

/// The embedded bucket is private (docs/SECURITY.md): its directories 0700 and every file in it
/// 0600, whatever the umask; an older bucket that others can read is reported until `chmod -R
/// go-rwx` makes it private.
@Suite struct PrivateModesTests {
    static func mode(_ p: String) -> mode_t? {
        var st = stat()
        return lstat(p, &st) == 0 ? st.st_mode & 0o7777 : nil
    }

    /// Runs `body` with umask 0, the widest: anything not set exactly would come out 0777 or 0666.
    static func withUmaskZero<T>(_ body: () async throws -> T) async rethrows -> T {
        let old = umask(0)
        defer { umask(old) }
        return try await body()
    }

    @Test func theBucketIsPrivateWhateverTheUmask() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let b = dir.path + "/bucket"
        let store = try await Self.withUmaskZero { () async throws -> EmbeddedStore in
            let s = try EmbeddedStore(directory: b)
            _ = try await s.write("s.txt", from: .data(Data("secret".utf8)), metadata: .init(), preconditions: .none)
            _ = try await s.copy(from: "s.txt", sourceGeneration: nil, to: "copy.txt", metadata: nil, preconditions: .none)
            return s
        }
        for d in [b, b + "/blobs", b + "/tmp"] { #expect(Self.mode(d) == 0o700, "\(d)") }
        // The pool is open: the database is in WAL mode, so -wal and -shm exist.
        for f in ["bucket.sqlite", "bucket.sqlite-wal", "bucket.sqlite-shm"] {
            #expect(Self.mode(b + "/" + f) == 0o600, "\(f)")
        }
        let blobs = dir.files("bucket/blobs")
        #expect(blobs.count == 2)
        for f in blobs { #expect(Self.mode(b + "/blobs/" + f) == 0o600, "blob \(f)") }
        #expect(EmbeddedStore.exposedFiles(directory: b).isEmpty)
        _ = store
    }

    @Test func anOlderBucketIsReportedUntilChmodMakesItPrivate() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let b = dir.path + "/old"
        do {
            let s = try EmbeddedStore(directory: b)
            _ = try await s.write("s.txt", from: .data(Data("secret".utf8)), metadata: .init(), preconditions: .none)
        }
        // The modes an earlier version left: the umask's 0755 and 0644.
        for d in [b, b + "/blobs", b + "/tmp"] { chmod(d, 0o755) }
        for f in ["bucket.sqlite"] + dir.files("old/blobs").map({ "blobs/" + $0 }) { chmod(b + "/" + f, 0o644) }
        let exposed = EmbeddedStore.exposedFiles(directory: b)
        #expect(exposed.map(\.path).contains(b))
        #expect(exposed.map(\.path).contains(b + "/bucket.sqlite"))
        #expect(exposed.first { $0.path == b }?.mode == 0o755)
        let warning = PrivateFiles.warning("the embedded bucket \(b)", root: b, exposed: exposed)
        #expect(warning?.contains("chmod -R go-rwx \(b)") == true)
        #expect(warning?.contains("\(b) (mode 755)") == true)
        #expect(warning?.contains("--allow-shared-files") == true)
        // The chmod the warning names makes it private, and the bucket still opens and reads.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/chmod")
        p.arguments = ["-R", "go-rwx", b]
        try p.run()
        p.waitUntilExit()
        #expect(EmbeddedStore.exposedFiles(directory: b).isEmpty)
        #expect(PrivateFiles.warning("x", root: b, exposed: EmbeddedStore.exposedFiles(directory: b)) == nil)
        let again = try EmbeddedStore(directory: b)
        #expect(try await again.read("s.txt", generation: nil, range: nil) == Data("secret".utf8))
        #expect(EmbeddedStore.exposedFiles(directory: b).isEmpty)
    }

    @Test func anExistingDirectoryKeepsItsModeAndIsReported() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let b = dir.path + "/made-by-hand"
        try FileManager.default.createDirectory(atPath: b, withIntermediateDirectories: false)
        chmod(b, 0o755)
        _ = try EmbeddedStore(directory: b)
        // bucketfs does not chmod a directory it did not make; it says so instead.
        #expect(Self.mode(b) == 0o755)
        #expect(EmbeddedStore.exposedFiles(directory: b).map(\.path) == [b])
        #expect(Self.mode(b + "/bucket.sqlite") == 0o600)
    }

    @Test func theRequestLogIsPrivate() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let log = dir.path + "/requests.log"
        try await Self.withUmaskZero {
            let s = try RequestLogStore(try EmbeddedStore(directory: dir.path + "/b"), path: log)
            _ = try await s.write("named", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
        }
        #expect(Self.mode(log) == 0o600)
        #expect(String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self).contains("write named"))
    }

    @Test func privateFilesOpenKeepsAnExistingFilesModeAndQuotesPaths() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let f = dir.path + "/existing"
        #expect(FileManager.default.createFile(atPath: f, contents: Data("x".utf8)))
        chmod(f, 0o644)
        let fd = PrivateFiles.open(f, O_WRONLY | O_APPEND)
        #expect(fd >= 0)
        close(fd)
        #expect(Self.mode(f) == 0o644)
        #expect(PrivateFiles.exposed([f]) == [PrivateFiles.Exposed(path: f, mode: 0o644)])
        #expect(PrivateFiles.open(f, O_WRONLY | O_EXCL) == -1)
        #expect(PrivateFiles.quoted("/a b/c'd") == "'/a b/c'\\''d'")
        #expect(PrivateFiles.quoted("/tmp/x-1") == "/tmp/x-1")
    }
}
