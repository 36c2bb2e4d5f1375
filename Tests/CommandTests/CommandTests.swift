import Foundation
import FuseKit
import GCSStore
import Logging
import ObjectStores
import StorageModel
import Testing
@testable import bucketfs

@Suite struct SourceCheckTests {
    /// The line a mount logs and whoami prints about the bucket's layout (docs/CREDENTIALS.md).
    @Test func layoutLines() {
        #expect(BucketLayout.describe(.hierarchical) == "bucket layout: hierarchical namespace (folders; a directory rename is one request)")
        #expect(BucketLayout.describe(.flat) == "bucket layout: flat")
    }

    @Test func endpointsThatAreURLs() throws {
        #expect(try SourceCheck.endpoint(option: nil, environment: [:]) == nil)
        #expect(try SourceCheck.endpoint(option: "http://127.0.0.1:9023", environment: [:])?.absoluteString == "http://127.0.0.1:9023")
        #expect(try SourceCheck.endpoint(option: nil, environment: ["STORAGE_EMULATOR_HOST": "127.0.0.1:9023"])?.absoluteString
            == "http://127.0.0.1:9023")
        #expect(try SourceCheck.endpoint(option: "https://storage.googleapis.com/", environment: [:]) != nil)
    }

    @Test(arguments: [
        ("http://127.0.0.1:--read-only", "STORAGE_EMULATOR_HOST"),
        ("ftp://127.0.0.1:21", "scheme"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:9023/storage/v1", "path"),
        ("http://", "host"),
    ])
    func endpointsThatAreNot(value: String, mentions: String) {
        let env = mentions == "STORAGE_EMULATOR_HOST" ? ["STORAGE_EMULATOR_HOST": value] : [:]
        let option: String? = mentions == "STORAGE_EMULATOR_HOST" ? nil : value
        do {
            _ = try SourceCheck.endpoint(option: option, environment: env)
            Issue.record("\(value) was accepted")
        } catch {
            #expect(error.description.contains(mentions), "\(error)")
            #expect(error.description.contains("e.g. http://127.0.0.1:9023"))
        }
    }

    @Test func eachFailureHasItsOwnMessage() {
        func line(_ e: StorageError) -> String {
            SourceCheck.explain(e, bucket: "b", endpoint: "http://127.0.0.1:1", identity: "anonymous (no credentials)").description
        }
        #expect(line(.bucketNotFound(bucket: "b")).contains("bucket 'b' does not exist"))
        #expect(line(.unauthorized(path: "", message: "denied")).contains("anonymous (no credentials) may not list gs://b"))
        #expect(line(.unauthorized(path: "", message: "denied")).contains("roles/storage.objectViewer"))
        #expect(line(.unauthenticated(message: "bad token")).contains("credentials were refused"))
        #expect(line(.timeout(message: "read timeout")).contains("did not answer within"))
        #expect(line(.retryLimitExceeded(message: "refused")).contains("cannot reach http://127.0.0.1:1"))
        #expect(line(.unknown(status: 0, message: "connection error")).contains("cannot reach"))
    }

    @Test func aKeyFileThatIsNotAKey() throws {
        let path = NSTemporaryDirectory() + "bucketfs-badkey-\(UUID().uuidString).json"
        try Data(#"{"type": "service_account", "client_email": "a@b", "private_key": "not a key"}"#.utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: StorageError.self) { try CredentialSource.checkKeyFile(path) }
        #expect(throws: StorageError.self) { try CredentialSource.checkKeyFile(path + ".missing") }
    }

    @Test func anEmbeddedSourceThatIsAFile() throws {
        let path = NSTemporaryDirectory() + "bucketfs-file-\(UUID().uuidString)"
        FileManager.default.createFile(atPath: path, contents: Data())
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: SourceProblem.self) { try SourceCheck.openEmbedded(path) }
    }
}

@Suite struct MetricsAddressTests {
    @Test func hostDefaultsToLoopback() throws {
        #expect(try MetricsAddress(parsing: "9101") == MetricsAddress(host: "127.0.0.1", port: 9101))
        #expect(try MetricsAddress(parsing: ":9101") == MetricsAddress(host: "127.0.0.1", port: 9101))
        #expect(try MetricsAddress(parsing: "0.0.0.0:0") == MetricsAddress(host: "0.0.0.0", port: 0))
        #expect(try MetricsAddress(parsing: "[::1]:9101") == MetricsAddress(host: "::1", port: 9101))
        #expect(throws: (any Error).self) { try MetricsAddress(parsing: "127.0.0.1:http") }
        #expect(throws: (any Error).self) { try MetricsAddress(parsing: "127.0.0.1:70000") }
    }
}

