import Foundation
import FirebaseStore
import StorageModel

/// The Apple SDK's `StorageDownloadTask`: a download into memory (`getData`) or a file
/// (`write(toFile:)`), observed, paused, resumed and cancelled (docs/LIBRARY.md, "The Apple SDK's
/// API"). It reads the object's metadata, then streams its bytes (one ranged v0 GET of that
/// generation), reporting progress as they arrive. A pause stops the stream; a resume asks for
/// the rest of the same generation (an object replaced meanwhile fails the download). A file is
/// written beside its destination and moved there when complete.
open class StorageDownloadTask: StorageObservableTask, StorageTaskManagement, @unchecked Sendable {
    private let fileURL: URL?
    private let maxSize: Int64?
    /// Guarded by `stateLock`: the object being read, the bytes so far.
    private var object: ObjectInfo?
    private var received = Data()
    private var partial: FileHandle?

    init(reference: StorageReference, file: URL?, maxSize: Int64?) {
        fileURL = file
        self.maxSize = maxSize
        super.init(reference: reference)
    }

    /// The bytes of a completed `getData`.
    var downloadedData: Data? { stateLock.withLock { received } }

    private var partialURL: URL? {
        fileURL.map { $0.deletingLastPathComponent().appendingPathComponent(".\($0.lastPathComponent).download") }
    }

    open func enqueue() {
        guard move(to: .queueing, if: { $0 == .unknown }) != nil else { return }
        startRun(after: nil) { await self.drive($0) }
    }

    open func pause() {
        var stopping: Task<Void, Never>?
        guard let s = move(to: .paused, if: { $0.isActive }, { stopping = runner }) else { return }
        stopping?.cancel()
        fire(.pause, s)
    }

    open func resume() {
        guard let s = move(to: .resuming, if: { $0 == .paused || $0 == .pausing }) else { return }
        fire(.resume, s)
        startRun(after: stateLock.withLock { runner }) { await self.drive($0) }
    }

    open func cancel() { cancel(with: StorageError.cancelled) }

    func cancel(with e: StorageError) {
        var stopping: Task<Void, Never>?
        guard let s = move(to: .cancelled, if: { !$0.isFinished }, {
            error = e as NSError
            stopping = runner
        }) else { return }
        stopping?.cancel()
        discardPartial()
        finish(.failure, s)
    }

    // MARK: the run

    private func current(_ mine: Int) -> Bool {
        stateLock.withLock {
            guard run == mine, state.isActive else { return false }
            state = .running
            return true
        }
    }

    private func drive(_ mine: Int) async {
        let ref = reference
        do {
            guard current(mine) else { return }
            let store = try ref.storage.backend.store()
            let info = try await objectInfo(store)
            if let maxSize, info.size > maxSize {
                fail(StorageError.downloadSizeExceeded(total: info.size, maxSize: maxSize))
                return
            }
            let from = try openPartial()
            if from < info.size {
                guard current(mine) else { return }
                try await store.stream(ref.fullPath, generation: info.generation, range: from..<info.size) { [self] chunk in
                    try self.take(chunk, mine)
                }
            }
            try complete(info)
        } catch {
            let stopped = stateLock.withLock { run != mine || !state.isActive }
            if !stopped { fail(error) }
        }
    }

    /// The object's metadata, read once per download.
    private func objectInfo(_ store: FirebaseStore) async throws -> ObjectInfo {
        if let o = stateLock.withLock({ object }) { return o }
        try StoragePath.validateObjectName(reference.fullPath)
        let o = try await store.getMetadata(reference.fullPath)
        stateLock.withLock {
            object = o
            progress.totalUnitCount = o.size
        }
        return o
    }

    /// Bytes arrived: kept, counted, reported.
    private func take(_ chunk: Data, _ mine: Int) throws {
        let s = try stateLock.withLock { () -> StorageTaskSnapshot? in
            guard run == mine, state.isActive else { throw CancellationError() }
            if let partial { try partial.write(contentsOf: chunk) } else { received.append(chunk) }
            progress.completedUnitCount += Int64(chunk.count)
            state = .progress
            return snapshotUnderLock()
        }
        if let s { fire(.progress, s) }
    }

    /// The partial file opened for appending (made on the first run); the bytes already held.
    private func openPartial() throws -> Int64 {
        try stateLock.withLock {
            guard let target = partialURL else { return Int64(received.count) }
            if partial == nil {
                if !FileManager.default.fileExists(atPath: target.path) || progress.completedUnitCount == 0 {
                    guard FileManager.default.createFile(atPath: target.path, contents: nil) else {
                        throw StorageError.unknown(message: "cannot create \(target.path) beside the destination", serverError: [:])
                    }
                }
                let h = try FileHandle(forWritingTo: target)
                try h.seekToEnd()
                partial = h
            }
            return progress.completedUnitCount
        }
    }

    private func complete(_ info: ObjectInfo) throws {
        let got = stateLock.withLock { progress.completedUnitCount }
        guard got == info.size else {
            throw StorageError.unknown(message: "the download of \(reference.fullPath) ended at byte \(got) of \(info.size)", serverError: [:])
        }
        if let fileURL, let partialURL {
            try stateLock.withLock {
                try partial?.close()
                partial = nil
            }
            _ = try? FileManager.default.removeItem(at: fileURL)
            try FileManager.default.moveItem(at: partialURL, to: fileURL)
        }
        guard let s = move(to: .success, if: { !$0.isFinished }, { metadata = StorageMetadata(info) }) else { return }
        finish(.success, s)
    }

    private func fail(_ e: Error) {
        let mapped = StorageError.from(e, bucket: reference.bucket, object: reference.fullPath)
        guard let s = move(to: .failed, if: { !$0.isFinished }, { error = mapped as NSError }) else { return }
        discardPartial()
        finish(.failure, s)
    }

    private func discardPartial() {
        stateLock.withLock {
            try? partial?.close()
            partial = nil
            received = Data()
        }
        if let partialURL { try? FileManager.default.removeItem(at: partialURL) }
    }
}
