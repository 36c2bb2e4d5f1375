import Foundation

/// A hard end that every clock made with it obeys whatever their bytes do, once set (the
/// unmount's bound: docs/SEMANTICS.md §5.5).
public final class OperationLimit: @unchecked Sendable {
    private let lock = NSLock()
    private var value: BucketClock.Instant?
    public init() {}
    public var end: BucketClock.Instant? {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

/// The deadline of one filesystem operation (docs/SEMANTICS.md §5.2): `timeout` after its start,
/// or after the last byte it moved, whichever is later. A wait that moves nothing (a metadata
/// call, a request before its first byte) ends at `timeout`; a transfer whose bytes keep moving
/// pushes the end forward with each byte (`moved()`), so only a stall ends it. A fixed clock
/// (`sliding: false`) never moves; `limit`, once set, caps either.
public final class OperationClock: @unchecked Sendable {
    public let timeout: Duration
    public let sliding: Bool
    private let limit: OperationLimit?
    private let lock = NSLock()
    private var last: BucketClock.Instant

    public init(timeout: Duration, sliding: Bool = true, limit: OperationLimit? = nil,
                from start: BucketClock.Instant = .now) {
        self.timeout = timeout
        self.sliding = sliding
        self.limit = limit
        last = start
    }

    /// A clock that ends at `end` and never moves.
    public convenience init(fixedEnd end: BucketClock.Instant) {
        let now = ContinuousClock.now
        self.init(timeout: end - now, sliding: false, from: now)
    }

    /// When the operation must be over unless more bytes move first.
    public var end: BucketClock.Instant {
        let own = lock.withLock { last + timeout }
        guard let hard = limit?.end else { return own }
        return min(own, hard)
    }

    /// Bytes moved now: the deadline restarts from here (for a sliding clock).
    public func moved() {
        guard sliding else { return }
        let now = ContinuousClock.now
        lock.withLock { if now > last { last = now } }
    }
}

/// What a filesystem operation hands down to every store call it makes, as task-local values:
/// one deadline for the whole operation, all its requests and retries included, that restarts
/// whenever the operation moves bytes (docs/SEMANTICS.md §5.2).
public enum OperationContext {
    /// The current operation's clock; nil outside an operation (a store call then has only its
    /// own deadline).
    @TaskLocal public static var clock: OperationClock?

    /// When the current operation must be over, as things stand now; nil outside an operation.
    public static var deadline: BucketClock.Instant? { clock?.end }

    /// The earlier of `own` and the operation's deadline.
    public static func deadline(capping own: BucketClock.Instant) -> BucketClock.Instant {
        guard let d = deadline else { return own }
        return min(own, d)
    }

    /// The current operation moved bytes (a transfer's progress): its deadline restarts.
    public static func moved() { clock?.moved() }

    /// Runs `body` under a sliding deadline of `timeout` (under an enclosing operation, its clock
    /// stays in force when it ends earlier).
    public static func run<T>(timeout: Duration, _ body: () async throws -> T) async rethrows -> T {
        if let outer = clock, outer.end <= ContinuousClock.now + timeout { return try await body() }
        return try await $clock.withValue(OperationClock(timeout: timeout)) { try await body() }
    }

    /// Runs `body` under `clock`.
    public static func run<T>(_ clock: OperationClock, _ body: () async throws -> T) async rethrows -> T {
        try await $clock.withValue(clock) { try await body() }
    }
}
