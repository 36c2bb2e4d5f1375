import Foundation

/// Set once, from any thread.
package final class OnceFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    package init() {}
    /// True for the first caller only.
    package func set() -> Bool {
        lock.lock(); defer { lock.unlock() }
        if done { return false }
        done = true
        return true
    }
    /// Whether `set` has been called.
    package var isSet: Bool {
        lock.lock(); defer { lock.unlock() }
        return done
    }
}
