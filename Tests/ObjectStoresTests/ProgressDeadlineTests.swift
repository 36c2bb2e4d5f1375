import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import StorageModel
import Testing

/// Deadlines on progress (docs/SEMANTICS.md §5.2): the operation's deadline bounds each wait that
/// moves nothing, and restarts with every byte an upload sends or a read receives; a transfer
/// that keeps moving outlasts it, one that stops does not.
@Suite struct ProgressDeadlineTests {
    @Test func aSlidingClockRestartsWithEachMove() async throws {
        let clock = OperationClock(timeout: .milliseconds(300))
        let first = clock.end
        try await Task.sleep(for: .milliseconds(100))
        clock.moved()
        #expect(clock.end >= first + .milliseconds(90), "the end moved with the bytes")
        let fixed = OperationClock(fixedEnd: ContinuousClock.now + .milliseconds(300))
        let fixedEnd = fixed.end
        try await Task.sleep(for: .milliseconds(50))
        fixed.moved()
        #expect(fixed.end == fixedEnd, "a fixed clock never moves")
    }

    @Test func aLimitCapsEveryClockMadeWithIt() {
        let limit = OperationLimit()
        let clock = OperationClock(timeout: .seconds(60), limit: limit)
        #expect(clock.end > ContinuousClock.now + .seconds(50))
        let hard = ContinuousClock.now + .milliseconds(10)
        limit.end = hard
        clock.moved()
        #expect(clock.end == hard, "moving bytes do not pass the unmount's bound")
    }

    @Test func theOperationsDeadlineFollowsItsClock() async {
        #expect(OperationContext.deadline == nil)
        await OperationContext.run(timeout: .milliseconds(200)) {
            let before = OperationContext.deadline!
            try? await Task.sleep(for: .milliseconds(60))
            OperationContext.moved()
            #expect(OperationContext.deadline! >= before + .milliseconds(50))
            // An inner run never outlasts the outer operation.
            await OperationContext.run(timeout: .seconds(60)) {
                #expect(OperationContext.deadline! <= ContinuousClock.now + .milliseconds(250))
            }
        }
    }

    /// The socket buffers took 8 MiB at once, then, a second later, the body went at the link's
    /// pace (64 KiB every 100 ms, 640 KiB/s): the pace since the burst, 1920 KiB in 3.98 s, lets
    /// the burst drain in about 17 s (at the link's own pace it needs 12.8 s: the allowance is on
    /// the long side, never short). Before a pace is known it drains at the slowest pace given; a
    /// body that was never held back leaves nothing.
    @Test func theBacklogIsTheBurstAtTheLinksPace() {
        let t0 = ContinuousClock.now
        var slow = SendBacklog(start: t0)
        for i in 1...32 { slow.record(Int64(i) << 18, at: t0 + .microseconds(500 * i)) }  // 8 MiB in 16 ms
        #expect(slow.drainTime(slowest: 1_048_576) == .seconds(8), "before a pace: at the slowest")
        var taken: Int64 = 8 << 20
        for i in 1...30 {
            taken += 64 << 10
            slow.record(taken, at: t0 + .milliseconds(1000 + 100 * i))
        }
        let drain = slow.drainTime(slowest: 1_048_576)
        #expect(drain > .seconds(16) && drain < .seconds(18), "\(drain)")
        // Steps: a MiB taken within 20 ms every 2 s (the buffers refilled as they drain), 512 KiB/s:
        // the pace is the steps' average, not the speed within a step.
        var steps = SendBacklog(start: t0)
        steps.record(8 << 20, at: t0)
        for i in 1...5 {
            for j in 0..<4 { steps.record((8 << 20) + Int64(i - 1) * (1 << 20) + Int64(j + 1) * (1 << 18),
                                          at: t0 + .seconds(2 * i) + .milliseconds(5 * j)) }
        }
        let stepped = steps.drainTime(slowest: 1_048_576)
        #expect(stepped > .seconds(15) && stepped < .seconds(17), "\(stepped)")
        let none = SendBacklog(start: t0)
        #expect(none.drainTime(slowest: 1_048_576) == .zero)
        // The first piece starts the burst, however long the connection took to open.
        var late = SendBacklog(start: t0)
        late.record(1 << 18, at: t0 + .seconds(2))
        late.record(8 << 20, at: t0 + .seconds(2) + .milliseconds(10))
        #expect(late.drainTime(slowest: 1_048_576) == .seconds(8))
    }

