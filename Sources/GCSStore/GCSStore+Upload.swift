import CloudHTTP
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

/// Multipart uploads for small objects; resumable uploads, streamed from disk in one request, for large ones.
extension GCSStore {
    func multipartUpload(_ name: String, from source: UploadSource, size: Int64, metadata: WritableMetadata,
                         preconditions: Preconditions) async throws -> ObjectInfo {
        let content = try MediaRequests.content(of: source)
        let boundary = "bucketfs-\(UUID().uuidString)"
        let body = MediaRequests.multipartBody(boundary: boundary, resource: ObjectResource.resourceBody(name: prefix + name, metadata),
                                               contentType: metadata.contentType, content: content,
                                               jsonCharset: "UTF-8", closingLineBreak: true)
        let url = uploadPath + CloudURL.query([("uploadType", "multipart")]
            + GCSJSONAPI.preconditionItems(preconditions) + [("fields", GCSJSONAPI.objectFields)])
        let headers: HTTPHeaders = ["Content-Type": "multipart/related; boundary=\(boundary)"]
        // Repeating an insert is only safe when a precondition makes the second one fail; a 412
        // after a lost answer may be the first attempt's own object.
        let r = try await transport.send("upload", path: name, idempotent: RetryPolicy.isGuarded(preconditions),
                                         expect: Expect(doneAfterLostAnswer: { $0 == 412 }),
                                         CloudRequest(.POST, url, headers: headers, body: body))
        if r.afterLostAnswer {
            return try await confirmOwn(name, crc32c: CRC32C.base64(CRC32C.checksum(content)),
                                        md5: Data(Insecure.MD5.hash(data: content)).base64EncodedString(),
                                        size: Int64(content.count), notGeneration: preconditions.ifGenerationMatch)
        }
        return try await confirmed(name, try parseObject(r), sums: UploadChecksums(content), size: Int64(content.count))
    }

    /// Starts a resumable session; returns its URL. Retried under the rule of every insert (a
    /// small one's multipart upload too): only when a precondition guards it. A session whose
    /// start answer was lost still writes the object once its bytes are sent, and the retry's
    /// second session would write it again: the upload's size must not change whether a fault
    /// fails it (docs/SEMANTICS.md §5.7).
    private func startSession(_ name: String, size: Int64, metadata: WritableMetadata,
                              preconditions: Preconditions) async throws -> String {
        let url = uploadPath + CloudURL.query([("uploadType", "resumable")]
            + GCSJSONAPI.preconditionItems(preconditions) + [("fields", GCSJSONAPI.objectFields)])
        var headers = Self.jsonHeaders
        headers.add(name: "X-Upload-Content-Type", value: metadata.contentType ?? "application/octet-stream")
        headers.add(name: "X-Upload-Content-Length", value: String(size))
        let body = ByteBuffer(data: ObjectResource.resourceBody(name: prefix + name, metadata))
        let r = try await transport.send("start upload", path: name, idempotent: RetryPolicy.isGuarded(preconditions),
                                         CloudRequest(.POST, url, headers: headers, body: body))
        guard let location = r.headers.first(name: "Location"), !location.isEmpty else {
            throw StorageError.unknown(status: r.status, message: "resumable upload of \(name): no session Location")
        }
        return location.contains("://") ? location : endpoint + (location.hasPrefix("/") ? "" : "/") + location
    }

