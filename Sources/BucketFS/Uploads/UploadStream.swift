import Foundation
import Logging
import StorageModel

/// A new file's upload that streams while the file is written (docs/SEMANTICS.md §3.3,
/// "Streamed uploads"). The writer's bytes stay staged as always (`StagedFile`, its sidecar): the
/// stream only reads the stage file. Once the first `start` bytes have been written in order from
/// byte 0 by one handle, a resumable session of unknown size begins (`ObjectStore.beginGrowingUpload`,
/// with the object's name, metadata and precondition as an upload would send them then), and a
/// task sends each `chunk` the writer adds (ending on the session's 256 KiB grain). At the upload
/// attempt of a close, fsync or unmount (`finish`), the task stops and, if the stream still
/// holds, only the rest is sent, with the total; the object is checked as any upload's is.
///
/// The stream is given up (its session DELETEd, nothing in the bucket made from it) as soon as
/// the bytes it would send could be other than the file's: a write not at the end of what was
/// written in order (a seek back, a hole), a write by another handle, a truncate, a rename or
/// changed metadata (found at `finish`: the session's name, metadata and precondition are fixed at
/// its start), an unlink, or any failure of its own requests. The upload attempt then sends the
/// whole file, as without a stream, except when the session's start was refused for good (the
/// attempt's `refusal` says which: 400, 401, 403, 404, a lost race): the start is the insert the
/// whole upload would send, with the same name, metadata and precondition, so that refusal is the
/// attempt's result and nothing is sent again. A chunk refused falls back like any other failure
/// (a server or proxy may refuse chunks of unknown total and still take the whole file). A stream that cannot start (a store that cannot stream: the
/// embedded bucket, Firebase; write-back; a file that stays under `start`) changes nothing.
///
/// Its own lock (`lock`) is a leaf: taken with no other held, or under the superblock's, and
/// nothing is taken under it.
final class UploadStream: @unchecked Sendable {
    /// What a session is started with, read when it starts and again at `finish`: a stream
    /// whose file has another name, metadata or precondition by then is given up.
    struct Inputs: Equatable, Sendable {
        var path: String
        var metadata: WritableMetadata
        var preconditions: Preconditions
    }

    struct Settings: Sendable {
        /// Bytes written in order before the session starts.
        var start: Int64
        /// Bytes gained before each chunk is sent.
        var chunk: Int64
    }

    private enum Phase {
        /// Not a candidate (not enabled, or given up with nothing started).
        case off
        /// Watching in-order writes; the task is not running yet.
        case watching
        /// The task sends chunks as they come.
        case sending
        /// `finish` or a give-up stopped it.
        case stopped
    }

    private let lock = NSLock()
    /// GUARDED_BY(lock)
    private var phase = Phase.off
    /// The handle whose in-order writes the stream follows (the first to write). GUARDED_BY(lock)
    private var owner: UInt64?
    /// Bytes written in order from byte 0 by `owner`. GUARDED_BY(lock)
    private var end: Int64 = 0
    /// Given up: the session, if any, is cancelled by the task, or by whoever finds it. GUARDED_BY(lock)
    private var givenUp = false
    /// Why, for the log. GUARDED_BY(lock)
    private var why: String?
    /// The error of the session's start, when that is what gave the stream up. GUARDED_BY(lock)
    private var startFailure: (any Error)?
    /// The stream's task and the wake-up it waits on. GUARDED_BY(lock)
    private var task: Task<Void, Never>?
    private var wake: CheckedContinuation<Void, Never>?
    private var session: (any GrowingUpload)?
    private var started: Inputs?
    /// Bytes the task has sent (the server holds them). GUARDED_BY(lock)
    private var sent: Int64 = 0
    private var settings = Settings(start: 8 << 20, chunk: 8 << 20)
    private var begin: (@Sendable () async throws -> (Inputs, any GrowingUpload)?)?
    private var logger = Logger(label: "bucketfs.upload-stream")

    /// The file is a candidate (a new file, in the default mode, on a mount with streaming on).
    /// `begin` starts the session with the inputs of the moment, nil when the store cannot stream.
    func enable(_ settings: Settings, logger: Logger, begin: @escaping @Sendable () async throws -> (Inputs, any GrowingUpload)?) {
        lock.withLock {
            guard phase == .off, !givenUp else { return }
            self.settings = settings
            self.logger = logger
            self.begin = begin
            phase = .watching
        }
    }

    /// Handle `fh` wrote `count` bytes at `offset` (they have landed in the stage file).
    func wrote(fh: UInt64, at offset: Int64, count: Int64) {
        lock.withLock {
            guard phase == .watching || phase == .sending, !givenUp else { return }
            if owner == nil { owner = fh }
            guard owner == fh else { giveUpLocked("another handle wrote"); return }
            guard offset == end else {
                giveUpLocked(offset < end ? "a write at \(offset), before the end \(end) (a seek back)" : "a write at \(offset), past the end \(end)")
                return
            }
            end += count
            if phase == .sending { resumeLocked(); return }
            guard end >= settings.start else { return }
            phase = .sending
            // Made under the lock (its body runs later, and takes the lock itself): `finish`
            // finds either no stream or its task, never a stream whose task it cannot wait for.
            task = Task { [self] in await run() }
        }
    }