extension MetricsAddress {
    init(host: String, port: Int) {
        self = try! MetricsAddress(parsing: "[\(host)]:\(port)")
    }
}

@Suite struct LogLineTests {
    @Test func jsonLinesParse() throws {
        let line = JSONLogHandler.line(time: Date(timeIntervalSince1970: 1_800_000_000.25), level: .error, label: "bucketfs",
                                       message: "upload of 'a \"b\"\n' failed\t\u{1}", source: "BucketFS",
                                       metadata: ["object": "a/b", "time": "shadowed"])
        #expect(line.hasSuffix("}\n"))
        #expect(line.filter { $0 == "\n" }.count == 1)
        let o = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(o["time"] == "2027-01-15T08:00:00.250Z")
        #expect(o["level"] == "error")
        #expect(o["message"] == "upload of 'a \"b\"\n' failed\t\u{1}")
        #expect(o["source"] == "BucketFS")
        #expect(o["object"] == "a/b")
    }
}

@Suite struct ProgressAndHelpTests {
    @Test func progressLine() {
        #expect(TransferProgress.line(files: 3, totalFiles: 10, bytes: 3 << 20, totalBytes: 10 << 20, seconds: 2)
            == "3/10 files, 3.0 MiB of 10.0 MiB, 1.5 MiB/s")
        #expect(TransferProgress.size(512) == "512 B")
    }

    @Test func mountHelperDropsOptionsMeantForMountAndSystemd() {
        #expect(MountHelper.translate(["gs://b", "/mnt", "-o", "rw,noauto,_netdev,nofail,x-systemd.automount,key_file=/k.json,allow_other"])
            == ["gs://b", "/mnt", "--key-file", "/k.json", "--allow-other"])
        // comment=… is for the tools that read fstab (systemd, util-linux), never for the filesystem.
        #expect(MountHelper.translate(["gs://b", "/mnt", "-o", "comment=systemd.automount,ro"]) == ["gs://b", "/mnt", "--read-only"])
    }

    @Test func mountHelpIsGrouped() {
        let help = BucketFSCommand.helpMessage(for: Mount.self)
        for title in ["MOUNT:", "CACHING AND WRITES:", "CLOUD STORAGE:", "LOGGING AND METRICS:"] {
            #expect(help.uppercased().contains(title), "\(title) missing from\n\(help)")
        }
        #expect(!help.contains("source-checked"))
        #expect(Mount.examples.contains("EXAMPLES:"))
    }

    @Test func storeStatusLabels() {
        #expect(MetricsStore.status(of: nil) == "ok")
        #expect(MetricsStore.status(of: StorageError.objectNotFound(path: "a")) == "not_found")
        #expect(MetricsStore.status(of: StorageError.preconditionFailed(path: "a")) == "precondition_failed")
        #expect(MetricsFileSystem.name(.ENOENT) == "ENOENT")
    }
}

/// A path inside an embedded bucket is a prefix of it for the library commands, and refused by
/// name as a mount's or `mb`'s bucket directory: never a second bucket inside the first.
@Suite struct EmbeddedSubPathTests {
    @Test func aPathInsideABucketIsItsPrefixOrRefusedByName() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-subpath-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let bucket = try EmbeddedStore(directory: dir, bucket: "local")
        withExtendedLifetime(bucket) {}
        guard case .embedded(let d, let p) = try Source.parse(dir + "/docs/r.txt", splitLocal: true) else {
            Issue.record("not embedded"); return
        }
        #expect(d == dir && p == "docs/r.txt")
        guard case .embedded(let whole, "") = try Source.parse(dir, splitLocal: false) else { Issue.record("not the bucket"); return }
        #expect(whole == dir)
        do {
            _ = try Source.parse(dir + "/docs", splitLocal: false)
            Issue.record("a folder of a bucket was taken for a bucket")
        } catch {
            let m = "\(error)"
            #expect(m.contains("inside the embedded bucket \(dir)") && m.contains("'docs'") && m.contains("bucketfs mount \(dir) MOUNTPOINT"), "\(m)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/docs"), "nothing was made inside the bucket")
    }
}
