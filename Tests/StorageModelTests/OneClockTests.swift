import Foundation
import Testing

/// Time comes from `BucketClock` (docs/ARCHITECTURE.md, "One clock"): a source line that reads
/// real time or waits without it is one of the exceptions that page lists, file by file with
/// their number, and the page lists none that is not there.
@Suite struct OneClockTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// What reads the time or waits on its own: the standard library's and Foundation's clocks,
    /// Dispatch's and NIO's "now", the C calls, sleeps, and an implicit `.now` (`= .now`,
    /// `(.now`), which is never a `BucketClock`'s (that one is always `clock.now`).
    static let rawClock = try! NSRegularExpression(pattern: [
        #"ContinuousClock"#, #"SuspendingClock"#, #"\bDate\(\)"#, #"\bDate\.now\b"#, #"DispatchTime"#, #"DispatchWallTime"#,
        #"NIODeadline\.now"#, #"\.now\(\)"#, #"(?<![\w)\]?!])\.now\b"#, #"\bclock_gettime\b"#, #"\bgettimeofday\b"#,
        #"\btime\(nil\)"#, #"systemUptime"#, #"timeIntervalSinceNow"#, #"CFAbsoluteTimeGetCurrent"#, #"mach_absolute_time"#,
        #"\bTask\.sleep\("#, #"\bThread\.sleep"#, #"\busleep\("#, #"\bnanosleep\("#,
    ].joined(separator: "|"))

    /// The lines of `source` that read real time or wait without the clock (comments aside).
    static func rawLines(in source: String) -> [String] {
        source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("//") { return false }
            return rawClock.firstMatch(in: line, range: NSRange(location: 0, length: (line as NSString).length)) != nil
        }
    }

    /// The exceptions table of ARCHITECTURE's "One clock": path → number of lines, nil for a
    /// folder allowed any.
    static func allowed() throws -> [String: Int?] {
        let doc = try String(contentsOf: root.appendingPathComponent("docs/ARCHITECTURE.md"), encoding: .utf8)
        let section = try #require(doc.components(separatedBy: "\n## One clock\n").dropFirst().first?
            .components(separatedBy: "\n## ").first)
        let row = try NSRegularExpression(pattern: #"^\| `(Sources/[^`]+)` \| (\d+|any) \|"#, options: [.anchorsMatchLines])
        let ns = section as NSString
        var table: [String: Int?] = [:]
        for m in row.matches(in: section, range: NSRange(location: 0, length: ns.length)) {
            let count = ns.substring(with: m.range(at: 2))
            table[ns.substring(with: m.range(at: 1))] = count == "any" ? .some(nil) : .some(Int(count))
        }
        return table
    }

    @Test("the check finds each way of reading real time, and leaves the clock's own reads")
    func checkFindsRawClocks() {
        for raw in ["let t = ContinuousClock.now", "try await Task.sleep(for: .seconds(1))", "let d = Date()",
                    "done.wait(timeout: .now() + 2)", "from start: BucketClock.Instant = .now) {", "let n = time(nil)",
                    "usleep(5_000)", "let left = expires.timeIntervalSinceNow", "let u = ProcessInfo.processInfo.systemUptime",
                    "let s = SuspendingClock().now", "let w = DispatchTime.now()", "if x < Date.now { }"] {
            #expect(Self.rawLines(in: raw).count == 1, "\(raw)")
        }
        for clean in ["let t = clock.now", "try await config.clock.sleep(for: pause)", "let d = Date(timeIntervalSince1970: 0)",
                      "let e = transport.clock.now + timeout", "// ContinuousClock.now, in a comment", "let s = config.clock.seconds",
                      "public static let real = BucketClock.real", "let updated = clock.date"] {
            #expect(Self.rawLines(in: clean).isEmpty, "\(clean)")
        }
    }

    @Test("the exceptions table is read")
    func tableIsRead() throws {
        let table = try Self.allowed()
        #expect(table["Sources/StorageModel/BucketClock.swift"] == .some(3))
        #expect(table["Sources/BucketFSCommand/"] == .some(nil))
        #expect(table.count > 5)
    }

    @Test("no source reads real time or waits without BucketClock, but the exceptions ARCHITECTURE lists")
    func everyClockIsTheClock() throws {
        let table = try Self.allowed()
        var found: [String: [String]] = [:]
        let base = Self.root.appendingPathComponent("Sources")
        let walk = try #require(FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil))
        for case let url as URL in walk where url.pathExtension == "swift" {
            let path = String(url.path.dropFirst(Self.root.path.count + 1))
            let lines = Self.rawLines(in: try String(contentsOf: url, encoding: .utf8))
            if !lines.isEmpty { found[path] = lines }
        }
        var wrong: [String] = []
        for (path, lines) in found.sorted(by: { $0.key < $1.key }) {
            if let folder = table.keys.first(where: { $0.hasSuffix("/") && path.hasPrefix($0) }), table[folder] == .some(nil) { continue }
            let allowed = (table[path] ?? 0) ?? 0
            if lines.count != allowed {
                wrong.append("\(path): \(lines.count) lines read real time, docs/ARCHITECTURE.md allows \(allowed): \(lines)")
            }
        }
        for (path, count) in table where !path.hasSuffix("/") && found[path] == nil {
            wrong.append("\(path): docs/ARCHITECTURE.md allows \(count.map(String.init) ?? "any") lines of real time; it has none")
        }
        #expect(wrong.isEmpty, "take the component's BucketClock (docs/ARCHITECTURE.md, \"One clock\"), or list the exception with its reason:\n\(wrong.joined(separator: "\n"))")
    }
}
