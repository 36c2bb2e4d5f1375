import CloudHTTP
import Foundation
import NIOCore
import NIOHTTP1
import StorageModel

/// A resumable upload that starts before its size is known (docs/SEMANTICS.md §3.3, "Streamed
/// uploads"): the session is started with the object's name, metadata and preconditions and no
/// length; each `send` is one PUT of the bytes the file has gained (`Content-Range: bytes A-B/*`,
/// B + 1 a multiple of 256 KiB, as the JSON API requires of every chunk but the last); `finish`
/// sends the rest with the total (`bytes A-B/SIZE`, or `bytes */SIZE` when nothing is left), and
/// the object it makes must carry the crc32c of every byte sent. After a reset, a stall, a
/// timeout or a 5xx the session is asked what it holds (`bytes */*`, 308 with `Range`) and the
/// rest is sent from there, as a whole-file upload does (`resumableUpload`).
extension GCSStore {
    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        let url = uploadPath + CloudURL.query([("uploadType", "resumable")]
            + GCSJSONAPI.preconditionItems(preconditions) + [("fields", GCSJSONAPI.objectFields)])
        var headers = Self.jsonHeaders
        headers.add(name: "X-Upload-Content-Type", value: metadata.contentType ?? "application/octet-stream")
        let body = ByteBuffer(data: ObjectResource.resourceBody(name: prefix + name, metadata))
        let r = try await transport.send("start upload", path: name, idempotent: RetryPolicy.isGuarded(preconditions),
                                         CloudRequest(.POST, url, headers: headers, body: body))
        guard let location = r.headers.first(name: "Location"), !location.isEmpty else {
            throw StorageError.unknown(status: r.status, message: "resumable upload of \(name): no session Location")
        }
        let session = location.contains("://") ? location : endpoint + (location.hasPrefix("/") ? "" : "/") + location
        return GCSGrowingUpload(store: self, name: name, source: .file(path: path), session: session)
    }
}

final class GCSGrowingUpload: GrowingUpload, @unchecked Sendable {
    private let store: GCSStore
    private let name: String
    private let source: UploadSource
    private let session: String
    /// The crc32c of the bytes sent, from byte 0, each once.
    private let sums: UploadChecksums
    private let lock = NSLock()
    /// Bytes the server holds. GUARDED_BY(lock)
    private var held: Int64 = 0

    init(store: GCSStore, name: String, source: UploadSource, session: String) {
        self.store = store
        self.name = name
        self.source = source
        self.session = session
        sums = UploadChecksums(source: source)
    }

    var granularity: Int64 { 256 * 1024 }
    var persisted: Int64 { lock.withLock { held } }

    func send(upTo end: Int64) async throws {
        precondition(end % granularity == 0, "a chunk of a streamed upload ends on a multiple of 256 KiB")
        if try await put(upTo: end, total: nil) != nil {
            throw StorageError.unknown(status: 200, message: "streamed upload of \(name): the server finished the object before its size was sent")
        }
    }

    func finish(size: Int64) async throws -> ObjectInfo {
        guard let info = try await put(upTo: size, total: size) else {
            throw StorageError.unknown(status: 308, message: "streamed upload of \(name): the server did not finish the object at its last byte")
        }
        return info
    }

    func cancel() async {
        // A DELETE of the session ends it (Cloud Storage answers 499); whatever the answer, no
        // object is made from a session whose size was never sent.
        _ = try? await store.transport.send("cancel upload", path: name, idempotent: true,
                                            expect: Expect(accept: { _ in true }), CloudRequest(.DELETE, session))
    }

    /// Sends the bytes from what the server holds up to `end`, with the total (`total`) or not
    /// (`*`). The object when the server finished it, else nil.
    private func put(upTo end: Int64, total: Int64?) async throws -> ObjectInfo? {
        let transport = store.transport
        var progress = ResumableProgress(policy: transport.policy)
        progress.persisted(persisted)
        let totalText = total.map(String.init) ?? "*"
        var mustAsk = false
        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            if mustAsk {
                let r = try await transport.send("upload status", path: name, idempotent: true, deadline: progress.end,
                                                 expect: Expect(accept: { $0 == 308 }),
                                                 CloudRequest(.PUT, session, headers: ["Content-Range": "bytes */\(totalText)"]))
                if r.status != 308 { return try await finished(r, total: total) }
                progress.persisted(GCSJSONAPI.persistedBytes(rangeHeader: r.headers.first(name: "Range")))
                lock.withLock { held = progress.offset }
                mustAsk = false
                continue
            }
            let offset = progress.offset
            if offset >= end, total == nil { return nil }
            let length = max(0, end - offset)
            let range = length == 0 ? "bytes */\(totalText)" : "bytes \(offset)-\(offset + length - 1)/\(totalText)"
            let body = StreamedBody(source: source, offset: offset, length: length, sums: sums,
                                    stallTimeout: store.tuning.idleTimeout, clock: transport.clock)
            do {
                let r = try await transport.send("upload", path: name, idempotent: false,
                                                 deadline: max(progress.end, transport.clock.now + .seconds(86_400)),
                                                 expect: Expect(accept: { $0 == 308 }),
                                                 CloudRequest(.PUT, session, headers: ["Content-Range": range], streaming: body))
                if r.status != 308 { return try await finished(r, total: total) }
                progress.persisted(GCSJSONAPI.persistedBytes(rangeHeader: r.headers.first(name: "Range")))
                lock.withLock { held = progress.offset }
                if progress.offset <= offset {
                    // No progress on a complete answer (or a last chunk not taken as the end): ask rather than loop.
                    progress.noProgress()
                    mustAsk = true
                }
            } catch let e as StorageError where e.isTransient {
                progress.sent(body.progress.bytes)
                let pause = try progress.pause(after: e, name: name, size: total ?? end)
                store.logger.debug("GCS streamed upload of \(name): \(e) after byte \(offset); asking the session in \(pause)")
                try await progress.policy.pause(pause)
                mustAsk = true
            }
        }
    }

    private func finished(_ r: CloudResponse, total: Int64?) async throws -> ObjectInfo {
        let info = try store.parseObject(r)
        guard let total else {
            // A server that finishes a session when it is asked what it holds (fake-gcs-server):
            // the object holds only part of the file. That generation is removed again, and the
            // stream is given up (the file is uploaded whole at close).
            store.logger.error("GCS streamed upload of \(name): the server finished the object after \(info.size) bytes, before its size was sent; removing generation \(info.generation)")
            try? await store.delete(name, preconditions: Preconditions(ifGenerationMatch: info.generation))
            throw StorageError.unknown(status: r.status, message: "streamed upload of \(name): the server finished the object (generation \(info.generation)) before its size was sent")
        }
        return try await store.confirmed(name, info, sums: sums, size: total)
    }
}