    /// Sends the whole source as one streamed request of a resumable session (or, with
    /// `tuning.chunkSize` set, one request per chunk, for servers and proxies that need it). Only
    /// after a reset, a stall, a timeout or a 5xx does it ask the session what it persisted
    /// (`Content-Range: bytes */N` → 308 with `Range: bytes=0-K`) and send the rest from there.
    /// The deadline restarts whenever the server has persisted more bytes, and while the body's
    /// bytes move (docs/SEMANTICS.md §5.2). The crc32c of the bytes sent is summed as they go,
    /// and the finished object must carry it (`UploadChecksums`).
    func resumableUpload(_ name: String, from source: UploadSource, size: Int64, metadata: WritableMetadata,
                         preconditions: Preconditions) async throws -> ObjectInfo {
        let sums = UploadChecksums(source: source)
        var session = try await startSession(name, size: size, metadata: metadata, preconditions: preconditions)
        var progress = ResumableProgress(policy: transport.policy)
        var mustAsk = false

        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            if mustAsk {
                do {
                    let r = try await transport.send("upload status", path: name, idempotent: true, deadline: progress.end,
                                                     expect: Expect(accept: { $0 == 308 }),
                                                     CloudRequest(.PUT, session, headers: ["Content-Range": "bytes */\(size)"]))
                    if r.status != 308 { return try await finished(name, r, sums: sums, size: size) }
                    progress.persisted(GCSJSONAPI.persistedBytes(rangeHeader: r.headers.first(name: "Range")))
                    mustAsk = false
                } catch StorageError.objectNotFound, StorageError.unknown(status: 410, _) {
                    // The session is gone: start over, a bounded number of times.
                    try progress.sessionLost(name)
                    logger.info("GCS upload of \(name): session expired; starting a new one")
                    session = try await startSession(name, size: size, metadata: metadata, preconditions: preconditions)
                    mustAsk = false
                }
                continue
            }
            let offset = progress.offset
            let length = tuning.chunkSize.map { min(Int64($0), size - offset) } ?? (size - offset)
            let range = size == 0 ? "bytes */0" : "bytes \(offset)-\(offset + length - 1)/\(size)"
            let body = StreamedBody(source: source, offset: offset, length: length, sums: sums,
                                    stallTimeout: tuning.idleTimeout, clock: transport.clock)
            do {
                // The body streams for as long as it moves: the deadline bounds the asking, not the sending.
                let r = try await transport.send("upload", path: name, idempotent: false,
                                                 deadline: max(progress.end, transport.clock.now + .seconds(86_400)),
                                                 expect: Expect(accept: { $0 == 308 }),
                                                 CloudRequest(.PUT, session, headers: ["Content-Range": range], streaming: body))
                if r.status != 308 { return try await finished(name, r, sums: sums, size: size) }
                progress.persisted(GCSJSONAPI.persistedBytes(rangeHeader: r.headers.first(name: "Range")))
                if progress.offset <= offset && length > 0 {
                    // No progress on a complete answer: ask rather than loop.
                    progress.noProgress()
                    mustAsk = true
                }
            } catch let e as StorageError where e.isTransient {
                progress.sent(body.progress.bytes)
                let pause = try progress.pause(after: e, name: name, size: size)
                logger.debug("GCS upload of \(name): \(e) after byte \(offset); asking the session in \(pause)")
                try await progress.policy.pause(pause)
                mustAsk = true
            }
        }
    }

    /// The finished object of a resumable session, which must hold exactly the bytes sent. One
    /// that does not is removed again (only that generation), so that the retry the caller makes
    /// under its original precondition is not refused by a corrupt object of our own.
    private func finished(_ name: String, _ r: CloudResponse, sums: UploadChecksums, size: Int64) async throws -> ObjectInfo {
        try await confirmed(name, try parseObject(r), sums: sums, size: size)
    }

    func confirmed(_ name: String, _ info: ObjectInfo, sums: UploadChecksums, size: Int64) async throws -> ObjectInfo {
        let sent = sums.bytesSummed
        // A session that finished before every byte was sent cannot hold the file, whatever its
        // size says (a server that finishes a session when asked what it holds).
        let wrong = sent < size ? ("\(size) bytes", "an object finished after \(sent) bytes were sent")
            : await sums.mismatch(info, size: size)
        guard let (expected, got) = wrong else { return info }
        logger.error("GCS upload of \(name): the server stored \(got), the bytes sent have \(expected); removing generation \(info.generation)")
        try? await delete(name, preconditions: Preconditions(ifGenerationMatch: info.generation))
        throw StorageError.nonMatchingChecksum(path: name, expected: expected, got: got)
    }
}
