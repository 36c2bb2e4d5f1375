import Foundation
import KernelFiles
import Testing

/// /proc and /sys files are read to their end, and only through KernelFile
/// (docs/ARCHITECTURE.md, "Kernel files").
@Suite struct KernelFileTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("a /proc file longer than a page is read to its end, where Foundation's readers stop at the first page")
    func readsPastTheFirstPage() throws {
        // /proc/kallsyms: megabytes, stable while the kernel runs, and its size says 0.
        let path = "/proc/kallsyms"
        let all = try #require(KernelFile.bytes(path))
        #expect(all.count > 64 << 10)
        #expect(all.last == UInt8(ascii: "\n"))
        let byCat = try Self.run("/bin/sh", ["-c", "cat \(path) | wc -c"])
        #expect(Int(byCat.trimmingCharacters(in: .whitespacesAndNewlines)) == all.count)
        // The trap this reader exists for: if Foundation ever reads such a file whole, this
        // expectation is what to revisit, not the rule.
        let foundation = FileManager.default.contents(atPath: path)?.count ?? 0
        #expect(foundation < all.count)
    }

    @Test("a file that cannot be opened is nil")
    func missing() {
        #expect(KernelFile.bytes("/proc/self/no-such-file") == nil)
        #expect(KernelFile.text("/nonexistent/x") == nil)
    }

    /// Whole-file readers of Foundation, which stop at a /proc file's first page.
    static let readers = ["String(contentsOfFile:", "String(contentsOf:", "contents(atPath:", "Data(contentsOf:",
                          "FileHandle(forReadingAtPath:", "FileHandle(forReadingFrom:", "NSString(contentsOfFile:"]

    /// The /proc and /sys reads of `source` that do not go through KernelFile: a whole-file reader
    /// given a /proc or /sys path, written out or through a name bound to one in the same file
    /// (a `let`, a `var` or a parameter's default).
    static func foreignReads(in source: String) -> [String] {
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
        var names: Set<String> = []
        let binding = try! NSRegularExpression(pattern: #"(\w+)\s*(?::\s*[\w.?]+)?\s*=\s*"/(?:proc|sys)/"#)
        for line in lines {
            let ns = line as NSString
            for m in binding.matches(in: line, range: NSRange(location: 0, length: ns.length)) {
                names.insert(ns.substring(with: m.range(at: 1)))
            }
        }
        var found: [String] = []
        for line in lines {
            for reader in readers {
                var rest = Substring(line)
                while let r = rest.range(of: reader) {
                    let argument = rest[r.upperBound...].drop { $0 == " " }
                    let head = argument.prefix { $0 != "," && $0 != ")" }.trimmingCharacters(in: .whitespaces)
                    let literal = head.hasPrefix("\"/proc/") || head.hasPrefix("\"/sys/")
                        || head.hasPrefix("\"/proc\\(") || head.hasPrefix("URL(fileURLWithPath: \"/proc") || head.hasPrefix("URL(fileURLWithPath: \"/sys")
                    if literal || names.contains(head) { found.append(line.trimmingCharacters(in: .whitespaces)) }
                    rest = rest[r.upperBound...]
                }
            }
        }
        return found
    }

    @Test("the rule's check finds each way of reading /proc past KernelFile")
    func checkFindsForeignReads() {
        #expect(Self.foreignReads(in: #"let t = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)"#).count == 1)
        #expect(Self.foreignReads(in: """
            static func on(file: String = "/sys/class/dmi/id/product_name") -> Bool {
                guard let d = FileManager.default.contents(atPath: file) else { return false }
            """).count == 1)
        #expect(Self.foreignReads(in: #"let d = FileManager.default.contents(atPath: "/proc/\(pid)/stat")"#).count == 1)
        #expect(Self.foreignReads(in: #"let t = KernelFile.text("/proc/self/mountinfo")"#).isEmpty)
        #expect(Self.foreignReads(in: #"let d = FileManager.default.contents(atPath: dir + "/x.json")"#).isEmpty)
    }

    @Test("no source or test file reads /proc or /sys except through KernelFile")
    func everyKernelFileReadGoesThroughKernelFile() throws {
        var offenders: [String] = []
        for folder in ["Sources", "Tests", "Examples", "Plugins"] {
            let base = Self.root.appendingPathComponent(folder)
            guard let walk = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walk where url.pathExtension == "swift" {
                if url.lastPathComponent == "KernelFileTests.swift" { continue }
                let text = try String(contentsOf: url, encoding: .utf8)
                for line in Self.foreignReads(in: text) { offenders.append("\(url.path): \(line)") }
            }
        }
        #expect(offenders.isEmpty, "read /proc and /sys with KernelFile.bytes or .text: \(offenders)")
    }

    static func run(_ tool: String, _ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
