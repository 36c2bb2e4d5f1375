import Foundation
import CloudHTTP
import StorageModel

/// A resumable upload its caller drives a chunk at a time (docs/LIBRARY.md, "The Apple SDK's
/// API"): the SDK-shaped upload task reports progress after each chunk, and pauses, resumes or
/// cancels between them. The same v0 requests as `FirebaseStore.write`'s resumable uploads:
/// `start` on the first `sendNext`, then `upload` chunks, the last one `upload, finalize`. After a dropped connection, a timeout or a 5xx the session is asked what
/// it holds (`query`) and the next chunk starts there; a session the server forgot starts over.
public final class FirebaseUploadSession: @unchecked Sendable {
    public let name: String
    /// The object's size in bytes.
    public let size: Int64
    /// Bytes per `upload` request (a multiple of 256 KiB).
    public let chunkSize: Int64
    private let store: FirebaseStore
    private let source: UploadSource
    private let metadata: WritableMetadata
    /// Guards the fields below: `sendNext` calls may not overlap, but `persisted` is read anywhere.
    private let lock = NSLock()
    private var url: String?
    private var held: Int64 = 0
    private var mustAsk = false

    init(store: FirebaseStore, name: String, source: UploadSource, size: Int64, metadata: WritableMetadata,
         chunkSize: Int64) {
        self.store = store
        self.name = name
        self.source = source
        self.size = size
        self.metadata = metadata
        let quantum: Int64 = 256 << 10
        self.chunkSize = max(quantum, chunkSize / quantum * quantum)
    }

    /// Bytes the server holds, as far as this side knows.
    public var persisted: Int64 { lock.withLock { held } }

    /// Sends the next chunk (opening the session first); the object once the last one is in,
    /// else nil. A transient fault is retried within the store's deadline, from what the session
    /// holds. Must not be called while another `sendNext` of this session runs. `sending`, if
    /// given, is told the bytes of the object sent so far, every `sendingEvery` while the chunk
    /// goes out.
    public func sendNext(sendingEvery: Duration = .milliseconds(100),
                         sending: (@Sendable (Int64) -> Void)? = nil) async throws -> ObjectInfo? {
        let transport = store.transport
        var progress = ResumableProgress(policy: transport.policy)
        progress.persisted(persisted)
        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            let (session, asking) = lock.withLock { (url, mustAsk) }
            guard let session else {
                let opened = try await store.startSession(name, size: size, metadata: metadata)
                lock.withLock { url = opened; held = 0; mustAsk = false }
                continue
            }
            do {
                if asking {
                    if let done = try await ask(session, &progress) { return done }
                    continue
                }
                return try await sendChunk(session, &progress, every: sendingEvery, sending)
            } catch StorageError.objectNotFound {
                try progress.sessionLost(name)
                lock.withLock { url = nil }
            } catch let e as StorageError where e.isTransient {
                let pause = try progress.pause(after: e, name: name, size: size)
                try await progress.policy.pause(pause)
                lock.withLock { mustAsk = true }
            }
        }
    }

    /// Ends the session without making an object (best effort).
    public func cancel() async {
        guard let session = lock.withLock({ url }) else { return }
        _ = try? await store.transport.send("cancel upload", path: name, idempotent: true,
                                            store.command(session, "cancel", offset: nil, body: nil))
    }

    private func sendChunk(_ session: String, _ progress: inout ResumableProgress, every: Duration,
                           _ sending: (@Sendable (Int64) -> Void)?) async throws -> ObjectInfo? {
        let offset = persisted
        let length = min(chunkSize, size - offset)
        let last = offset + length == size
        let verb = last ? (length > 0 ? "upload, finalize" : "finalize") : "upload"
        let transport = store.transport
        var request = store.command(session, verb, offset: offset, body: nil)
        var watch: Task<Void, Never>?
        if length > 0 {
            let body = StreamedBody(source: source, offset: offset, length: length, sums: UploadChecksums(source: nil),
                                    stallTimeout: store.tuning.idleTimeout, clock: transport.clock)
            request = CloudRequest(.POST, session, headers: request.headers, streaming: body)
            if let sending {
                watch = Task {
                    while (try? await transport.clock.sleep(for: every)) != nil { sending(offset + body.progress.bytes) }
                }
            }
        }
        defer { watch?.cancel() }
        let r = try await transport.send("upload chunk", path: name, idempotent: false,
                                         deadline: max(progress.end, transport.clock.now + .seconds(86_400)), request)
        if last || FirebaseStore.isFinal(r) {
            let object = try store.parseObject(r)
            lock.withLock { held = size }
            return object
        }
        lock.withLock { held = offset + length }
        return nil
    }

    /// Asks the session what it holds; the object when it holds everything.
    private func ask(_ session: String, _ progress: inout ResumableProgress) async throws -> ObjectInfo? {
        let transport = store.transport
        let r = try await transport.send("upload status", path: name, idempotent: true, deadline: progress.end,
                                         store.command(session, "query", offset: nil, body: nil))
        let got = r.headers.first(name: "X-Goog-Upload-Size-Received").flatMap { Int64($0) } ?? 0
        guard got <= size else {
            throw StorageError.unknown(status: r.status, message: "upload of \(name): the session holds \(got) bytes of \(size)")
        }
        progress.persisted(got)
        lock.withLock { held = got; mustAsk = false }
        guard FirebaseStore.isFinal(r) || got == size else { return nil }
        let f = try await transport.send("upload finalize", path: name, idempotent: true, deadline: progress.end,
                                         store.command(session, "finalize", offset: size, body: nil))
        return try store.parseObject(f)
    }
}

extension FirebaseStore {
    /// A resumable upload of `source` to `name` that its caller drives (`FirebaseUploadSession`);
    /// nothing is sent until its first `sendNext`. `chunkSize` nil: the store's own
    /// (`tuning.chunkSize`). Download tokens in `metadata` are never sent.
    public func beginUpload(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                            chunkSize: Int64? = nil) throws -> FirebaseUploadSession {
        let size = try MediaRequests.sourceSize(source)
        return FirebaseUploadSession(store: self, name: name, source: source, size: size,
                                     metadata: V0Metadata.writable(metadata),
                                     chunkSize: chunkSize ?? Int64(tuning.chunkSize))
    }
}
