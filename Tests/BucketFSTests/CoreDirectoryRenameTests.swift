@testable import BucketFS
import Foundation
import FuseKit
import Logging
import StorageModel
import Testing
import TestSupport

/// A flat bucket's directory rename (docs/SEMANTICS.md §3.2): its progress is its liveness. On the
/// mount's clock (a `ManualClock` each copy moves on), a rename that keeps moving objects
/// outlasts the default `--op-timeout` (60 s) as a whole and succeeds; one where nothing moves
/// for 60 s ends with EIO, logs what moved by name, refuses any other rename of its directory
/// (EBUSY: coreutils mv would move the directory into the half-built one), and finishes when
/// the same rename is asked again.
@Suite struct CoreDirectoryRenameTests {
    static let count = 300

    func harness(_ clock: ManualClock, _ logs: LogLines? = nil, checkEvery: Int = 50) async throws -> Harness {
        let h = Harness(checkEvery: checkEvery, { $0.clock = clock.clock }, logger: logs.map { capturingLogger($0) })
        for i in 0..<Self.count { h.store.put(String(format: "big/f%05d", i), Data("object \(i)".utf8)) }
        return h
    }

    func rename(_ h: Harness, _ from: String, _ to: String, noReplace: Bool = true) async throws(Errno) {
        let (fromDir, fromName) = split(from), (toDir, toName) = split(to)
        try await h.fs.rename(parent: h.ino(fromDir), name: fromName, newParent: h.ino(toDir), newName: toName,
                              flags: noReplace ? RenameFlags.noReplace.rawValue : 0)
    }

    func split(_ path: String) -> (String, String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }

    func names(_ h: Harness, under prefix: String) -> [String] {
        h.store.names.filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    @Test func aRenameThatKeepsMovingOutlastsTheOpTimeout() async throws {
        let clock = ManualClock()
        let h = try await harness(clock)
        #expect(h.config.operationTimeout == 60)  // the default's promise
        // Each copy takes 2 s on the mount's clock: 300 objects, 16 at once, take far longer
        // than 60 s in all, but an object moves every fraction of it.
        h.store.setCopyHook { _ in clock.advance(by: .seconds(2)) }
        _ = try await h.lookup("big")
        try await rename(h, "big", "big2")
        #expect(clock.elapsed >= .seconds(2 * Self.count))
        #expect(names(h, under: "big/").isEmpty)
        #expect(names(h, under: "big2/") == (0..<Self.count).map { String(format: "f%05d", $0) })
        #expect(h.store.counts["copy"] == Self.count)
        #expect(h.store.counts["delete"] == Self.count)
        #expect(h.core.unfinishedRenames.destination(of: "big") == nil)
        #expect(try await h.names("big2").count == Self.count)
    }

    @Test func aStalledRenameEndsNamesWhatMovedAndFinishesWhenAskedAgain() async throws {
        let clock = ManualClock()
        let logs = LogLines()
        let h = try await harness(clock, logs, checkEvery: 1)
        // The copies of f00000-f00039 go through; the rest hang (a server that stopped
        // answering) until cancelled.
        let hung = Tally()
        h.store.setCopyHook { name in
            if Int(name.suffix(5))! < 40 { return }
            _ = hung.next()
            while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(2)) }
            throw StorageError.cancelled
        }
        _ = try await h.lookup("big")
        let first = Task { () async -> Errno? in
            do throws(Errno) { try await self.rename(h, "big", "big2"); return nil } catch { return error }
        }
        // Once the hung copies wait (16 at once), the clock passes the op timeout with no move.
        while hung.value < 16 || h.store.counts["delete", default: 0] < 40 { try await Task.sleep(for: .milliseconds(5)) }
        clock.advance(by: .seconds(59))
        try await Task.sleep(for: .milliseconds(50))
        clock.advance(by: .seconds(2))
        #expect(await first.value == .EIO)
        let moved = names(h, under: "big2/"), left = names(h, under: "big/")
        #expect(moved == (0..<40).map { String(format: "f%05d", $0) })
        #expect(left.count == Self.count - 40 && Set(left).isDisjoint(with: moved))
        let line = try #require(logs.all.first { $0.contains("did not finish") })
        #expect(line.contains("40 of 300 object(s) moved"))
        #expect(line.contains("first 'big/f00000', last 'big/f00039'"))
        #expect(line.contains("260 left where they were (first 'big/f00040', last 'big/f00299')"))
        #expect(line.contains("To finish it, rename 'big' over 'big2' on this mount (`mv -T big big2`"))
        #expect(h.core.unfinishedRenames.destination(of: "big") == "big2")
        #expect(FileManager.default.fileExists(atPath: h.cacheDirectory + "/" + UnfinishedRenames.fileName))
        // A mount after a crash on the same cache directory knows it too.
        #expect(UnfinishedRenames.recorded(in: h.cacheDirectory) == ["big": "big2"])
        #expect(UnfinishedRenames(directory: h.cacheDirectory, logger: Logger(label: "test")).destination(of: "big") == "big2")

