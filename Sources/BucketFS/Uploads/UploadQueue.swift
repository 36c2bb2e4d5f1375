import Foundation

/// Write-back (`--write-back`, docs/SEMANTICS.md §3): the files closed with unsaved content, uploaded in the
/// background in the order they were closed, at most `limit` at a time. The queue owns only the
/// order, the count under way and the failure count; each upload is the upload path's own
/// attempt (`BucketFileSystem.uploadQueued`, under the file's `uploadLock`), so a file written
/// again, renamed, fsynced or deleted meanwhile is handled by the states of BucketFileSystem+Uploads.swift: an
/// upload finds the content as it is when it starts, a deleted file uploads nothing.
///
/// A file's upload starts no sooner than `delay` after its close (`--write-back-delay`): what a
/// tool does right after close (rsync sets xattrs and times, then renames its temporary name)
/// joins the upload that waits, instead of costing a request of its own or a second upload.
///
/// INVARIANT: a stage is at most once in `waiting`; `running` counts the jobs started and not
/// finished, never more than `limit` while the queue is open.
final class UploadQueue: @unchecked Sendable {
    let limit: Int
    /// Seconds from a file's close to the earliest start of its upload.
    let delay: Double
    private let lock = NSLock()
    /// In the order files were closed, each with the earliest start of its upload.
    private var waiting: [(Node, StagedFile, ready: ContinuousClock.Instant)] = []
    /// A task waits for the first waiting file to be ready (slots were free when it was queued).
    private var wakeScheduled = false
    private var waitingIDs: Set<ObjectIdentifier> = []
    private var running = 0
    private var failed = 0
    private var closed = false
    private var idle: [CheckedContinuation<Void, Never>] = []
    /// The job: one upload attempt of a file; true when its content is saved (or needs no upload).
    private var job: (@Sendable (Node, StagedFile) async -> Bool)?

    init(limit: Int, delay: Double = 0) {
        self.limit = max(1, limit)
        self.delay = max(0, delay)
    }

    /// Sets the job (once, when the core is made; nothing is queued before).
    func start(_ job: @escaping @Sendable (Node, StagedFile) async -> Bool) {
        lock.withLock { self.job = job }
    }

    /// Queues `s` (no-op when it already waits, or after `close`).
    func enqueue(_ n: Node, _ s: StagedFile) {
        let start: [(Node, StagedFile)] = lock.withLock {
            guard !closed, waitingIDs.insert(ObjectIdentifier(s)).inserted else { return [] }
            waiting.append((n, s, ContinuousClock.now + .milliseconds(Int64(delay * 1000))))
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
            if !closed, !waiting.isEmpty, running < limit, !wakeScheduled {
                bad.append("the upload queue has \(waiting.count) files waiting and only \(running) of \(limit) running, and nothing scheduled to start them")
            }
            if failed < 0 { bad.append("the upload queue counts \(failed) failures") }
            return bad
        }
    }

    /// (waiting, under way, failed since the mount started), for the metrics.
    var counts: (queued: Int, uploading: Int, failed: Int) { lock.withLock { (waiting.count, running, failed) } }

    private func startLocked() -> [(Node, StagedFile)] {
        var start: [(Node, StagedFile)] = []
        let now = ContinuousClock.now
        while running < limit, let next = waiting.first, next.ready <= now {
            waiting.removeFirst()
            waitingIDs.remove(ObjectIdentifier(next.1))
            running += 1
            start.append((next.0, next.1))
        }
        // Slots free and the next file not ready yet: start it when it is (files are ready in
        // the order they were queued, so the first is the next).
        if running < limit, let next = waiting.first, !wakeScheduled {
            wakeScheduled = true
            Task { [self] in
                try? await Task.sleep(until: next.ready, clock: .continuous)
                let more: [(Node, StagedFile)] = lock.withLock {
                    wakeScheduled = false
                    return closed ? [] : startLocked()
                }
                launch(more)
            }
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
