import Foundation
import FuseKit
import Testing
@testable import bucketfs

/// gcsfuse's command line and config file as the CSI driver's sidecar passes them
/// (docs/KUBERNETES.md, "gcsfuse's command line").
@Suite struct GCSFuseTranslationTests {
    static func translate(_ argv: [String], config: [(name: String, value: String)] = []) throws -> GCSFuseTranslation {
        try GCSFuseTranslation(argv: argv, readConfig: { _ throws(GCSFuseConfigFile.Refusal) in config })
    }

    @Test("the sidecar's argv, in any order, with its config file, becomes one bucketfs mount")
    func theDriversCommandLine() throws {
        let flags = ["--app-name=gke-gcs-fuse-csi", "--temp-dir=/gcsfuse-buffer/.volumes/v/temp-dir",
                     "--config-file=/gcsfuse-tmp/.volumes/v/config.yaml", "--foreground", "--uid=0", "--gid=0",
                     "--prometheus-port=62990"]
        let config = try GCSFuseConfigFile.settings(text: """
            cache-dir: ""
            logging:
                file-path: /dev/fd/1
                format: json
                severity: debug
            metadata-cache:
                ttl-secs: -1
            """, path: "config.yaml")
        for order in [flags, flags.reversed(), flags.shuffled()] {
            let t = try Self.translate(order + ["my-bucket", "/dev/fd/3"], config: config)
            let a = t.mountArguments
            #expect(Array(a.prefix(2)) == ["gs://my-bucket", "/dev/fd/3"])
            let pairs = Self.pairs(Array(a.dropFirst(2)))
            #expect(pairs["--cache-dir"] == "/gcsfuse-buffer/.volumes/v/temp-dir")
            #expect(pairs["--log-file"] == "/dev/fd/1")
            #expect(pairs["--log-format"] == "json")
            #expect(pairs["--log-level"] == "debug")
            #expect(pairs["--uid"] == "0" && pairs["--gid"] == "0")
            #expect(pairs["--metrics-address"] == "127.0.0.1:62990")
            #expect(pairs["--metadata-ttl"] == GCSFuseTranslation.forEver)
            #expect(a.contains("--foreground"))
            #expect(t.notes.contains { $0.contains("--app-name") && $0.contains("no effect") })
            // The result parses as a bucketfs mount.
            _ = try Mount.parse(a)
        }
    }

    @Test("flags override the config file, as in gcsfuse")
    func flagsWin() throws {
        let t = try Self.translate(["--config-file=c.yaml", "--log-severity=error", "b", "/mnt"],
                                   config: [("log-severity", "trace"), ("uid", "7")])
        let p = Self.pairs(Array(t.mountArguments.dropFirst(2)))
        #expect(p["--log-level"] == "error")
        #expect(p["--uid"] == "7")
    }

    @Test("volume options: -o, only-dir, custom-endpoint, modes, bucketfs's own options")
    func volumeOptions() throws {
        let t = try Self.translate(["-o", "ro,noexec", "--only-dir=/data/x/", "--custom-endpoint=http://127.0.0.1:9023/storage/v1/",
                                    "--anonymous-access", "--file-mode=0664", "--dir-mode=775", "--implicit-dirs",
                                    "--posix-metadata=on", "--at=2h", "b", "/dev/fd/3"])
        let a = t.mountArguments
        #expect(a[0] == "gs://b/data/x")
        let p = Self.pairs(Array(a.dropFirst(2)))
        #expect(p["--endpoint"] == "http://127.0.0.1:9023")
        #expect(p["--file-mode"] == "664" || p["--file-mode"] == "0664")
        #expect(p["--dir-mode"] == "775")
        #expect(a.contains("--read-only") && a.contains("--anonymous"))
        #expect(a.contains("--posix-metadata=on") && a.contains("--at=2h"))
        #expect(t.notes.contains { $0.contains("-o noexec") })
        #expect(t.notes.contains { $0.contains("--implicit-dirs") })
    }