    /// 9 MiB (one streamed request) through a server that reads at 2 MiB/s (at least 4.5 s, on
    /// any machine): the upload takes longer than the 3 s deadline of its operation and of the
    /// store, and succeeds in its one request. Under a 1 s idle timeout: what the loopback's socket buffers hold when
    /// the last byte leaves takes seconds to drain at this pace, and the answer is awaited (a
    /// read timeout counting that drain cut it, and the session was asked).
    @Test func aSlowStreamedUploadOutlastsTheDeadlineWhileItsBytesMove() async throws {
        var tuning = fastTuning
        tuning.idleTimeout = .seconds(1)
        try await withGCSServer(deadline: .seconds(3), tuning: tuning) { server, store in
            let data = bigData((9 << 20) + 7, seed: 41)
            server.configure { $0.uploadPace = 2 << 20 }
            let start = ContinuousClock.now
            let info = try await OperationContext.run(timeout: .seconds(3)) {
                try await store.write("slow.bin", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            }
            let took = ContinuousClock.now - start
            #expect(info.size == Int64(data.count))
            #expect(server.object("slow.bin")?.data == data)
            #expect(took > .milliseconds(4400), "past the 3 s deadline, or the link was not slow: \(took)")
            let ranges = server.recorded.filter { $0.method == "PUT" }.compactMap { $0.headers["content-range"] }
            #expect(ranges == ["bytes 0-\(data.count - 1)/\(data.count)"], "one request, never asked: \(ranges)")
            print("9 MiB at 2 MiB/s, 1 s idle timeout: \(took)")
        }
    }

    /// The slow link of a large upload at the scale of a test: 16 MiB through a server that reads
    /// at 2 MiB/s (5 MB before the reset, then the 11.25 MiB after what the server kept: at least
    /// 8 s on any machine), outlasts a 2 s deadline several times over (a 1 s deadline was shorter than the
    /// watchdog's ticks took when the whole suite shared two cores in CI: it passed between two
    /// of them, and the session could not be asked), and its connection is reset in the middle (after 5 MB, of which the
    /// server keeps the 256 KiB multiples, as the resumable-upload documentation allows). The
    /// session is asked what it holds, only the rest is sent again, and the object holds exactly
    /// the file's bytes.
    @Test func aResetSlowUploadResumesAndOutlastsItsDeadline() async throws {
        try await withGCSServer(deadline: .seconds(2)) { server, store in
            let data = bigData((16 << 20) + 321, seed: 43)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("slowreset-\(UUID().uuidString)").path
            try data.write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            server.configure { $0.uploadPace = 2 << 20; $0.dropUploadAfterBytes = 5_000_000 }
            let start = ContinuousClock.now
            let info = try await OperationContext.run(timeout: .seconds(2)) {
                try await store.write("slowreset.bin", from: .file(path: path), metadata: .init(), preconditions: .doesNotExist)
            }
            let took = ContinuousClock.now - start
            #expect(server.read { $0.dropsDone } == 1, "the connection was reset once")
            #expect(info.size == Int64(data.count))
            #expect(server.object("slowreset.bin")?.data == data)
            let persisted = 5_000_000 / (256 << 10) * (256 << 10)
            let ranges = server.recorded.filter { $0.method == "PUT" }.compactMap { $0.headers["content-range"] }
            // Asked first (again if the question itself timed out, as under load in CI), then resumed.
            let asked = ranges.prefix { $0 == "bytes */\(data.count)" }
            #expect(!asked.isEmpty, "the session was asked first: \(ranges)")
            #expect(ranges.dropFirst(asked.count).first == "bytes \(persisted)-\(data.count - 1)/\(data.count)", "resumed where the server said: \(ranges)")
            print("16 MiB, reset after 5 MB, at 2 MiB/s: \(took)")
            #expect(took >= .seconds(7), "the transfer lasted 3.5 deadlines, or the link was not slow: \(took)")
        }
    }

    /// A server that, asked what a session holds after a reset, finishes the object with what it
    /// holds (fake-gcs-server does; docs/TESTING.md): the upload must not take that object for the
    /// file. It fails, and the short object is removed again.
    @Test func aSessionFinishedShortIsNotTakenForTheFile() async throws {
        try await withGCSServer { server, store in
            let data = bigData((12 << 20) + 5, seed: 44)
            server.configure { $0.finishWhenAsked = true; $0.dropUploadAfterBytes = 5_000_000 }
            await #expect(throws: StorageError.self) {
                try await store.write("short.bin", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            }
            #expect(server.read { $0.dropsDone } == 1)
            #expect(server.object("short.bin") == nil, "the short object stays")
        }
    }

    /// A streamed download (how the mount reads) whose body comes 8 KiB every 25 ms (about 0.9 s
    /// for 300 KB) under a 300 ms deadline of its operation and of the store: it completes with
    /// the right bytes.
    @Test func aTrickledReadOutlastsTheDeadlineWhileItsBytesCome() async throws {
        try await withGCSServer(deadline: .milliseconds(300)) { server, store in
            let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
            let info = try await store.write("t", from: .data(payload), metadata: .init(), preconditions: .none)
            server.configure { $0.mediaFault = .trickle(piece: 8 << 10, every: .milliseconds(25)); $0.mediaFaultTimes = 1 }
            let start = ContinuousClock.now
            let got = GCSFaultTests.Received()
            try await OperationContext.run(timeout: .milliseconds(300)) {
                try await store.stream("t", generation: info.generation, range: 0..<Int64(payload.count)) { got.add($0) }
            }
            let took = ContinuousClock.now - start
            #expect(got.data == payload)
            #expect(took > .milliseconds(600), "the body did not trickle: \(took)")
        }
    }
}
