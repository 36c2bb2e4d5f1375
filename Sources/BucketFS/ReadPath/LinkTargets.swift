import Foundation

/// Symbolic links' targets read from their objects' content (or written here), by object path
/// and generation: a generation's content never changes, so a target read once answers every
/// later readlink of that generation with no request. Bounded: past `limit` entries it starts
/// again empty (a target costs one GET to read again). Its own lock, a leaf.
final class LinkTargets: @unchecked Sendable {
    private let lock = NSLock()
    private var targets: [String: (generation: Int64, target: String)] = [:]
    private let limit: Int

    init(limit: Int = 10_000) { self.limit = limit }

    func target(_ path: String, generation: Int64) -> String? {
        lock.withLock { targets[path].flatMap { $0.generation == generation ? $0.target : nil } }
    }

    func remember(_ path: String, generation: Int64, _ target: String) {
        lock.withLock {
            if targets.count >= limit, targets[path] == nil { targets.removeAll(keepingCapacity: true) }
            targets[path] = (generation, target)
        }
    }
}
