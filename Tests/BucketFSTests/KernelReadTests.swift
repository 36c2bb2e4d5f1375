@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The read cache's complete files handed to the kernel to read itself (docs/SEMANTICS.md §3.6,
/// "The kernel reads the cache"), without a kernel: what `passthroughFile` answers an open, and
/// what it checked first.
@Suite final class KernelReadTests {
    let directory = NSTemporaryDirectory() + "bucketfs-kernel-read-tests-" + UUID().uuidString

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    func harness(_ store: MemoryStore) -> Harness {
        Harness(store: store) { [directory] in
            $0.walkAheadFiles = 0
            $0.readCacheDirectory = directory
            $0.readCacheBytes = 64 << 20
        }
    }

    /// Fills the cache with `name` through one mount (read whole, the fill checked), then opens it
    /// for reading through the next: (the harness, ino, fh).
    func filledThenOpened(_ store: MemoryStore, _ name: String) async throws -> (Harness, UInt64, UInt64) {
        try await fill(store, name)
        let h = harness(store)
        let ino = try await h.ino(name)
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        return (h, ino, fh)
    }

    /// One mount reads `name` whole and ends (its cache's lock goes with it).
    func fill(_ store: MemoryStore, _ name: String) async throws {
        let first = harness(store)
        _ = try await first.readAll(name)
        await first.core.readPath.settle()
    }

    func bytes(_ fd: Int32, _ count: Int) -> Data {
        var d = Data(count: count)
        let n = d.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, 0) }
        return d.prefix(max(0, n))
    }

    func dataFile() throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".data") }
        return directory + "/" + (try #require(names.first))
    }

    @Test func aCompleteFileIsHandedOverCheckedAndOnlyCheckedAgainOnceItChanged() async throws {
        let store = MemoryStore()
        let content = Data.pattern(3 << 20, seed: 7)
        store.put("a.bin", content)
        let (h, ino, fh) = try await filledThenOpened(store, "a.bin")
        let cache = try #require(h.core.readPath.readCache)
        let fd = try #require(await h.fs.passthroughFile(ino: ino, fh: fh))
        #expect(bytes(fd, content.count) == content)
        #expect(cache.snapshot.kernelOpens == 1 && cache.snapshot.readBytes == 0)
        let stamp = try #require(KernelReadStamps.stamp(fd))
        #expect(cache.kernelStamps.isChecked(stamp))
        // The same file again: handed over on its stamp.
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(await h.fs.passthroughFile(ino: ino, fh: fh2) != nil)
        #expect(cache.snapshot.kernelOpens == 2)
        try await h.fs.release(ino: ino, fh: fh2)
        try await h.fs.release(ino: ino, fh: fh)
        // Changed in place (its change time moves): checked again at the next open, found
        // changed, dropped, and that open reads from the bucket instead.
        let path = try dataFile()
        let w = open(path, O_RDWR)
        var b: UInt8 = 0
        _ = pread(w, &b, 1, 1 << 20)
        b ^= 0x5A
        _ = pwrite(w, &b, 1, 1 << 20)
        close(w)
        let fh3 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        store.resetCounts()
        #expect(await h.fs.passthroughFile(ino: ino, fh: fh3) == nil)
        #expect(cache.snapshot.dropped == 1 && cache.snapshot.kernelOpens == 2)
        var read = Data()
        while true {
            let d = try await h.fs.read(ino: ino, fh: fh3, offset: UInt64(read.count), size: 1 << 20)
            if d.isEmpty { break }
            read += d
        }
        #expect(read == content)
        #expect(store.count("read") > 0)
        // The stream left the dropped file at once: no second "changed" for this open.
        #expect(cache.snapshot.dropped == 1)
        try await h.fs.release(ino: ino, fh: fh3)
    }

    @Test func noFileIsHandedOverForAWriterAFillOrALargeFile() async throws {
        let store = MemoryStore()
        store.put("a.bin", Data.pattern(1 << 20, seed: 1))
        store.put("b.bin", Data.pattern(1 << 20, seed: 2))
        let (h, ino, fh) = try await filledThenOpened(store, "a.bin")
        // A writer's open (its content is its stage, not the cache's).
        let w = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR))
        #expect(await h.fs.passthroughFile(ino: ino, fh: w) == nil)
        try await h.fs.release(ino: ino, fh: w)
        try await h.fs.release(ino: ino, fh: fh)
        // A generation not complete in the cache (its first open starts the fill).
        let other = try await h.ino("b.bin")
        let ofh = try await h.fs.open(ino: other, flags: OpenFlags(O_RDONLY))
        #expect(await h.fs.passthroughFile(ino: other, fh: ofh) == nil)
        try await h.fs.release(ino: other, fh: ofh)
        // Over the bound: checked whole at every change, so not handed over.
        let cache = try #require(h.core.readPath.readCache)
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        let handle = try #require(h.core.superblock.handle(fh2))
        let file = try #require(handle.stream?.cachedFile)
        #expect(cache.forKernel(file, max: (1 << 20) - 1) == .notNow)
        #expect(cache.forKernel(file, max: 1 << 20) != .notNow)
        try await h.fs.release(ino: ino, fh: fh2)
    }
}