        // What coreutils mv 9.1 does next: moves big into what it sees as the directory big2.
        await #expect(throws: Errno.EBUSY) { try await self.rename(h, "big", "big2/big") }
        #expect(names(h, under: "big2/big/").isEmpty)
        // Nor is the half-built new name moved away.
        await #expect(throws: Errno.EBUSY) { try await self.rename(h, "big2", "big3") }

        // The kernel may hold entries of the half-built big2 and of what moved into it.
        let seen = try await h.lookup("big2/f00007").attributes.ino
        #expect(try await h.names("big2").count == 40)

        // The same rename again, over big2 (`mv -T`: the kernel refuses RENAME_NOREPLACE over
        // an existing name itself, so mv asks a plain rename next), goes on and finishes.
        h.store.setCopyHook(nil)
        try await rename(h, "big", "big2", noReplace: false)
        #expect(names(h, under: "big/").isEmpty)
        #expect(names(h, under: "big2/") == (0..<Self.count).map { String(format: "f%05d", $0) })
        #expect(h.core.unfinishedRenames.destination(of: "big") == nil)
        #expect(!FileManager.default.fileExists(atPath: h.cacheDirectory + "/" + UnfinishedRenames.fileName))
        #expect(try await h.names("big2").count == Self.count)
        #expect(try await h.readAll("big2/f00007") == Data("object 7".utf8))
        #expect(try await h.readAll("big2/f00123") == Data("object 123".utf8))
        _ = seen
    }

    @Test func aCopyLeftByARenameThatStoppedIsNotMadeAgain() async throws {
        // A rename that stopped between a copy and its delete left the object in both places.
        let clock = ManualClock()
        let h = try await harness(clock, checkEvery: 1)
        h.store.failNext("delete", times: 1, with: .unknown(status: 503, message: "busy"))
        _ = try await h.lookup("big")
        await #expect(throws: Errno.self) { try await self.rename(h, "big", "big2") }
        let both = Set(names(h, under: "big/")).intersection(names(h, under: "big2/"))
        #expect(both.count == 1)
        // The kernel holds it under both names (two nodes), and the half-built big2's listing.
        let name = try #require(both.first)
        _ = try await h.lookup("big/" + name)
        _ = try await h.lookup("big2/" + name)
        _ = try await h.names("big2")
        try await rename(h, "big", "big2", noReplace: false)
        #expect(try await h.readAll("big2/" + name) == h.store.data("big2/" + name))
        #expect(try await h.names("big2").count == Self.count)
        #expect(names(h, under: "big/").isEmpty)
        #expect(names(h, under: "big2/").count == Self.count)
    }

    @Test func removingTheOldDirectoryForgetsItsUnfinishedRename() async throws {
        let clock = ManualClock()
        let h = try await harness(clock)
        h.store.failNext("copy", times: 1, with: .unknown(status: 403, message: "no"))
        h.store.setCopyHook { name in if name != "big2/f00000" { try await Task.sleep(for: .milliseconds(20)) } }
        _ = try await h.lookup("big")
        await #expect(throws: Errno.self) { try await self.rename(h, "big", "big2") }
        #expect(h.core.unfinishedRenames.destination(of: "big") == "big2")
        for n in names(h, under: "big/") { try await h.fs.unlink(parent: h.ino("big"), name: n) }
        try await h.fs.rmdir(parent: Harness.root, name: "big")
        #expect(h.core.unfinishedRenames.destination(of: "big") == nil)
        #expect(UnfinishedRenames.recorded(in: h.cacheDirectory).isEmpty)
    }
}

/// A count shared with a store hook.
final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    var value: Int { lock.withLock { n } }
    func next() -> Int { lock.withLock { n += 1; return n } }
}
