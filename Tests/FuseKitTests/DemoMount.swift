import Foundation
import KernelFiles
#if canImport(Glibc)
import Glibc
#endif

/// Runs a command and collects its output.
struct Shell {
    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static func run(_ arguments: [String], timeout: TimeInterval = 30) throws -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = arguments
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        // Read before waiting: a full pipe would block the child.
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(status: p.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }
}

enum DemoMountError: Error, CustomStringConvertible {
    case binaryMissing(String)
    case notMounted(String)
    var description: String {
        switch self {
        case .binaryMissing(let p): return "fusekit-demo not found at \(p) (build it: swift build --product fusekit-demo)"
        case .notMounted(let log): return "the demo mount did not answer: \(log)"
        }
    }
}

/// `fusekit-demo` in a child process (STYLE trap 7: the test process only ever touches the mount
/// from outside the daemon). Always unmounted by `close()`.
final class DemoMount {
    let mountpoint: String
    let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrFile: String
    private var closed = false

    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["FUSEKIT_DEMO"] { return path }
        // The test runner lives in the build products directory, next to fusekit-demo.
        let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var dir = exe.deletingLastPathComponent()
        // Bundle layout: …/debug/bucketfsPackageTests.xctest (file) or a directory bundle.
        while !dir.path.hasSuffix("/debug") && !dir.path.hasSuffix("/release") && dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("fusekit-demo").path) { break }
            dir = dir.deletingLastPathComponent()
        }
        return dir.appendingPathComponent("fusekit-demo").path
    }

    init(arguments: [String] = []) throws {
        let binary = Self.binary
        guard FileManager.default.isExecutableFile(atPath: binary) else { throw DemoMountError.binaryMissing(binary) }
        let base = NSTemporaryDirectory() + "fusekit-test-" + UUID().uuidString.prefix(8)
        mountpoint = base + "/mnt"
        stderrFile = base + "/stderr.log"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: stderrFile, contents: nil)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [mountpoint] + arguments
        process.standardOutput = stdoutPipe
        process.standardError = FileHandle(forWritingAtPath: stderrFile)
        try process.run()
        do {
            try waitUntilMounted()
        } catch {
            close()
            throw error
        }
    }

    var path: (String) -> String { { [mountpoint] in mountpoint + "/" + $0 } }

    var isMounted: Bool {
        guard let text = KernelFile.text("/proc/self/mountinfo") else { return false }
        return text.split(separator: "\n").contains { $0.split(separator: " ").dropFirst(4).first == Substring(mountpoint) }
    }

    var stderr: String { (try? String(contentsOfFile: stderrFile, encoding: .utf8)) ?? "" }

    private func waitUntilMounted() throws {
        let deadline = Date().addingTimeInterval(60)  // a ceiling for a loaded machine, not a speed
        while Date() < deadline {
            if !process.isRunning { throw DemoMountError.notMounted("exited \(process.terminationStatus): \(stderr)") }
            var st = stat()
            if isMounted && lstat(mountpoint + "/hello.txt", &st) == 0 { return }
            usleep(20_000)
        }
        throw DemoMountError.notMounted("timeout: \(stderr)")
    }

    /// Waits for the daemon to exit; returns its status, or nil on timeout.
    func waitForExit(timeout: TimeInterval) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// Everything the daemon printed on stdout; "" while it still runs (reading would block).
    func output() -> String {
        guard !process.isRunning else { return "" }
        return String(decoding: stdoutPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    /// Lazy unmount, then make sure the daemon is gone; safe to call twice.
    func close() {
        guard !closed else { return }
        closed = true
        _ = try? Shell.run(["fusermount3", "-u", "-z", "-q", mountpoint])
        if waitForExit(timeout: 10) == nil {
            process.terminate()
            _ = waitForExit(timeout: 5)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        try? FileManager.default.removeItem(atPath: (mountpoint as NSString).deletingLastPathComponent)
    }

    deinit { close() }
}

/// Runs `body` with a fresh demo mount and always cleans up.
func withDemoMount<T>(_ arguments: [String] = [], _ body: (DemoMount) throws -> T) throws -> T {
    let mount = try DemoMount(arguments: arguments)
    defer { mount.close() }
    return try body(mount)
}
