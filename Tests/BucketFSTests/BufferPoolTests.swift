@testable import BucketFS
import Foundation
import StorageModel
import Testing
import TestSupport

/// Read buffers kept for reuse: memory is handed out again only once nothing points into it, the
/// pool never holds more than its limit, and what waits too long is freed.
@Suite struct BufferPoolTests {
    @Test func sizesRoundUpToPowersOfTwoFromTheSmallestPooled() {
        #expect(BufferPool.sizeClass(100) == 100)
        #expect(BufferPool.sizeClass(BufferPool.minPooled / 2) == BufferPool.minPooled / 2)
        #expect(BufferPool.sizeClass(BufferPool.minPooled / 2 + 1) == BufferPool.minPooled)
        #expect(BufferPool.sizeClass(1 << 20) == 1 << 20)
        #expect(BufferPool.sizeClass((1 << 20) + 1) == 2 << 20)
        #expect(BufferPool.sizeClass(5_000_000) == 8 << 20)
    }

    @Test func aBufferGivenBackIsHandedOutAgainWithinTheLimit() {
        let pool = BufferPool(limit: 3 << 20)
        let a = pool.take(1 << 20), b = pool.take(1 << 20), c = pool.take(1 << 20), d = pool.take(1 << 20)
        for x in [a, b, c, d] { pool.give(x) }
        // Three fit under the limit; the fourth was freed.
        #expect(pool.heldBytes == 3 << 20)
        let again = pool.take(900_000)
        #expect(again.capacity == 1 << 20)
        #expect([a, b, c].contains { $0.base == again.base })
        #expect(pool.heldBytes == 2 << 20)
        // Another size class is not served from these.
        let other = pool.take(2 << 20)
        #expect(![a, b, c, d].contains { $0.base == other.base })
        pool.give(again)
        pool.give(other)
        #expect(pool.heldBytes <= 3 << 20)
    }

    @Test func buffersWaitingStayWithinWhatTheBudgetHasFree() {
        let budget = ReadBudget(capacity: 4 << 20)
        let pool = BufferPool(limit: 8 << 20, room: { budget.capacity - budget.inUse })
        let owner = NSObject()
        #expect(budget.reserve(3 << 20, for: owner))
        let a = pool.take(1 << 20), b = pool.take(1 << 20)
        pool.give(a)
        pool.give(b)
        // 3 MiB of the 4 are reserved: one 1 MiB buffer may wait, not two.
        #expect(pool.heldBytes == 1 << 20)
        budget.release(3 << 20, for: owner)
        pool.give(pool.take(2 << 20))
        #expect(pool.heldBytes == 3 << 20)
    }

    /// A reader that keeps the budget full reserves its next part before the last one is given
    /// back: within the slack that buffer waits all the same, and the next part takes it.
    @Test func theSlackKeepsABufferWhenTheBudgetIsFull() {
        for slack in [0, 2 << 20] {
            let budget = ReadBudget(capacity: 4 << 20)
            let pool = BufferPool(limit: 8 << 20, slack: slack, room: { budget.capacity - budget.inUse })
            let owner = NSObject()
            #expect(budget.reserve(4 << 20, for: owner))
            let a = pool.take(1 << 20)
            pool.give(a)
            #expect(pool.heldBytes == (slack == 0 ? 0 : 1 << 20))
            pool.give(pool.take(2 << 20))
            pool.give(pool.take(1 << 20))
            // Never more than the slack beyond a full budget.
            #expect(pool.heldBytes <= slack)
            #expect(pool.invariantViolations().isEmpty)
        }
    }

    @Test func smallBuffersAreNotKept() {
        let pool = BufferPool(limit: 8 << 20)
        pool.give(pool.take(4096))
        #expect(pool.heldBytes == 0)
    }

    @Test func buffersLeftWaitingAreFreed() {
        let clock = ManualClock()
        let pool = BufferPool(limit: 8 << 20, idle: .seconds(5), clock: clock.clock)
        pool.give(pool.take(1 << 20))
        clock.advance(by: .seconds(1))
        pool.sweep()
        #expect(pool.heldBytes == 1 << 20)
        clock.advance(by: .seconds(5))
        pool.sweep()
        #expect(pool.heldBytes == 0)
    }

    /// The pool frees what waited by itself: its sweep waits on the clock (here a manual one,
    /// moved past the idle time), not on real time.
    @Test func thePoolSweepsByItselfOnItsClock() async throws {
        let clock = ManualClock()
        let pool = BufferPool(limit: 8 << 20, idle: .seconds(5), clock: clock.clock)
        pool.give(pool.take(1 << 20))
        try await clock.waitForSleepers(1)
        #expect(pool.heldBytes == 1 << 20)
        #expect(clock.pauses == [.seconds(5) + .milliseconds(100)])
        clock.advance(by: .seconds(6))
        #expect(await eventually { pool.heldBytes == 0 })
    }

    /// The reply handed to the kernel points into a part's buffer: the buffer must not be reused
    /// (overwritten by another part) while that reply still exists, even after the part itself
    /// was dropped.
    @Test func aPartsMemoryIsReusedOnlyAfterItsLastReplyIsGone() async throws {
        let pool = BufferPool(limit: 8 << 20)
        let size = 1 << 20
        var part: PartBuffer? = PartBuffer(capacity: size, pool: pool) { buf in
            try buf.append(Data(repeating: 0xAB, count: size))
        }
        let reply = try await part!.bytes(0..<size)
        part = nil
        // Taken while the reply lives: another buffer, never the reply's memory.
        let other = pool.take(size)
        reply.withUnsafeBytes { r in
            #expect(UnsafeRawPointer(other.base) != r.baseAddress)
        }
        other.base.initializeMemory(as: UInt8.self, repeating: 0x11, count: size)
        #expect(reply.allSatisfy { $0 == 0xAB })
        pool.give(other)
    }
}
