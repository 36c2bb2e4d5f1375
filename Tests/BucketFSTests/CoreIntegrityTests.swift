import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// docs/SEMANTICS.md §5 integrity and durability in the core: no wrong byte handed over, no write abandoned.
@Suite struct CoreIntegrityTests {
    static let big = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    func readAll(_ h: Harness, _ ino: UInt64, _ fh: UInt64, size: Int, chunk: Int = 131_072) async throws(Errno) -> Data {
        var out = Data()
        while out.count < size {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: chunk)
            if d.isEmpty { break }
            out.append(d)
        }
        return out
    }

    @Test func aShortAnswerIsRetriedNeverServed() async throws {
        let h = Harness()
        h.store.put("f", Self.big)
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.damageNextReads(times: 2) { $0.prefix(1000) }
        #expect(try await readAll(h, ino, fh, size: Self.big.count) == Self.big)
        try await h.fs.release(ino: ino, fh: fh)
        // An empty answer (no byte at all) is retried too.
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.damageNextReads(times: 2) { _ in Data() }
        #expect(try await readAll(h, ino, fh2, size: Self.big.count) == Self.big)
        try await h.fs.release(ino: ino, fh: fh2)
    }

    /// Reads `big` whole through 1 MiB parts fetched one ahead, the next `times` streams cut
    /// after `after` bytes; the ranges the store was asked for.
    func readWithCutStreams(times: Int, after: Int) async throws -> [Range<Int64>] {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 1 << 20; $0.readStreams = 1 }
        h.store.put("f", Self.big)
        let ino = try await h.ino("f")
        h.store.resetCounts()
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.cutNextStreams(times: times, after: after)
        #expect(try await readAll(h, ino, fh, size: Self.big.count) == Self.big)
        try await h.fs.release(ino: ino, fh: fh)
        return h.store.reads.compactMap(\.range)
    }

    /// A stream that breaks after some of a part's bytes: the rest of that part comes with one
    /// more request from where the bytes stop, not with a request per kernel read.
    @Test func aPartCutMidStreamIsFetchedAgainFromWhereItStopped() async throws {
        let ranges = try await readWithCutStreams(times: 1, after: 300_000)
        #expect(ranges.contains(300_000..<(1 << 20)))
        // Three parts and the rest of the first one.
        #expect(ranges.count == 4, "\(ranges)")
    }

    /// A part whose streams keep breaking is fetched again a bounded number of times, then its
    /// bytes are read on demand; the reader still gets exactly the object.
    @Test func aPartThatKeepsBreakingIsReadOnDemandAfterAFewTries() async throws {
        let firstPart = try await readWithCutStreams(times: 1000, after: 100_000).filter { $0.lowerBound < 1 << 20 }
        // The part's stream, three more from where each stopped, then reads of what is left.
        let streamed = firstPart.filter { $0.upperBound == 1 << 20 && $0.lowerBound % 100_000 == 0 }
        #expect(streamed.map(\.lowerBound) == [0, 100_000, 200_000, 300_000], "\(firstPart)")
        #expect(firstPart.count > streamed.count)
    }

    @Test func anAnswerThatStaysShortIsEIO() async throws {
        let h = Harness { $0.operationTimeout = 2 }
        h.store.put("f", Self.big)
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.damageNextReads(times: 100) { _ in Data() }
        await #expect(throws: Errno.EIO) { _ = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 4096) }
    }

    @Test func wrongBytesFailTheReadThatCompletesTheFile() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 1 << 20 }
        h.store.put("f", Self.big)
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        // Same length, one byte flipped in the first part: only the checksum can tell.
        h.store.damageNextReads { d in var x = d; x[x.startIndex + 10] ^= 0xFF; return x }
        await #expect(throws: Errno.EIO) { _ = try await readAll(h, ino, fh, size: Self.big.count) }
        // Later reads of that handle fail too.
        await #expect(throws: Errno.EIO) { _ = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 10) }
        try await h.fs.release(ino: ino, fh: fh)
        // A fresh open after the failure memory reads the right bytes.
        h.clock.advance(10)
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(try await readAll(h, ino, fh2, size: Self.big.count) == Self.big)
    }

    @Test func anAppendNeverUploadsWhatItCouldNotVerify() async throws {
        let h = Harness { $0.operationTimeout = 2 }
        let v1 = h.store.put("log", Self.big)
        let ino = try await h.ino("log")
        // The copy made for an append gets damaged bytes of the right length: the open fails.
        h.store.damageNextReads(times: 100) { d in var x = d; x[x.startIndex] ^= 1; return x }
        await #expect(throws: Errno.EIO) { _ = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND)) }
        // Empty answers (a lying 416 or a cut body): the open fails too.
        h.store.damageNextReads(times: 100) { _ in Data() }
        await #expect(throws: Errno.EIO) { _ = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_APPEND)) }
        #expect(h.store.count("write") == 0)
        #expect(h.store.object("log")?.generation == v1.generation)
        #expect(h.store.data("log") == Self.big)
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory).filter { $0.hasPrefix("stage-") }.isEmpty)
    }

    @Test func stageFilesOfACrashedRunGoToLostAndFound() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "unsaved.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("not yet uploaded".utf8))
        // A stage that was only opened (clean) leaves nothing behind.
        h.store.put("clean", "x")
        let cino = try await h.ino("clean")
        _ = try await h.fs.open(ino: cino, flags: OpenFlags(O_WRONLY))
        // The process "dies" here: a second core on the same cache directory is refused while
        // the first holds it…
        var c = h.config
        c.cacheDirectory = h.cacheDirectory
        #expect(throws: CacheDirectoryError.self) { _ = try BucketFileSystem(store: h.store, config: c) }
        // …and after the first is gone (its lock released), recovers the dirty stage.
        let copy = h.cacheDirectory + "-copy"
        try FileManager.default.copyItem(atPath: h.cacheDirectory, toPath: copy)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try? FileManager.default.removeItem(atPath: copy + "/.lock")
        c.cacheDirectory = copy
        c.readOnly = true  // uploads nothing: it stays in lost+found
        let second = try BucketFileSystem(store: h.store, config: c)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let lost = try FileManager.default.contentsOfDirectory(atPath: copy + "/lost+found").filter { !$0.hasSuffix(".json") }
        #expect(lost.count == 1)
        #expect(lost.first?.hasPrefix("unsaved.txt.") == true)
        #expect(lost.first.flatMap { FileManager.default.contents(atPath: copy + "/lost+found/" + $0) } == Data("not yet uploaded".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: copy).filter { $0.hasPrefix("stage-") }.isEmpty)
    }

    @Test func shutdownUploadsDirtyFilesOrKeepsThem() async throws {
        let h = Harness { $0.retryBackoffMax = 60 }
        let (a, fa) = try await h.fs.create(parent: Harness.root, name: "a", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fa, offset: 0, data: Data("A".utf8))
        h.store.failNext("write", with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: a.attributes.ino, fh: fa) }
        let (b, fb) = try await h.fs.create(parent: Harness.root, name: "b", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: b.attributes.ino, fh: fb, offset: 0, data: Data("B".utf8))
        h.store.failNext("write", with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: b.attributes.ino, fh: fb) }
        // At unmount each dirty file gets one more attempt (a background attempt may come first
        // on a slow machine: the first pause is 1 s); one attempt more fails. Each file ends in
        // exactly one place: the bucket, or lost+found with its bytes.
        h.store.failNext("write", with: .unknown(status: 503, message: "busy"))
        await h.fs.shutdown(within: .seconds(10))
        let lost = lostFiles(h)
        for name in ["a", "b"] {
            let inBucket = h.store.data(name) == Data(name.uppercased().utf8)
            let kept = lost.filter { $0.hasPrefix(name + ".") }
            #expect(inBucket != (kept.count == 1), "'\(name)': in the bucket \(inBucket), in lost+found \(kept)")
            if let k = kept.first {
                #expect(FileManager.default.contents(atPath: h.config.lostAndFound + "/" + k) == Data(name.uppercased().utf8))
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory).filter { $0.hasPrefix("stage-") }.isEmpty)
    }

    @Test func cacheDirectoriesThatAreLinksOrForeignAreRefused() throws {
        let base = NSTemporaryDirectory() + "bucketfs-cachedir-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createSymbolicLink(atPath: base + "/link", withDestinationPath: base)
        #expect(throws: CacheDirectoryError.self) { try StagingArea.prepare(base + "/link") }
        // Created 0700.
        try StagingArea.prepare(base + "/fresh")
        let mode = (try FileManager.default.attributesOfItem(atPath: base + "/fresh")[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o700)
        if geteuid() == 0 {
            try FileManager.default.createDirectory(atPath: base + "/theirs", withIntermediateDirectories: false)
            #expect(chown(base + "/theirs", 65534, 65534) == 0)
            #expect(throws: CacheDirectoryError.self) { try StagingArea.prepare(base + "/theirs") }
        }
        // The default is the same for the same mount point on every run, different for another.
        let env = ["XDG_CACHE_HOME": "/x/cache"]
        let d1 = StagingArea.defaultDirectory(forMountPoint: "/mnt/data", environment: env)
        #expect(d1 == StagingArea.defaultDirectory(forMountPoint: "/mnt/data", environment: env))
        #expect(d1 != StagingArea.defaultDirectory(forMountPoint: "/srv/data", environment: env))
        #expect(d1.hasPrefix("/x/cache/bucketfs/data-"))
    }
}
