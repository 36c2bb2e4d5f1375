import Foundation
import FuseKit

/// Lookups' relists of one directory, shared (docs/SEMANTICS.md §6): the kernel sends a
/// directory's lookups at once (FUSE_PARALLEL_DIROPS), and those that find its listing expired
/// wait for the one listing the first of them started, instead of each listing the directory
/// again (a directory of 100,000 names is 100 pages a listing).
final class SharedRelists: @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var running: [ObjectIdentifier: Task<Result<Listing, Errno>, Never>] = [:]
    private var waiters = 0

    /// The listing of `dir` from a relist running now for it, or from `list`, started now and
    /// shared with every caller that comes while it runs.
    func listing(of dir: Node, _ list: @escaping @Sendable () async throws(Errno) -> Listing) async throws(Errno) -> Listing {
        let key = ObjectIdentifier(dir)
        let task: Task<Result<Listing, Errno>, Never> = lock.withLock {
            waiters += 1
            if let t = running[key] { return t }
            let t = Task { () -> Result<Listing, Errno> in
                do throws(Errno) { return .success(try await list()) } catch { return .failure(error) }
            }
            running[key] = t
            return t
        }
        let result = await task.value
        lock.withLock {
            waiters -= 1
            if running[key] == task { running[key] = nil }
        }
        return try result.get()
    }

    /// Relists running now, and the lookups waiting for them (tests).
    var count: Int { lock.withLock { running.count } }
    var waiting: Int { lock.withLock { waiters } }
}
