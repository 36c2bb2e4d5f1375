import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import NIOCore
import NIOHTTP1
import StorageModel
import Testing

/// The network lies (docs/SEMANTICS.md §5): stalled and cut bodies, lost answers, Retry-After, deadlines.
/// Each case runs the real GCSStore against the in-process server with one fault injected.
@Suite struct GCSFaultTests {
    static let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })

    static var quickIdle: GCSStore.Tuning {
        var t = fastTuning
        t.idleTimeout = .milliseconds(500)
        return t
    }

    @Test func stallAfterHeadersIsAbandonedAndRetried() async throws {
        try await withGCSServer(tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1 }
            let start = ContinuousClock.now
            let data = try await store.read("o", generation: info.generation, range: nil)
            let took = ContinuousClock.now - start
            #expect(data == Self.payload)
            #expect(took >= .milliseconds(400), "waited for the idle timeout: \(took)")
            #expect(took < .seconds(10), "and not much longer: \(took)")
        }
    }

    @Test func stalledBodyForeverEndsWithinTheDeadline() async throws {
        try await withGCSServer(deadline: .seconds(3), tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1000 }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await store.read("o", generation: info.generation, range: 0..<1000) }
            #expect(e != nil)
            #expect(ContinuousClock.now - start < .seconds(10), "the 3 s deadline, not the stall's forever")
        }
    }

    @Test func cancellingAStalledReadEndsItAtOnce() async throws {
        var t = fastTuning
        t.idleTimeout = .seconds(60)
        try await withGCSServer(deadline: .seconds(60), tuning: t) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1 }
            let task = Task { try await store.read("o", generation: info.generation, range: nil) }
            try await Task.sleep(for: .milliseconds(300))
            let start = ContinuousClock.now
            task.cancel()
            let result = await task.result
            #expect(ContinuousClock.now - start < .seconds(5), "at once, not after the 60 s idle timeout")
            guard case .failure(let e) = result else { Issue.record("a cancelled read returned data"); return }
            #expect(e as? StorageError == .cancelled)
        }
    }

    @Test func unframedShortBodyIsNeverData() async throws {
        try await withGCSServer(tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            // Once: the retry gets the whole body.
            server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1 }
            #expect(try await store.read("o", generation: info.generation, range: 0..<200_000) == Self.payload.prefix(200_000))
            server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1 }
            #expect(try await store.read("o", generation: info.generation, range: nil) == Self.payload)
        }
        try await withGCSServer(deadline: .seconds(2), tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            // Always: an error, never the short bytes.
            server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1000 }
            let e = await storageError { _ = try await store.read("o", generation: info.generation, range: 10..<200_000) }
            #expect(e != nil)
        }
    }

    /// Collects what a streamed read delivers, and how it ended.
    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var bytes = Data()
        var data: Data { lock.withLock { bytes } }
        func add(_ d: Data) { lock.withLock { bytes.append(d) } }
    }

    @Test func aStreamIsRetriedUntilItsFirstByteAndNeverAfter() async throws {
        try await withGCSServer(tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            // A stall before any byte: retried, and the whole range comes.
            server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1 }
            let got = Received()
            try await store.stream("o", generation: info.generation, range: 1000..<250_000) { got.add($0) }
            #expect(got.data == Self.payload.subdata(in: 1000..<250_000))
            // Cut after 1000 bytes with a clean close: those bytes are delivered, then an error —
            // never a short answer taken as the whole, never the first bytes again.
            server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1 }
            let cut = Received()
            let e = await storageError {
                try await store.stream("o", generation: info.generation, range: 0..<200_000) { cut.add($0) }
            }
            #expect(e != nil)
            #expect(Self.payload.starts(with: cut.data))
            #expect(cut.data.count <= 1000)
        }
    }

    /// A 200 with the whole object for a range (a server or a front that ignores Range) is used
    /// for the range asked: the bytes before it are passed over, the answer ended after it; a
    /// whole body that comes short is a fault. A 200 with the range's bytes and their exact
    /// Content-Range (storage-testbench's injected faults) is the range (docs/SEMANTICS.md §5.1;
    /// Google's retry scenario 8 through a mount).
    @Test func wholeObjectAnswerToARangeIsUsedForTheRange() async throws {
        try await withGCSServer(deadline: .seconds(2), tuning: Self.quickIdle) { server, store in
            let info = try await store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            server.configure { $0.rangeAnswer = .wholeObject; $0.rangeAnswerTimes = 2 }
            let got = Received()
            try await store.stream("o", generation: info.generation, range: 100_000..<200_000) { got.add($0) }
            #expect(got.data == Self.payload.subdata(in: 100_000..<200_000))
            #expect(try await store.read("o", generation: info.generation, range: 5..<10) == Self.payload.subdata(in: 5..<10))
            // The whole body cut after 150,000 bytes: the 50,000 of the range delivered, then a fault.
            server.configure {
                $0.rangeAnswer = .wholeObject; $0.rangeAnswerTimes = 1
                $0.mediaFault = .cutAfter(keep: 150_000); $0.mediaFaultTimes = 1
            }
            let cut = Received()
            let e = await storageError {
                try await store.stream("o", generation: info.generation, range: 100_000..<200_000) { cut.add($0) }
            }
            #expect(e != nil)
            #expect(cut.data == Self.payload.subdata(in: 100_000..<150_000))
            // The range's bytes under a 200 with their exact Content-Range: taken, streamed or not.
            server.configure { $0.rangeAnswer = .rangeUnder200; $0.rangeAnswerTimes = 2 }
            let under = Received()
            try await store.stream("o", generation: info.generation, range: 100_000..<200_000) { under.add($0) }
            #expect(under.data == Self.payload.subdata(in: 100_000..<200_000))
            #expect(try await store.read("o", generation: info.generation, range: 7..<70) == Self.payload.subdata(in: 7..<70))
        }
    }

    /// Which answers to a range a streamed read takes (`MediaRequests.streamPlan`).
    @Test func streamPlans() {
        func plan(_ status: Int, _ headers: [(String, String)]) -> String {
            switch MediaRequests.streamPlan(status: status, headers: HTTPHeaders(headers), range: 100..<200) {
            case .exact: return "exact"
            case .whole(let skip): return "whole \(skip)"
            case .rejected: return "rejected"
            }
        }
        #expect(plan(206, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "100")]) == "exact")
        #expect(plan(206, [("Content-Range", "bytes 100-198/1000")]) == "rejected")
        #expect(plan(200, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "100")]) == "exact")
        #expect(plan(200, [("Content-Length", "1000"), ("x-goog-stored-content-length", "1000")]) == "whole 100")
        #expect(plan(200, [("Content-Length", "1000"), ("Content-Range", "bytes 0-999/1000")]) == "whole 100")
        // Neither the whole object nor the range: a fault.
        #expect(plan(200, [("Content-Length", "100"), ("x-goog-stored-content-length", "1000")]) == "rejected")
        #expect(plan(200, [("Content-Length", "999"), ("x-goog-stored-content-length", "1000")]) == "rejected")
        #expect(plan(200, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "1000")]) == "rejected")
        #expect(plan(200, [("Content-Length", "1000")]) == "rejected")
        // Transcoded: its length says nothing about the stored bytes.
        #expect(plan(200, [("Content-Length", "1000"), ("x-goog-stored-content-length", "1000"), ("Content-Encoding", "gzip")]) == "rejected")
    }

    @Test func lostDeleteAnswerIsASuccess() async throws {
        try await withGCSServer { server, store in
            let info = try await store.write("d", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            server.configure { $0.loseAnswerTo = "DELETE" }
            try await store.delete("d", preconditions: Preconditions(ifGenerationMatch: info.generation))
            #expect(server.object("d") == nil)
            #expect(server.recorded.filter { $0.method == "DELETE" }.count == 2, "the retry found 404")
            // A plain 404 (no lost answer) is still objectNotFound.
            let e = await storageError { try await store.delete("d", preconditions: Preconditions(ifGenerationMatch: info.generation)) }
            #expect(e == .objectNotFound(path: "d"))
        }
    }

    @Test func lostUploadAnswerThen412IsOurOwnObject() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.loseAnswerTo = "POST" }
            let info = try await store.write("new", from: .data(Self.payload), metadata: .init(), preconditions: .doesNotExist)
            #expect(info.size == Int64(Self.payload.count))
            #expect(server.object("new")?.data == Self.payload)
            // Someone else's bytes there: a real lost race, even after a lost answer.
            _ = try await store.write("taken", from: .data(Data("theirs".utf8)), metadata: .init(), preconditions: .none)
            server.configure { $0.failNext = 1 }
            let e = await storageError {
                _ = try await store.write("taken", from: .data(Data("mine".utf8)), metadata: .init(), preconditions: .doesNotExist)
            }
            #expect(e == .preconditionFailed(path: "taken"))
        }
    }

    @Test func lostCopyAnswerThen412IsOurOwnCopy() async throws {
        try await withGCSServer { server, store in
            _ = try await store.write("src", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            server.configure { $0.loseAnswerTo = "POST" }
            let info = try await store.copy(from: "src", sourceGeneration: nil, to: "dst", metadata: nil, preconditions: .doesNotExist)
            #expect(info.name == "dst")
            #expect(server.object("dst")?.data == Self.payload)
        }
    }

    @Test func retryAfterIsHonoured() async throws {
        try await withGCSServer { server, store in
            _ = try await store.write("o", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            server.configure { $0.retryAfterNext = 1; $0.retryAfterValue = "1" }
            let start = ContinuousClock.now
            _ = try await store.getMetadata("o")
            #expect(ContinuousClock.now - start >= .milliseconds(950), "waited as the server asked")
        }
        try await withGCSServer(deadline: .seconds(2)) { server, store in
            // A Retry-After beyond the deadline: give up at once, saying why.
            server.configure { $0.retryAfterNext = 1; $0.retryAfterValue = "30" }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await store.getMetadata("o") }
            #expect(ContinuousClock.now - start < .seconds(5), "at once, not after the 30 s asked for")
            guard case .retryLimitExceeded(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("asked to wait"))
        }
    }

    @Test func operationDeadlineCapsEveryCall() async throws {
        try await withGCSServer(deadline: .seconds(60)) { server, store in
            server.configure { $0.alwaysStatus = 503 }
            let start = ContinuousClock.now
            let e = await storageError {
                try await OperationContext.run(timeout: .seconds(1)) { _ = try await store.getMetadata("x") }
            }
            #expect(e != nil)
            #expect(ContinuousClock.now - start < .seconds(8), "the operation's 1 s (plus a busy machine's slack), not the store's 60 s")
        }
    }

    /// A kept-alive connection the server closed as it was taken from the pool fails the next
    /// call with `ioOnClosedChannel` before any byte of it left (fake-gcs-server does this now and
    /// then after a 416, and a cleanup DELETE failed with "I/O on closed channel"). A call without
    /// a body is then sent again even when it is not idempotent; one with a body, or any other
    /// connection failure of a call that is not idempotent, is not (docs/SEMANTICS.md §2).
    @Test func aCallTheServerNeverSawIsRepeated() {
        let closed: any Error = ChannelError.ioOnClosedChannel
        let mapped = HTTPTransport.map(closed)
        #expect(mapped.isTransient)
        #expect(HTTPTransport.repeatable(closed, mapped, idempotent: false, hasBody: false))
        #expect(!HTTPTransport.repeatable(closed, mapped, idempotent: false, hasBody: true))
        #expect(HTTPTransport.repeatable(closed, mapped, idempotent: true, hasBody: true))
        let reset: any Error = IOError(errnoCode: ECONNRESET, reason: "read")
        #expect(!HTTPTransport.repeatable(reset, HTTPTransport.map(reset), idempotent: false, hasBody: false))
        #expect(HTTPTransport.repeatable(reset, HTTPTransport.map(reset), idempotent: true, hasBody: false))
        let refused = StorageError.unauthenticated(message: "no")
        #expect(!HTTPTransport.repeatable(closed, refused, idempotent: true, hasBody: false))
    }
}
