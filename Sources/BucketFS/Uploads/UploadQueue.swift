import Foundation
import StorageModel

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
/// The queue is bounded (`maxFiles` files waiting, `maxBytes` of their data): a close that finds
/// it full waits until an upload starts (`room()`), as a close in the default mode waits for its
/// own upload, so the files and bytes waiting on disk, and the memory and descriptors each
/// waiting file holds, stay under the bound whatever the writers do (docs/SEMANTICS.md §3.4).
///
/// Nothing here polls: a close waiting for room is woken when an upload starts (or the queue
/// stops), and a file not ready yet is started by a wait on the core's clock (`BucketClock`), so
/// a test that injects a `ManualClock` moves the queue by advancing it.
///
/// INVARIANT: a stage is at most once in `waiting`; `running` counts the jobs started and not
/// finished, never more than `limit` while the queue is open; a close waits for room only while
/// there is none.
final class UploadQueue: @unchecked Sendable {
    let limit: Int
    /// Seconds from a file's close to the earliest start of its upload.
    let delay: Double
    /// Files waiting, and bytes of their data, past which a close waits (`room()`).
    let maxFiles: Int
    let maxBytes: Int64
    /// The core's clock: when a file is ready, and the wait for it.
    private let clock: BucketClock
    private let lock = NSLock()
    /// In the order files were closed, each with the earliest start of its upload and its size.
    private var waiting: [(Node, StagedFile, ready: BucketClock.Instant, bytes: Int64)] = []
    private var waitingBytes: Int64 = 0
    /// A task waits for the first waiting file to be ready (slots were free when it was queued).
    private var wakeScheduled = false
    private var waitingIDs: Set<ObjectIdentifier> = []
    private var running = 0
    private var failed = 0
    private var closed = false
    private var idle: [CheckedContinuation<Void, Never>] = []
    /// Closes waiting for room (`room()`), by number; woken when there is room.
    private var roomWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var lastWaiter: UInt64 = 0
    /// The job: one upload attempt of a file; true when its content is saved (or needs no upload).
    private var job: (@Sendable (Node, StagedFile) async -> Bool)?

    init(limit: Int, delay: Double = 0, maxFiles: Int = .max, maxBytes: Int64 = .max, clock: BucketClock = .real) {
        self.clock = clock
        self.limit = max(1, limit)
        self.delay = max(0, delay)
        self.maxFiles = max(1, maxFiles)
        self.maxBytes = max(1, maxBytes)
    }

    /// Whether the queue is within its bound (at most `maxFiles` waiting, at most `maxBytes`): a
    /// close that queued its file past it waits. (Closes that queue at the same moment may each
    /// add one file past the bound before they wait.)
    var hasRoom: Bool { lock.withLock { hasRoomLocked } }

    private var hasRoomLocked: Bool { closed || (waiting.count <= maxFiles && waitingBytes <= maxBytes) }

    /// Returns once the queue has room (or is closed, or the caller is cancelled: an interrupted
    /// close). It waits only while the queue is full, until one of its uploads starts: the start
    /// wakes it (`wakeForRoomLocked`).
    func room() async {
        let id: UInt64 = lock.withLock { lastWaiter += 1; return lastWaiter }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now: Bool = lock.withLock {
                    if hasRoomLocked || Task.isCancelled { return true }
                    roomWaiters[id] = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            lock.withLock { roomWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// The closes waiting for room, when there is room now (each is resumed after the lock is
    /// released).
    private func wakeForRoomLocked() -> [CheckedContinuation<Void, Never>] {
        guard hasRoomLocked, !roomWaiters.isEmpty else { return [] }
        defer { roomWaiters.removeAll() }
        return Array(roomWaiters.values)
    }

    /// Sets the job (once, when the core is made; nothing is queued before).
    func start(_ job: @escaping @Sendable (Node, StagedFile) async -> Bool) {
        lock.withLock { self.job = job }
    }

    /// Queues `s`, of `bytes` (no-op when it already waits, or after `close`).
    func enqueue(_ n: Node, _ s: StagedFile, bytes: Int64 = 0) {
        let (start, wake): ([(Node, StagedFile)], [CheckedContinuation<Void, Never>]) = lock.withLock {
            guard !closed, waitingIDs.insert(ObjectIdentifier(s)).inserted else { return ([], []) }
            waiting.append((n, s, clock.now + .milliseconds(Int64(delay * 1000)), max(0, bytes)))
            waitingBytes += max(0, bytes)
            return (startLocked(), wakeForRoomLocked())
        }
        launch(start)
        for c in wake { c.resume() }
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
            waitingBytes = 0
            let rooms = wakeForRoomLocked()
            guard running == 0 else { return rooms }
            defer { idle.removeAll() }
            return idle + rooms
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
            // INVARIANT: a close waits for room only while there is none.
            if !roomWaiters.isEmpty, hasRoomLocked {
                bad.append("\(roomWaiters.count) closes wait for room in the upload queue, and it has room")
            }
            // INVARIANT: `waitingBytes` is the sum of the waiting files' sizes.
            if waitingBytes != waiting.reduce(0, { $0 + $1.bytes }) {
                bad.append("the upload queue counts \(waitingBytes) bytes waiting, its files have \(waiting.reduce(0, { $0 + $1.bytes }))")
            }
            return bad
        }
    }

    /// (waiting, under way, failed since the mount started), for the metrics.
    var counts: (queued: Int, uploading: Int, failed: Int) { lock.withLock { (waiting.count, running, failed) } }

    private func startLocked() -> [(Node, StagedFile)] {
        var start: [(Node, StagedFile)] = []
        let now = clock.now
        while running < limit, let next = waiting.first, next.ready <= now {
            waiting.removeFirst()
            waitingIDs.remove(ObjectIdentifier(next.1))
            waitingBytes -= next.bytes
            running += 1
            start.append((next.0, next.1))
        }
        // Slots free and the next file not ready yet: start it when it is (files are ready in
        // the order they were queued, so the first is the next).
        if running < limit, let next = waiting.first, !wakeScheduled {
            wakeScheduled = true
            Task { [self] in
                try? await clock.sleep(until: next.ready)
                let (more, wake): ([(Node, StagedFile)], [CheckedContinuation<Void, Never>]) = lock.withLock {
                    wakeScheduled = false
                    return closed ? ([], []) : (startLocked(), wakeForRoomLocked())
                }
                launch(more)
                for c in wake { c.resume() }
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
                    let rooms = wakeForRoomLocked()
                    guard running == 0, waiting.isEmpty else { return (more, rooms) }
                    defer { idle.removeAll() }
                    return (more, idle + rooms)
                }
                launch(more)
                for c in wake { c.resume() }
            }
        }
    }
}
