@testable import BucketFS
import Foundation
import FuseKit
import Logging
import StorageModel
import Testing
import TestSupport

/// The read cache on local disk (docs/SEMANTICS.md §3.6, "The read cache"), without a kernel: a
/// core over a `MemoryStore` reads through it, and a second core on the same directory is the
/// next mount. What the store is asked is counted; what the cache holds is read from its files.
@Suite final class ReadCacheTests {
    let directory = NSTemporaryDirectory() + "bucketfs-read-cache-tests-" + UUID().uuidString

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    func harness(_ store: MemoryStore, capacity: Int64 = 64 << 20,
                 writer: CacheFill.Writer? = nil) -> Harness {
        Harness(store: store) { [directory] in
            // What a reopen costs is the cache's alone: no small file kept in memory by a walk.
            $0.walkAheadFiles = 0
            $0.readCacheDirectory = directory
            $0.readCacheBytes = capacity
            if let writer { $0.readCacheWriter = writer }
        }
    }

    /// Every media request the store was asked (ranged reads and streams alike count "read").
    func mediaReads(_ store: MemoryStore) -> Int { store.count("read") }

    func files(_ suffix: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(suffix) }
    }

    /// Reads `name` whole through a core over `store` and lets the cache's check end (as an
    /// unmount does); the core then goes, as a mount does.
    func readOnce(_ store: MemoryStore, _ name: String, capacity: Int64 = 64 << 20) async throws -> (Data, ReadCache.Counts) {
        let h = harness(store, capacity: capacity)
        let data = try await h.readAll(name)
        await h.core.readPath.settle()
        let counts = try #require(h.core.readPath.readCache).snapshot
        return (data, counts)
    }

    @Test func aFileReadWholeIsReadAgainThroughTheNextMountWithNoRequest() async throws {
        let store = MemoryStore()
        let content = Data.pattern(5 << 20, seed: 3)
        store.put("d/a.bin", content)
        let (first, c1) = try await readOnce(store, "d/a.bin")
        #expect(first == content)
        #expect(c1.misses == 1 && c1.hits == 0)
        #expect(files(".json").count == 1 && files(".data").count == 1)
        store.resetCounts()
        let (second, c2) = try await readOnce(store, "d/a.bin")
        #expect(second == content)
        #expect(mediaReads(store) == 0)
        #expect(c2.hits == 1 && c2.misses == 0)
        #expect(c2.readBytes == Int64(content.count))
    }

    @Test func aNewGenerationIsNeverServedTheOldOnesBytes() async throws {
        let store = MemoryStore()
        store.put("a.bin", Data.pattern(1 << 20, seed: 1))
        _ = try await readOnce(store, "a.bin")
        let newer = Data.pattern(1 << 20, seed: 2)
        _ = store.replaceBehind("a.bin", newer)
        store.resetCounts()
        let (read, counts) = try await readOnce(store, "a.bin")
        #expect(read == newer)
        #expect(mediaReads(store) > 0)
        #expect(counts.hits == 0)
        // The old generation's files went with its first open of another.
        #expect(files(".json").count == 1)
        store.resetCounts()
        let (again, _) = try await readOnce(store, "a.bin")
        #expect(again == newer && mediaReads(store) == 0)
    }

    @Test func aCacheFileChangedOnDiskIsNeverServed() async throws {
        let store = MemoryStore()
        let content = Data.pattern(3 << 20, seed: 5)
        store.put("a.bin", content)
        _ = try await readOnce(store, "a.bin")
        let data = try #require(files(".data").first)
        // One byte in the middle of the file, as a disk or a person might change it.
        let fd = open(directory + "/" + data, O_RDWR)
        var b: UInt8 = 0
        _ = pread(fd, &b, 1, 2 << 20)
        b ^= 0xFF
        _ = pwrite(fd, &b, 1, 2 << 20)
        close(fd)
        store.resetCounts()
        let h = harness(store)
        let read = try await h.readAll("a.bin")
        #expect(read == content)
        #expect(mediaReads(store) > 0)
        let counts = try #require(h.core.readPath.readCache).snapshot
        #expect(counts.dropped == 1)
        #expect(!FileManager.default.fileExists(atPath: directory + "/" + data) || counts.entries == 1)
    }

    @Test func theLeastRecentlyUsedGoFirstWithinTheBound() async throws {
        let store = MemoryStore()
        for n in ["a", "b", "c", "d"] { store.put(n, Data.pattern(1 << 20, seed: UInt32(n.utf8.first!))) }
        let h = harness(store, capacity: 3 << 20)
        for n in ["a", "b", "c"] { _ = try await h.readAll(n) }
        await h.core.readPath.settle()
        // a is used again: b is now the least recently used.
        _ = try await h.readAll("a")
        _ = try await h.readAll("d")
        await h.core.readPath.settle()
        let cache = try #require(h.core.readPath.readCache)
        #expect(cache.snapshot.evictions == 1)
        #expect(cache.snapshot.bytes <= 3 << 20)
        store.resetCounts()
        for n in ["a", "c", "d"] { _ = try await h.readAll(n) }
        #expect(mediaReads(store) == 0)
        _ = try await h.readAll("b")
        #expect(mediaReads(store) > 0)
    }

    @Test func aFullDiskStopsTheFillAndReadsGoOnFromTheBucket() async throws {
        let store = MemoryStore()
        let content = Data.pattern(4 << 20, seed: 9)
        store.put("a.bin", content)
        // The disk takes 1 MiB, then says it is full.
        final class Disk: @unchecked Sendable { let lock = NSLock(); var written = 0 }
        let disk = Disk()
        let h = harness(store, writer: { fd, bytes, offset in
            let full = disk.lock.withLock { () -> Bool in
                if disk.written + bytes.count > 1 << 20 { return true }
                disk.written += bytes.count
                return false
            }
            return full ? ENOSPC : CacheFill.pwriteAll(fd, bytes, offset)
        })
        let read = try await h.readAll("a.bin")
        #expect(read == content)
        await h.core.readPath.settle()
        let cache = try #require(h.core.readPath.readCache)
        #expect(cache.snapshot.entries == 0)
        #expect(cache.snapshot.capacity == 0)
        #expect(files(".data").isEmpty && files(".json").isEmpty)
        // Nothing is filled again, and reads still come whole from the bucket.
        store.resetCounts()
        #expect(try await h.readAll("a.bin") == content)
        #expect(mediaReads(store) > 0)
    }

    @Test func aFillThatNeverFinishedIsNotServedByTheNextMount() async throws {
        let store = MemoryStore()
        let content = Data.pattern(4 << 20, seed: 4)
        store.put("a.bin", content)
        do {
            let h = harness(store)
            let ino = try await h.ino("a.bin")
            let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
            // A first read of less than a part: only that part is fetched (one of a whole part
            // or more would read the file through).
            _ = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 128 << 10)
            try await h.fs.release(ino: ino, fh: fh)
            await h.core.readPath.settle()
            #expect(files(".json").isEmpty)
        }
        store.resetCounts()
        let (read, counts) = try await readOnce(store, "a.bin")
        #expect(read == content)
        #expect(counts.hits == 0 && mediaReads(store) > 0)
    }

    /// Small files fetched ahead of a walk are kept too, and a walk through the next mount
    /// takes them from the cache: no request for any of them.
    @Test func aWalkThroughTheNextMountTakesItsFilesFetchedAheadFromTheCache() async throws {
        let store = MemoryStore()
        var content: [String: Data] = [:]
        for i in 0..<12 {
            let name = String(format: "w/f%02d", i)
            content[name] = Data.pattern(100 << 10, seed: UInt32(i + 40))
            store.put(name, content[name]!)
        }
        func walk(_ h: Harness) async throws {
            _ = try await h.names("w")
            for name in content.keys.sorted() { #expect(try await h.readAll(name) == content[name]) }
            await h.core.readPath.settle()
        }
        func walking() -> Harness {
            Harness(store: store) { [directory] in
                $0.readCacheDirectory = directory
                $0.readCacheBytes = 64 << 20
            }
        }
        do {
            let h = walking()
            try await walk(h)
            // Whatever the walk fetched ahead (and lent to the opens) is kept and checked.
            #expect(await eventually { files(".json").count == 12 })
            h.core.readPath.dropAll()
        }
        store.resetCounts()
        let h = walking()
        try await walk(h)
        #expect(mediaReads(store) == 0, "\(store.reads.map { "\($0.name) \($0.range.map { "\($0)" } ?? "")" })")
    }

    // MARK: - the directory itself

    func object(_ name: String, _ data: Data, generation: Int64 = 1) -> ObjectInfo {
        ObjectInfo(bucket: "b", name: name, generation: generation, metageneration: 1, size: Int64(data.count),
                   timeCreated: Date(), updated: Date(), md5Hash: nil, crc32c: CRC32C.base64(CRC32C.checksum(data)),
                   writable: WritableMetadata())
    }

    @Test func aSecondMountOnTheDirectoryReadsWithoutIt() throws {
        let log = LogLines()
        let first = try #require(ReadCache.open(directory: directory, capacity: 1 << 20, logger: capturingLogger(log)))
        #expect(ReadCache.open(directory: directory, capacity: 1 << 20, logger: capturingLogger(log)) == nil)
        #expect(log.all.contains { $0.contains("in use by another mount") && $0.contains(directory) })
        _ = first
    }

    @Test func foreignAndDamagedFilesAreNamedAndNeverServed() async throws {
        let content = Data.pattern(300 << 10, seed: 8)
        let info = object("x", content)
        let key = try #require(ReadCacheRecord.key(info))
        do {
            let cache = try #require(ReadCache.open(directory: directory, capacity: 1 << 20, logger: Logger(label: "t")))
            guard case let .filling(fill) = cache.open(info) else { Issue.record("no fill"); return }
            fill.write(content, at: 0)
            await cache.settle()
            guard case .complete = cache.open(info) else { Issue.record("not complete"); return }
        }
        // A file of someone else's, and a record that names another object than its file name.
        try Data("mine".utf8).write(to: URL(fileURLWithPath: directory + "/notes.txt"))
        let other = ReadCacheRecord.Key(bucket: "b", name: "y", generation: 1, crc32c: key.crc32c).hash
        try FileManager.default.copyItem(atPath: "\(directory)/\(key.hash).json", toPath: "\(directory)/\(other).json")
        try FileManager.default.copyItem(atPath: "\(directory)/\(key.hash).data", toPath: "\(directory)/\(other).data")
        let log = LogLines()
        let cache = try #require(ReadCache.open(directory: directory, capacity: 1 << 20, logger: capturingLogger(log)))
        #expect(log.all.contains { $0.contains("notes.txt") && $0.contains("not the cache's") })
        #expect(log.all.contains { $0.contains(other) && $0.contains("does not match") })
        #expect(FileManager.default.fileExists(atPath: directory + "/notes.txt"))
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/\(other).data"))
        #expect(cache.snapshot.entries == 1)
        guard case let .complete(file) = cache.open(info) else { Issue.record("not kept"); return }
        #expect(try file.whole() == content)
    }

    @Test func bytesThatDoNotMatchTheObjectsChecksumAreNeverKept() async throws {
        let content = Data.pattern(600 << 10, seed: 6)
        let info = object("x", content)
        let log = LogLines()
        let cache = try #require(ReadCache.open(directory: directory, capacity: 1 << 20, logger: capturingLogger(log)))
        guard case let .filling(fill) = cache.open(info) else { Issue.record("no fill"); return }
        var wrong = content
        wrong[1000] ^= 1
        fill.write(wrong, at: 0)
        await cache.settle()
        #expect(cache.snapshot.entries == 0 && cache.snapshot.dropped == 1)
        #expect(log.all.contains { $0.contains("do not check") })
        guard case .filling = cache.open(info) else { Issue.record("served what did not check"); return }
    }
}
