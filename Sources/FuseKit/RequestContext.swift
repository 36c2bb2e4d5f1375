import CFuse
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A libfuse request handle that may cross into a Task. Valid until its one reply.
struct Request: @unchecked Sendable {
    let raw: fuse_req_t
}

/// What the trampolines reach through `fuse_req_userdata`: the filesystem and the bridge from
/// libfuse threads to Tasks (in-flight bound, interrupts, the reply gate).
final class RequestContext: @unchecked Sendable {
    let filesystem: any FuseFileSystemBase
    let readdirplus: FuseSession.ReaddirPlus
    let gate = ReplyGate()
    let inFlight = InFlight()
    private let slots: DispatchSemaphore
    private let logger: @Sendable (String) -> Void
    private let lock = NSLock()
    private var _onReady: (@Sendable () -> Void)?
    private var _isReady = false

    /// The passthrough opens of a session that asked for them (each answer is plain until the
    /// kernel's INIT took passthrough). Set once: read with no lock at every open and release.
    let passthrough: PassthroughOpens?

    init(filesystem: any FuseFileSystemBase, maxInFlight: Int, readdirplus: FuseSession.ReaddirPlus,
         passthrough: Bool = false, logger: @escaping @Sendable (String) -> Void) {
        self.passthrough = passthrough ? PassthroughOpens(log: { logger($0) }) : nil
        self.filesystem = filesystem
        self.readdirplus = readdirplus
        self.logger = logger
        slots = DispatchSemaphore(value: maxInFlight)
    }

    var onReady: (@Sendable () -> Void)? {
        get { lock.withLock { _onReady } }
        set { lock.withLock { _onReady = newValue } }
    }

    var isReady: Bool { lock.withLock { _isReady } }


    func markReady() {
        let callback = lock.withLock { () -> (@Sendable () -> Void)? in
            _isReady = true
            return _onReady
        }
        callback?()
    }

    func log(_ message: String) { logger(message) }

    static func of(_ req: fuse_req_t) -> RequestContext {
        Unmanaged<RequestContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// Runs `work` on a new Task and answers the request exactly once: `reply` with the value, or
    /// `fuse_reply_err` with the thrown errno. Everything `work` needs must already be copied out
    /// of C memory. Blocks the calling libfuse thread while `maxInFlight` requests are running.
    func serve<T: Sendable>(_ req: fuse_req_t,
                            _ work: @escaping @Sendable () async throws(Errno) -> T,
                            reply: @escaping @Sendable (fuse_req_t, T) -> Void) {
        slots.wait()
        let request = Request(raw: req)
        let id = inFlight.begin()
        // Registered before the Task exists: the Task may reply (freeing req) at any moment after.
        // `data` is the id, not a pointer, so a late interrupt can never touch freed memory.
        fuse_req_interrupt_func(req, { req, data in
            guard let req else { return }
            RequestContext.of(req).inFlight.cancel(UInt(bitPattern: data))
        }, UnsafeMutableRawPointer(bitPattern: id))
        // Who asks (copied now: the context lives in the request).
        let caller = fuse_req_ctx(req).map { FuseCaller(uid: $0.pointee.uid, gid: $0.pointee.gid, pid: $0.pointee.pid) }
        let task = Task {
            let result: Result<T, Errno> = await FuseCaller.$current.withValue(caller) { () async -> Result<T, Errno> in
                do throws(Errno) {
                    return .success(try await self.filesystem.perform(work))
                } catch {
                    return .failure(error)
                }
            }
            self.send(request) { req in
                switch result {
                case .success(let value): reply(req, value)
                case .failure(let errno): _ = fuse_reply_err(req, errno.rawValue)
                }
            }
            self.inFlight.end(id)
            self.slots.signal()
        }
        inFlight.attach(id, task)
    }

    /// Replies unless the session is gone (then the reply is dropped: libfuse memory is freed).
    func send(_ request: Request, _ body: (fuse_req_t) -> Void) {
        if !gate.ifOpen({ body(request.raw) }) {
            log("reply dropped: the session has ended")
        }
    }

    /// Logs a failed reply; -ENOENT just means the kernel no longer waits for it (interrupted).
    func check(_ rc: Int32, _ what: StaticString) {
        if rc != 0 && rc != -ENOENT { log("\(what) failed: \(Errno(-rc))") }
    }
}

/// Replies take the read side; closing the session takes the write side once, after which no reply
/// touches libfuse again.
final class ReplyGate: @unchecked Sendable {
    private let rw: UnsafeMutablePointer<pthread_rwlock_t>
    private var closed = false  // written under the write lock, read under the read lock

    init() {
        rw = .allocate(capacity: 1)
        rw.initialize(to: pthread_rwlock_t())
        pthread_rwlock_init(rw, nil)
    }

    deinit {
        pthread_rwlock_destroy(rw)
        rw.deallocate()
    }

    func ifOpen(_ body: () -> Void) -> Bool {
        pthread_rwlock_rdlock(rw)
        defer { pthread_rwlock_unlock(rw) }
        if closed { return false }
        body()
        return true
    }

    func close() {
        pthread_rwlock_wrlock(rw)
        closed = true
        pthread_rwlock_unlock(rw)
    }
}

/// The Tasks answering requests, by id, so a kernel interrupt can cancel one.
final class InFlight: @unchecked Sendable {
    private struct Entry {
        var task: Task<Void, Never>?
        var cancelled = false
    }

    private let lock = NSLock()
    private var nextID: UInt = 1
    private var entries: [UInt: Entry] = [:]

    var count: Int { lock.withLock { entries.count } }

    func begin() -> UInt {
        lock.withLock {
            let id = nextID
            nextID = nextID == UInt.max ? 1 : nextID + 1
            entries[id] = Entry()
            return id
        }
    }

    func attach(_ id: UInt, _ task: Task<Void, Never>) {
        let cancel: Bool = lock.withLock {
            guard entries[id] != nil else { return false }  // already answered
            entries[id]!.task = task
            return entries[id]!.cancelled
        }
        if cancel { task.cancel() }
    }

    func cancel(_ id: UInt) {
        let task: Task<Void, Never>? = lock.withLock {
            guard entries[id] != nil else { return nil }
            entries[id]!.cancelled = true
            return entries[id]!.task
        }
        task?.cancel()
    }

    /// At the end of the session: every running request's Task is cancelled.
    func cancelAll() {
        let tasks = lock.withLock { entries.values.compactMap(\.task) }
        tasks.forEach { $0.cancel() }
    }

    func end(_ id: UInt) {
        _ = lock.withLock { entries.removeValue(forKey: id) }
    }
}