    @Test("each gcsfuse parameter is mapped, accepted with a note, or refused by name")
    func everyParameter() throws {
        var refused: [String] = []
        for param in GCSFuseParam.all where param.flag != "config-file" {
            let value: String
            switch param.kind {
            case .bool: value = "true"
            case .list: value = "ro"
            case .value: value = Self.sample(param.flag)
            }
            do {
                let t = try Self.translate(["--\(param.flag)=\(value)", "b", "/mnt/x"])
                let extra = Array(t.mountArguments.dropFirst(2)).filter { $0 != "--log-level" && $0 != "info" }
                switch param.disposition {
                case .noEffect:
                    #expect(t.notes.contains { $0.contains("--\(param.flag)") }, "\(param.flag): no note")
                    #expect(extra.isEmpty, "\(param.flag): an effect \(extra)")
                case .mapped:
                    #expect(!extra.isEmpty || t.notes.contains { $0.contains(param.flag) } || t.mountArguments[0] != "gs://b",
                            "\(param.flag): neither an option nor a note")
                }
                _ = try Mount.parse(t.mountArguments)
            } catch let e as GCSFuseTranslation.Refusal {
                #expect(e.description.contains(param.flag), "\(param.flag): \(e.description)")
                refused.append(param.flag)
            }
        }
        #expect(Set(refused) == ["client-protocol", "enable-dummy-io", "limit-bytes-per-sec", "limit-ops-per-sec"])
    }

    @Test("gcsfuse's file cache becomes the read cache: cache-dir with file-cache:max-size-mb not 0")
    func fileCache() throws {
        let on = Self.pairs(Array(try Self.translate(["--cache-dir=/c", "--file-cache-max-size-mb=2048", "b", "/m"]).mountArguments.dropFirst(2)))
        #expect(on["--read-cache-dir"] == "/c/bucketfs-read-cache" && on["--read-cache-mb"] == "2048")
        let unbounded = Self.pairs(Array(try Self.translate(["--cache-dir=/c", "--file-cache-max-size-mb=-1", "b", "/m"]).mountArguments.dropFirst(2)))
        #expect(unbounded["--read-cache-dir"] == "/c/bucketfs-read-cache" && unbounded["--read-cache-mb"] == nil)
        for args in [["--cache-dir=/c", "--file-cache-max-size-mb=0"], ["--file-cache-max-size-mb=100"], ["--cache-dir="]] {
            let a = try Self.translate(args + ["b", "/m"]).mountArguments
            #expect(!a.contains("--read-cache-dir") && !a.contains("--read-cache-mb"), "\(args)")
        }
    }

    @Test("gcsfuse's streaming writes are bucketfs's streamed uploads, its write block size their request size")
    func streamingWrites() throws {
        let off = Self.pairs(Array(try Self.translate(["--enable-streaming-writes=false", "b", "/m"]).mountArguments.dropFirst(2)))
        #expect(off["--stream-uploads"] == "off")
        let on = Self.pairs(Array(try Self.translate(["--enable-streaming-writes", "--write-block-size-mb=32", "b", "/m"]).mountArguments.dropFirst(2)))
        #expect(on["--stream-uploads"] == "on" && on["--stream-upload-mb"] == "32")
        let big = try Self.translate(["--write-block-size-mb=4096", "b", "/m"])
        #expect(Self.pairs(Array(big.mountArguments.dropFirst(2)))["--stream-upload-mb"] == "1024")
        _ = try Mount.parse(big.mountArguments)
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["--write-block-size-mb=0", "b", "/m"]) }
    }

    @Test("the same through the config file: every key with a place in it")
    func everyConfigKey() throws {
        for param in GCSFuseParam.all where !param.configPath.isEmpty {
            let value = param.kind == .bool ? "false" : (param.kind == .list ? "ro" : Self.sample(param.flag))
            let yaml = Self.yaml(path: param.configPath, value: value)
            let settings = try GCSFuseConfigFile.settings(text: yaml, path: "c.yaml")
            #expect(settings.count == 1 && settings[0].name == param.flag, "\(param.configPath): \(settings)")
        }
    }

    @Test("refusals: an unknown flag or key, a config file that is not YAML, a missing value, every bucket")
    func refusals() throws {
        #expect(throws: GCSFuseConfigFile.Refusal.self) { try GCSFuseConfigFile.settings(text: "logging: [unclosed", path: "c.yaml") }
        let unknown = #expect(throws: GCSFuseConfigFile.Refusal.self) { try GCSFuseConfigFile.settings(text: "no-such:\n    key: 1\n", path: "c.yaml") }
        #expect(unknown?.description.contains("no-such:key") == true)
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["--uid", "b", "/m"]) }  // uid takes b; then one positional
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["_", "/m"]) }
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["/m"]) }
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["-o", "bogus", "b", "/m"]) }
        #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["--foreground=maybe", "b", "/m"]) }
        let grpc = #expect(throws: GCSFuseTranslation.Refusal.self) { try Self.translate(["--client-protocol=grpc", "b", "/m"]) }
        #expect(grpc?.description.contains("JSON API") == true)
        // Not gcsfuse's and not bucketfs's: bucketfs's parser names it.
        let t = try Self.translate(["--no-such-flag=1", "b", "/m"])
        #expect(throws: (any Error).self) { try Mount.parse(t.mountArguments) }
    }

    @Test("/dev/fd/N is a descriptor target; anything else a directory")
    func targets() {
        #expect(MountTarget("/dev/fd/3") == .fileDescriptor(3))
        #expect(MountTarget("/dev/fd/x") == .directory("/dev/fd/x"))
        #expect(MountTarget("/mnt/b") == .directory("/mnt/b"))
        #expect(MountTarget("/dev/fd/") == .directory("/dev/fd/"))
        #expect(MountTarget(Self.fileDescriptor(9999)).descriptorProblem()?.contains("not an open file descriptor") == true)
        let null = open("/dev/null", O_RDONLY)
        defer { close(null) }
        #expect(MountTarget.fileDescriptor(null).descriptorProblem()?.contains("not a FUSE device") == true)
    }

    @Test("docs/KUBERNETES.md's table has every parameter once, with its key and what bucketfs does")
    func theDocsTable() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/KUBERNETES.md"), encoding: .utf8)
        var rows: [String: (key: String, what: String)] = [:]
        for line in doc.split(separator: "\n") where line.hasPrefix("| `--") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            let flag = String(cells[1].dropFirst(3).dropLast())
            #expect(rows[flag] == nil, "\(flag) twice")
            rows[flag] = (cells[2], cells[3])
        }
        #expect(Set(rows.keys) == Set(GCSFuseParam.all.map(\.flag)))
        for p in GCSFuseParam.all {
            guard let row = rows[p.flag] else { continue }
            #expect(row.key == (p.configPath.isEmpty ? "—" : "`" + p.configPath.replacingOccurrences(of: ".", with: ":") + "`"), "\(p.flag)")
            if case .noEffect(let why) = p.disposition {
                #expect(row.what == "accepted, no effect: " + why.rawValue, "\(p.flag)")
            } else {
                #expect(!row.what.isEmpty)
            }
        }
    }

    @Test("Go durations as gcsfuse writes them")
    func durations() {
        #expect(GCSFuseTranslation.seconds(goDuration: "1m30s") == 90)
        #expect(GCSFuseTranslation.seconds(goDuration: "1500ms") == 1.5)
        #expect(GCSFuseTranslation.seconds(goDuration: "0s") == 0)
        #expect(GCSFuseTranslation.seconds(goDuration: "2h") == 7200)
        #expect(GCSFuseTranslation.seconds(goDuration: "60") == nil)
    }

    static func fileDescriptor(_ n: Int32) -> String { "/dev/fd/\(n)" }

    static func sample(_ flag: String) -> String {
        switch flag {
        case "log-severity": return "warning"
        case "log-format": return "text"
        case "client-protocol": return "grpc"
        case "custom-endpoint": return "http://127.0.0.1:1/storage/v1/"
        case "file-mode", "dir-mode": return "0750"
        case "limit-bytes-per-sec", "limit-ops-per-sec": return "100"
        case "http-client-timeout", "max-retry-sleep", "stat-cache-ttl", "type-cache-ttl": return "30s"
        case "prometheus-port": return "9100"
        case "o": return "ro"
        default: return "5"
        }
    }

    static func yaml(path: String, value: String) -> String {
        let parts = path.split(separator: ".")
        var out = ""
        for (i, p) in parts.enumerated() {
            out += String(repeating: "    ", count: i) + p + ":" + (i == parts.count - 1 ? " \(value.isEmpty ? "\"\"" : value)\n" : "\n")
        }
        return out
    }

    /// `--name value` pairs of an argument list (switches map to "").
    static func pairs(_ args: [String]) -> [String: String] {
        var out: [String: String] = [:]
        var i = 0
        while i < args.count {
            if i + 1 < args.count, !args[i + 1].hasPrefix("--") {
                out[args[i]] = args[i + 1]
                i += 2
            } else {
                out[args[i]] = ""
                i += 1
            }
        }
        return out
    }
}
