import Foundation
import FirebaseStore
import StorageModel

/// The Apple SDK's `StorageUploadTask`: an upload of `Data` or a file, observed, paused, resumed
/// and cancelled (docs/LIBRARY.md, "The Apple SDK's API"). It is one resumable v0 upload
/// (`FirebaseUploadSession`), sent a chunk (`Storage.uploadChunkSizeBytes`) at a time: progress
/// is reported as a chunk's bytes go out (every 100 ms) and when the server holds it, a pause
/// takes effect when the chunk in flight is in, and a resume goes on from there in the same
/// session. A cancel stops the chunk in flight and ends the session: no object is made.
open class StorageUploadTask: StorageObservableTask, StorageTaskManagement, @unchecked Sendable {
    private let source: UploadSource
    private let fileURL: URL?
    private let uploadMetadata: StorageMetadata
    /// Guarded by `stateLock`: the session once begun.
    private var session: FirebaseUploadSession?

    init(reference: StorageReference, source: UploadSource, file: URL?, metadata: StorageMetadata?) {
        self.source = source
        fileURL = file
        let m = (metadata?.copy() as? StorageMetadata) ?? StorageMetadata()
        m.path = reference.fullPath
        m.name = reference.name
        if m.contentType == nil { m.contentType = MIMETypes.type(forExtension: file?.pathExtension) }
        uploadMetadata = m
        super.init(reference: reference)
    }

    /// Starts the upload (the `put` calls do).
    open func enqueue() {
        guard move(to: .queueing, if: { $0 == .unknown }) != nil else { return }
        if let fileURL {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: fileURL.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                fail(StorageError.unknown(message: "File at URL: \(fileURL.absoluteString) is not reachable. Ensure file URL is not " +
                    "a directory, symbolic link, or invalid url.", serverError: [:]))
                return
            }
        }
        startRun(after: nil) { await self.drive($0) }
    }

    /// Stops sending after the chunk in flight.
    open func pause() {
        guard let s = move(to: .paused, if: { $0.isActive }, { metadata = uploadMetadata }) else { return }
        fire(.pause, s)
    }

    /// Goes on from what the server holds.
    open func resume() {
        guard let s = move(to: .resuming, if: { $0 == .paused || $0 == .pausing }, { metadata = uploadMetadata }) else { return }
        fire(.resume, s)
        let previous = stateLock.withLock { runner }
        startRun(after: previous) { await self.drive($0) }
    }

    /// Ends the upload; observers of `.failure` get `StorageError.cancelled`.
    open func cancel() {
        var stopped: (Task<Void, Never>?, FirebaseUploadSession?) = (nil, nil)
        guard let s = move(to: .cancelled, if: { !$0.isFinished }, {
            error = StorageError.cancelled as NSError
            metadata = uploadMetadata
            stopped = (runner, session)
        }) else { return }
        stopped.0?.cancel()
        if let session = stopped.1 { Task { await session.cancel() } }
        finish(.failure, s)
    }

    // MARK: the run

    private func drive(_ mine: Int) async {
        do {
            let session = try begin()
            while true {
                let go = stateLock.withLock { () -> Bool in
                    guard run == mine, state.isActive || state == .resuming else { return false }
                    state = .running
                    return true
                }
                guard go else { return }
                let object = try await session.sendNext { [weak self] sent in self?.sending(sent) }
                let done = session.persisted
                if let object {
                    let s = move(to: .success, if: { !$0.isFinished }) {
                        progress.completedUnitCount = done
                        let m = StorageMetadata(object)
                        metadata = m
                    }
                    if let s {
                        fire(.progress, s)
                        finish(.success, s)
                    }
                    return
                }
                let s = stateLock.withLock { () -> StorageTaskSnapshot? in
                    progress.completedUnitCount = done
                    guard state.isActive else { return nil }
                    state = .progress
                    metadata = uploadMetadata
                    return snapshotUnderLock()
                }
                if let s { fire(.progress, s) }
            }
        } catch {
            fail(error)
        }
    }

    /// Bytes of the chunk in flight have gone out: progress, if the task still runs.
    private func sending(_ sent: Int64) {
        let s = stateLock.withLock { () -> StorageTaskSnapshot? in
            guard state.isActive, sent > progress.completedUnitCount else { return nil }
            progress.completedUnitCount = sent
            state = .progress
            return snapshotUnderLock()
        }
        if let s { fire(.progress, s) }
    }

    /// The session, begun on the first run.
    private func begin() throws -> FirebaseUploadSession {
        if let s = stateLock.withLock({ session }) { return s }
        let store = try reference.storage.backend.store()
        let chunk = reference.storage.uploadChunkSizeBytes
        let s = try store.beginUpload(reference.fullPath, from: source, metadata: uploadMetadata.writable,
                                      chunkSize: chunk == .max ? nil : chunk)
        stateLock.withLock {
            session = s
            progress.totalUnitCount = s.size
        }
        return s
    }

    private func fail(_ e: Error) {
        let mapped = StorageError.from(e, bucket: reference.bucket, object: reference.fullPath)
        // A cancel or a pause already said what happened.
        guard let s = move(to: .failed, if: { $0.isActive || $0 == .queueing }, {
            error = mapped as NSError
            metadata = uploadMetadata
        }) else { return }
        finish(.failure, s)
    }
}
