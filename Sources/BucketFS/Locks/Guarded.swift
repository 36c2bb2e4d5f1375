import Foundation

/// A lock that owns what it guards: the value is reachable only inside `withLock`, so touching
/// it without the lock does not compile (docs/ARCHITECTURE.md, "Locks own their state"). A leaf
/// lock: `body` takes no other lock and does no I/O unless its owner's docs say otherwise.
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    /// GUARDED_BY(lock), by construction.
    private var value: Value

    init(_ value: Value) { self.value = value }

    @inline(__always)
    func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
