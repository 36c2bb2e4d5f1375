import Foundation

/// Write-back (`--write-back`, docs/SEMANTICS.md §3): the files closed with unsaved content, uploaded in the
/// background in the order they were closed, at most `limit` at a time. The queue owns only the
/// order, the count under way and the failure count; each upload is the upload path's own
/// attempt (`BucketFileSystem.uploadQueued`, under the file's `uploadLock`), so a file written
/// again, renamed, fsynced or deleted meanwhile is handled by the states of BucketFileSystem+Uploads.swift: an
/// upload finds the content as it is when it starts, a deleted file uploads nothing.
///
/// INVARIANT: a stage is at most once in `waiting`; `running` counts the jobs started and not
/// finished, never more than `limit` while the queue is open.
final class UploadQueue: @unchecked Sendable {
    let limit: Int
    private let lock = NSLock()
    private var waiting: [(Node, StagedFile)] = []
    private var waitingIDs: Set<ObjectIdentifier> = []
    private var running = 0
    private var failed = 0
    private var closed = false
    private var idle: [CheckedContinuation<Void, Never>] = []
    /// The job: one upload attempt of a file; true when its content is saved (or needs no upload).
    private var job: (@Sendable (Node, StagedFile) async -> Bool)?

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Sets the job (once, when the core is made; nothing is queued before).
    func start(_ job: @escaping @Sendable (Node, StagedFile) async -> Bool) {
        lock.withLock { self.job = job }
    }

    /// Queues `s` (no-op when it already waits, or after `close`).
    func enqueue(_ n: Node, _ s: StagedFile) {
        let start: [(Node, StagedFile)] = lock.withLock {
            guard !closed, waitingIDs.insert(ObjectIdentifier(s)).inserted else { return [] }
            waiting.append((n, s))
            return startLocked()
        }
        launch(start)
    }

    /// Whether `s` waits for its turn (not yet started).
    func isWaiting(_ s: StagedFile) -> Bool { lock.withLock { waitingIDs.contains(ObjectIdentifier(s)) } }

    /// Starts no more jobs and forgets the waiting ones (shutdown makes the last attempts itself,
    /// after the jobs under way, which hold their files' `uploadLock`).
    func stop() {
        let wake: [CheckedContinuation<Void, Never>] = lock.withLock {
            closed = true
            waiting.removeAll()
            waitingIDs.removeAll()
            guard running == 0 else { return [] }
            defer { idle.removeAll() }
            return idle
        }
        for c in wake { c.resume() }
    }

    /// Returns once nothing waits and nothing is under way.
    func drained() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = lock.withLock {
                if running == 0 && waiting.isEmpty { return true }
                idle.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    /// The queue's invariants that do not hold now, each described (under its lock).
    func invariantViolations() -> [String] {
        lock.withLock {
            var bad: [String] = []
            // INVARIANT: a stage is at most once in `waiting`, and `waitingIDs` names exactly the
            // stages waiting.
            if waitingIDs.count != waiting.count || Set(waiting.map { ObjectIdentifier($0.1) }) != waitingIDs {
                bad.append("the upload queue holds \(waiting.count) waiting files, \(waitingIDs.count) of them by identity")
            }
            // INVARIANT: `running` counts the jobs started and not finished, never more than
            // `limit` while the queue is open, and a file waits only while no more may run.
            if running < 0 || (!closed && running > limit) {
                bad.append("the upload queue runs \(running) uploads, its limit is \(limit)")
            }
            if !closed, !waiting.isEmpty, running < limit {
                bad.append("the upload queue has \(waiting.count) files waiting and only \(running) of \(limit) running")
            }
            if failed < 0 { bad.append("the upload queue counts \(failed) failures") }
            return bad
        }
    }

    /// (waiting, under way, failed since the mount started), for the metrics.
    var counts: (queued: Int, uploading: Int, failed: Int) { lock.withLock { (waiting.count, running, failed) } }

    private func startLocked() -> [(Node, StagedFile)] {
        var start: [(Node, StagedFile)] = []
        while running < limit, !waiting.isEmpty {
            let next = waiting.removeFirst()
            waitingIDs.remove(ObjectIdentifier(next.1))
            running += 1
            start.append(next)
        }
        return start
    }

    private func launch(_ jobs: [(Node, StagedFile)]) {
        guard !jobs.isEmpty, let job = lock.withLock({ self.job }) else { return }
        for (n, s) in jobs {
            Task { [self] in
                let saved = await job(n, s)
                let (more, wake): ([(Node, StagedFile)], [CheckedContinuation<Void, Never>]) = lock.withLock {
                    running -= 1
                    if !saved { failed += 1 }
                    let more = closed ? [] : startLocked()
                    guard running == 0, waiting.isEmpty else { return (more, []) }
                    defer { idle.removeAll() }
                    return (more, idle)
                }
                launch(more)
                for c in wake { c.resume() }
            }
        }
    }
}
