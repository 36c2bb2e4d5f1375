import Foundation
import Logging

/// Logs a line once per key (an object and an operation), for the life of the store; remembers at
/// most `limit` keys, then starts over.
final class OnceLog: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: Set<String> = []
    private let limit: Int

    init(limit: Int = 10_000) { self.limit = limit }

    /// True the first time `key` is seen.
    func first(_ key: String) -> Bool {
        lock.withLock {
            if seen.count >= limit { seen.removeAll() }
            return seen.insert(key).inserted
        }
    }
}