    /// The content changed otherwise than by an in-order write (a truncate, an unlink, a stage
    /// discarded): the stream is given up.
    func giveUp(_ reason: String) {
        lock.withLock { giveUpLocked(reason) }
    }

    /// Whether a session is under way (for tests and the log).
    var sending: Bool { lock.withLock { phase == .sending && !givenUp } }

    /// The attempt of a close (or fsync, or unmount) for content of `size` bytes whose upload
    /// would be made with `inputs`: stops the task and, when the stream still holds, sends the
    /// rest and returns the object. nil: there is no stream to finish (none started, or it was
    /// given up, its session cancelled); the caller uploads the whole file. An error: the
    /// session's last requests failed (the session is cancelled); the attempt failed. An error
    /// also when the session's start failed with what `refusal` calls a refusal for good: the
    /// whole file's upload would only be refused again.
    func finish(size: Int64, inputs: Inputs, refusal: (any Error) -> Bool = { _ in false }) async throws -> ObjectInfo? {
        let (t, wasSending) = lock.withLock { () -> (Task<Void, Never>?, Bool) in
            let was = phase == .sending
            if phase != .off { phase = .stopped }
            resumeLocked()
            return (task, was)
        }
        guard wasSending || t != nil else { return nil }
        await t?.value
        if let f = lock.withLock({ startFailure }), refusal(f) {
            // No session was made: nothing to cancel.
            logger.info("streamed upload of '\(inputs.path)' was refused (\(f)): the attempt fails with it, nothing is sent again")
            throw f
        }
        let (s, reason, written, holds) = lock.withLock { () -> ((any GrowingUpload)?, String?, Int64, Bool) in
            let s = session
            session = nil
            var reason = givenUp ? why : nil
            if reason == nil, s != nil, started != inputs {
                reason = started?.path != inputs.path ? "the file was renamed" : "its metadata or precondition changed"
            }
            if reason == nil, s != nil, end != size { reason = "the file is \(size) bytes, \(end) were written in order" }
            if reason != nil { givenUp = true; why = reason }
            return (s, reason, end, reason == nil && s != nil)
        }
        guard let s else { return nil }
        guard holds else {
            logger.info("streamed upload of '\(inputs.path)' given up (\(reason ?? "")): the whole file is uploaded instead")
            await s.cancel()
            return nil
        }
        do {
            let info = try await s.finish(size: size)
            logger.debug("streamed upload of '\(inputs.path)' finished: \(written) bytes, \(size - s.persisted) sent at close")
            return info
        } catch {
            await s.cancel()
            throw error
        }
    }

    // MARK: - the task

    private func run() async {
        let begun: (Inputs, any GrowingUpload)?
        do {
            begun = try await lock.withLock({ begin })?()
        } catch {
            lock.withLock {
                if !givenUp, !(error is CancellationError), (error as? StorageError) != .cancelled { startFailure = error }
                giveUpLocked("its start failed: \(error)")
            }
            return
        }
        do {
            guard let (inputs, s) = begun else {
                lock.withLock { giveUpLocked("the store cannot stream an upload") }
                return
            }
            let keep = lock.withLock { () -> Bool in
                started = inputs
                session = s
                return !givenUp
            }
            guard keep else { await cancelSession(); return }
            logger.debug("streamed upload of '\(inputs.path)' started")
            while true {
                let next: Int64? = await nextChunk(grain: s.granularity)
                guard let next else { break }
                try await s.send(upTo: next)
                lock.withLock { sent = next }
            }
        } catch {
            lock.withLock { giveUpLocked("its request failed: \(error)") }
        }
        if lock.withLock({ givenUp }) { await cancelSession() }
    }

    /// Waits until a chunk is ready; its end, or nil when the stream stops.
    private func nextChunk(grain: Int64) async -> Int64? {
        while true {
            let ready: Int64?? = lock.withLock {
                if givenUp || phase != .sending { return .some(nil) }
                let upTo = end / grain * grain
                if upTo - sent >= settings.chunk { return .some(upTo) }
                return nil
            }
            if let ready { return ready }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = lock.withLock { () -> Bool in
                    let upTo = end / grain * grain
                    if givenUp || phase != .sending || upTo - sent >= settings.chunk { return true }
                    wake = c
                    return false
                }
                if now { c.resume() }
            }
        }
    }

    /// The task ended with the stream given up: its session goes (DELETE), so that nothing is
    /// made from it; the whole upload at close is the only one.
    private func cancelSession() async {
        guard let s = lock.withLock({ () -> (any GrowingUpload)? in let s = session; session = nil; return s }) else { return }
        // In a task of its own: this one may be cancelled (a give-up cancels the chunk in flight),
        // and the DELETE must still be sent.
        await Task { await s.cancel() }.value
    }

    private func giveUpLocked(_ reason: String) {
        guard !givenUp else { return }
        givenUp = true
        why = reason
        if phase == .watching { phase = .off }
        task?.cancel()
        resumeLocked()
    }

    private func resumeLocked() {
        let c = wake
        wake = nil
        c?.resume()
    }

}
