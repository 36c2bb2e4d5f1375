import BucketFS
import Foundation
import FuseKit
import StorageModel

/// A settable clock for `MountConfig.now`.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var t: Double
    init(_ start: Double = 1_800_000_000) { t = start }
    var now: Double {
        lock.lock(); defer { lock.unlock() }
        return t
    }
    func advance(_ seconds: Double) {
        lock.lock(); defer { lock.unlock() }
        t += seconds
    }
}

/// A mount over a `MemoryStore` with its own cache directory and an injected clock.
final class Harness: @unchecked Sendable {
    let store: MemoryStore
    let clock: TestClock
    let fs: BucketFileSystem
    let cacheDirectory: String
    var config: MountConfig { fs.config }

    init(store: MemoryStore = MemoryStore(), _ configure: (inout MountConfig) -> Void = { _ in }) {
        self.store = store
        let clock = TestClock()
        self.clock = clock
        cacheDirectory = NSTemporaryDirectory() + "bucketfs-core-tests-" + UUID().uuidString
        var c = MountConfig()
        c.cacheDirectory = cacheDirectory
        c.metadataTTL = 5
        c.now = { clock.now }
        configure(&c)
        fs = try! BucketFileSystem(store: store, config: c)
    }

    deinit { try? FileManager.default.removeItem(atPath: cacheDirectory) }

    static let root = BucketFileSystem.rootIno

    /// Walks `a/b/c` from the root with lookups; returns the last entry.
    func lookup(_ path: String) async throws(Errno) -> FuseEntry {
        var parent = Self.root
        var entry: FuseEntry? = nil
        for seg in path.split(separator: "/") {
            let e = try await fs.lookup(parent: parent, name: String(seg))
            parent = e.attributes.ino
            entry = e
        }
        guard let entry else { return try await FuseEntry(attributes: fs.getattr(ino: Self.root).0, entryTimeout: 0, attrTimeout: 0) }
        return entry
    }

    func ino(_ path: String) async throws(Errno) -> UInt64 {
        if path.isEmpty { return Self.root }
        return try await lookup(path).attributes.ino
    }

    /// opendir + readdir from offset 0 until an empty answer + releasedir, as the kernel does.
    /// `chunk` limits how many entries are taken from each answer (a small reply buffer).
    func readdirAll(_ ino: UInt64, chunk: Int = .max) async throws(Errno) -> [DirectoryEntry] {
        let fh = try await fs.opendir(ino: ino)
        defer { fs.releasedir(ino: ino, fh: fh) }
        var out: [DirectoryEntry] = []
        var offset: UInt64 = 0
        while true {
            let part = try await fs.readdir(ino: ino, fh: fh, offset: offset)
            if part.isEmpty { break }
            let taken = part.prefix(chunk)
            out += taken
            offset = taken.last!.offset
        }
        return out
    }

    func names(_ path: String) async throws(Errno) -> [String] {
        try await readdirAll(ino(path)).map(\.name)
    }

    /// open O_RDONLY, read everything in `chunk`-sized reads, release.
    func readAll(_ path: String, chunk: Int = 128 << 10) async throws(Errno) -> Data {
        try await readAll(ino: ino(path), chunk: chunk)
    }

    /// Like `readAll(_:)` without a lookup (the kernel keeps entries for their timeout).
    func readAll(ino: UInt64, chunk: Int = 128 << 10) async throws(Errno) -> Data {
        let fh = try await fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        var out = Data()
        while true {
            let d = try await fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: chunk)
            if d.isEmpty { break }
            out += d
        }
        try await fs.release(ino: ino, fh: fh)
        return out
    }

    /// create + write + release (release flushes), in the directory `parent`.
    @discardableResult
    func createFile(_ parentPath: String, _ name: String, _ data: Data) async throws(Errno) -> UInt64 {
        let parent = try await ino(parentPath)
        let (e, fh) = try await fs.create(parent: parent, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        if !data.isEmpty { _ = try await fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: data) }
        try await fs.flush(ino: e.attributes.ino, fh: fh)
        try await fs.release(ino: e.attributes.ino, fh: fh)
        return e.attributes.ino
    }

    func xattr(_ ino: UInt64, _ name: String) async throws(Errno) -> String {
        String(decoding: try await fs.getxattr(ino: ino, name: name), as: UTF8.self)
    }

    func setXattr(_ ino: UInt64, _ name: String, _ value: String, flags: Int32 = 0) async throws(Errno) {
        try await fs.setxattr(ino: ino, name: name, value: Array(value.utf8), flags: flags)
    }
}

extension Data {
    /// Deterministic non-repeating-ish bytes for content checks.
    static func pattern(_ count: Int, seed: UInt32 = 1) -> Data {
        var d = Data(count: count)
        var x = seed &* 2_654_435_761 | 1
        d.withUnsafeMutableBytes { (p: UnsafeMutableRawBufferPointer) in
            for i in 0..<count {
                x ^= x << 13; x ^= x >> 17; x ^= x << 5
                p[i] = UInt8(truncatingIfNeeded: x)
            }
        }
        return d
    }
}
