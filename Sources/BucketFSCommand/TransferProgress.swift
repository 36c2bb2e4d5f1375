import Foundation

/// Progress of a long library command (`put -r`): files, bytes and rate, redrawn on one line of
/// standard error at most ten times a second, and only when standard error is a terminal (pipes
/// and log files stay quiet).
final class TransferProgress: @unchecked Sendable {
    let totalFiles: Int
    let totalBytes: Int64
    let terminal: Bool
    private let lock = NSLock()
    private var files = 0
    private var bytes: Int64 = 0
    private let start = ContinuousClock.now
    private var lastDraw: ContinuousClock.Instant?

    init(files: Int, bytes: Int64, terminal: Bool) {
        totalFiles = files
        totalBytes = bytes
        self.terminal = terminal
    }

    func fileDone(bytes n: Int64) {
        lock.withLock {
            files += 1
            bytes += n
            let now = ContinuousClock.now
            if let last = lastDraw, now - last < .milliseconds(100) { return }
            lastDraw = now
            draw(final: false)
        }
    }

    func finish() {
        lock.withLock { draw(final: true) }
    }

    /// The line shown, e.g. `12/40 files, 3.2 MiB of 10.0 MiB, 1.1 MiB/s`.
    static func line(files: Int, totalFiles: Int, bytes: Int64, totalBytes: Int64, seconds: Double) -> String {
        let rate = seconds > 0 ? Double(bytes) / seconds : 0
        return "\(files)/\(totalFiles) files, \(size(Double(bytes))) of \(size(Double(totalBytes))), \(size(rate))/s"
    }

    static func size(_ b: Double) -> String {
        if b < 1024 { return "\(Int(b)) B" }
        if b < 1_048_576 { return String(format: "%.1f KiB", b / 1024) }
        if b < 1_073_741_824 { return String(format: "%.1f MiB", b / 1048576) }
        return String(format: "%.2f GiB", b / 1073741824)
    }

    private func draw(final: Bool) {
        guard terminal else { return }
        let c = (ContinuousClock.now - start).components
        let secs = Double(c.seconds) + Double(c.attoseconds) / 1e18
        let text = "\r\u{1B}[K" + Self.line(files: files, totalFiles: totalFiles, bytes: bytes, totalBytes: totalBytes, seconds: secs)
            + (final ? "\n" : "")
        FileHandle.standardError.write(Data(text.utf8))
    }
}
