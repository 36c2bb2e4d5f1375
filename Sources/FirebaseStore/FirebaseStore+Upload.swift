import Foundation
import CloudHTTP
import NIOCore
import NIOHTTP1
import StorageModel

/// Uploads as the Firebase SDKs make them (firebase-v0.md §5): multipart for small objects;
/// resumable for large ones, a chunk at a time streamed from the source, resuming after a fault from what the
/// session says it received. v0 writes are last-writer-wins (no preconditions reach the server),
/// so a repeated request does what the first would have.
extension FirebaseStore {
    func uploadURL(_ name: String) -> String {
        bucketURL + CloudURL.query([("name", prefix + name)])
    }

    func multipartUpload(_ name: String, from source: UploadSource, size: Int64, metadata: WritableMetadata) async throws -> ObjectInfo {
        let content = try MediaRequests.content(of: source)
        let boundary = "bucketfs-\(UUID().uuidString)"
        let body = MediaRequests.multipartBody(boundary: boundary, resource: ObjectResource.resourceBody(name: prefix + name, metadata),
                                               contentType: metadata.contentType, content: content,
                                               jsonCharset: "utf-8", closingLineBreak: false)
        let headers: HTTPHeaders = ["X-Goog-Upload-Protocol": "multipart",
                                    "Content-Type": "multipart/related; boundary=\(boundary)"]
        let r = try await transport.send("upload", path: name, idempotent: true,
                                         CloudRequest(.POST, uploadURL(name), headers: headers, body: body))
        return try parseObject(r)
    }

    /// Asks the rules whether `name` may be created, as production does it: the start of a
    /// resumable upload is checked against the create rule with the resource it declares (name,
    /// content type, size, custom metadata) before any byte is sent, and the session is then
    /// cancelled, so nothing is written. It declares 1 byte: a rule on the size
    /// (`request.resource.size < N`, or `> 0`) lets it pass and is met, or not, at the upload.
    /// The Firebase emulator checks a resumable upload only at finalize (firebase-tools'
    /// `should return 403 when resumable upload is unauthenticated`): there every start is
    /// allowed and a refusal arrives with the upload, as without a probe. One request (the
    /// cancel follows in the background).
    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        let session: String
        do {
            session = try await startSession(name, size: 1, metadata: V0Metadata.writable(metadata), what: "probe create")
        } catch StorageError.unauthorized(_, let m) {
            return .refused(message: m)
        }
        let request = command(session, "cancel", offset: nil, body: nil)
        let transport = self.transport, logger = self.logger, inner = innerRequests
        Task {
            do {
                _ = try await transport.send("cancel probe", path: name, idempotent: true,
                                             deadline: transport.clock.now + .seconds(10), request)
                inner.report("cancel", name, nil)
            } catch {
                inner.report("cancel", name, error)
                logger.debug("Firebase probe of \(name): cancelling its session failed (\(error)); it holds no bytes and expires by itself")
            }
        }
        return .allowed
    }

    /// Starts a resumable session; returns its URL. Creating a session writes nothing.
    func startSession(_ name: String, size: Int64, metadata: WritableMetadata, what: String = "start upload") async throws -> String {
        let headers: HTTPHeaders = [
            "X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start",
            "X-Goog-Upload-Header-Content-Length": String(size),
            "X-Goog-Upload-Header-Content-Type": metadata.contentType ?? "application/octet-stream",
            "Content-Type": "application/json; charset=utf-8",
        ]
        let body = ByteBuffer(data: ObjectResource.resourceBody(name: prefix + name, metadata))
        let r = try await transport.send(what, path: name, idempotent: true,
                                         CloudRequest(.POST, uploadURL(name), headers: headers, body: body))
        guard r.headers.first(name: "X-Goog-Upload-Status")?.lowercased() == "active",
              let url = r.headers.first(name: "X-Goog-Upload-URL"), !url.isEmpty else {
            throw StorageError.unknown(status: r.status, message: "resumable upload of \(name): the server did not open a session (no X-Goog-Upload-URL)")
        }
        return url.contains("://") ? url : storageBase + (url.hasPrefix("/") ? "" : "/") + url
    }

    func command(_ session: String, _ command: String, offset: Int64?, body: ByteBuffer?) -> CloudRequest {
        var headers: HTTPHeaders = ["X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": command]
        if let offset { headers.add(name: "X-Goog-Upload-Offset", value: String(offset)) }
        return CloudRequest(.POST, session, headers: headers, body: body ?? ByteBuffer())
    }

    static func isFinal(_ r: CloudResponse) -> Bool {
        r.headers.first(name: "X-Goog-Upload-Status")?.lowercased() == "final"
    }

    /// Uploads in chunks of `tuning.chunkSize` (`upload`, the last one `upload, finalize`). After a
    /// dropped connection, a timeout or a 5xx, asks the session (`query`) how many bytes it holds
    /// and goes on from there; a session the server forgot starts over (three times at most). The
    /// deadline restarts whenever the server holds more bytes.
    func resumableUpload(_ name: String, from source: UploadSource, size: Int64, metadata: WritableMetadata) async throws -> ObjectInfo {
        let sums = UploadChecksums(source: source)
        var session = try await startSession(name, size: size, metadata: metadata)
        var progress = ResumableProgress(policy: transport.policy)
        var mustAsk = false

        func restart() async throws {
            try progress.sessionLost(name)
            logger.info("Firebase upload of \(name): the session is gone; starting a new one")
            session = try await startSession(name, size: size, metadata: metadata)
            mustAsk = false
        }

        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            if mustAsk {
                do {
                    let r = try await transport.send("upload status", path: name, idempotent: true, deadline: progress.end,
                                                     command(session, "query", offset: nil, body: nil))
                    let got = r.headers.first(name: "X-Goog-Upload-Size-Received").flatMap { Int64($0) } ?? 0
                    guard got <= size else {
                        throw StorageError.unknown(status: r.status, message: "upload of \(name): the session holds \(got) bytes of \(size)")
                    }
                    progress.persisted(got)
                    mustAsk = false
                    if Self.isFinal(r) || got == size {
                        // Everything is there: a finalize (repeated, if need be) answers with the object.
                        let f = try await transport.send("upload finalize", path: name, idempotent: true, deadline: progress.end,
                                                         command(session, "finalize", offset: size, body: nil))
                        return try parseObject(f)
                    }
                } catch StorageError.objectNotFound {
                    try await restart()
                }
                continue
            }
            let offset = progress.offset
            let length = Int(min(Int64(tuning.chunkSize), size - offset))
            let last = offset + Int64(length) == size
            let verb = last ? (length > 0 ? "upload, finalize" : "finalize") : "upload"
            // The chunk streams from the source for as long as its bytes move (docs/SEMANTICS.md §5.2).
            let body = StreamedBody(source: source, offset: offset, length: Int64(length), sums: sums,
                                    stallTimeout: tuning.idleTimeout, clock: transport.clock)
            var request = command(session, verb, offset: offset, body: nil)
            if length > 0 { request = CloudRequest(.POST, session, headers: request.headers, streaming: body) }
            do {
                let r = try await transport.send("upload chunk", path: name, idempotent: false,
                                                 deadline: max(progress.end, transport.clock.now + .seconds(86_400)), request)
                if last || Self.isFinal(r) { return try parseObject(r) }
                progress.persisted(offset + Int64(length))
            } catch StorageError.objectNotFound {
                try await restart()
            } catch let e as StorageError where e.isTransient {
                progress.sent(body.progress.bytes)
                let pause = try progress.pause(after: e, name: name, size: size)
                logger.debug("Firebase upload of \(name): \(e) at byte \(offset); asking the session in \(pause)")
                try await progress.policy.pause(pause)
                mustAsk = true
            }
        }
    }
}
