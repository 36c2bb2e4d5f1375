import Foundation

/// The Apple SDK's `async` forms of the task calls (its AsyncAwait.swift): each starts the task
/// and returns when it ends.
public extension StorageReference {
    /// The whole object, refused with `downloadSizeExceeded` when larger than `maxSize`.
    func data(maxSize: Int64) async throws -> Data {
        try await withCheckedThrowingContinuation { c in
            self.getData(maxSize: maxSize) { data, error in
                c.resume(with: Self.result(data, error.map(StorageError.rebuilt)))
            }
        }
    }

    func putDataAsync(_ uploadData: Data, metadata: StorageMetadata? = nil,
                      onProgress: ((Progress?) -> Void)? = nil) async throws -> StorageMetadata {
        try await ended(putData(uploadData, metadata: metadata), onProgress) { $0.metadata }
    }

    func putFileAsync(from url: URL, metadata: StorageMetadata? = nil,
                      onProgress: ((Progress?) -> Void)? = nil) async throws -> StorageMetadata {
        try await ended(putFile(from: url, metadata: metadata), onProgress) { $0.metadata }
    }

    /// The object into `fileURL`; returns `fileURL`.
    func writeAsync(toFile fileURL: URL, onProgress: ((Progress?) -> Void)? = nil) async throws -> URL {
        try await ended(write(toFile: fileURL), onProgress) { _ in fileURL }
    }

    func list(maxResults: Int64) async throws -> StorageListResult {
        try await page(maxResults, nil)
    }

    func list(maxResults: Int64, pageToken: String) async throws -> StorageListResult {
        try await page(maxResults, pageToken)
    }

    /// The value of a task's success, or its error; `onProgress` for each progress event.
    private func ended<T>(_ task: StorageObservableTask, _ onProgress: ((Progress?) -> Void)?,
                          _ value: @escaping (StorageTaskSnapshot) -> T?) async throws -> T {
        try await withCheckedThrowingContinuation { c in
            if let onProgress { task.observe(.progress) { onProgress($0.progress) } }
            task.observe(.success) { s in
                c.resume(with: Self.result(value(s), nil))
            }
            task.observe(.failure) { s in
                c.resume(throwing: s.error.map(StorageError.rebuilt)
                    ?? StorageError.internalError(message: "Internal Storage Error: a task failed with no error"))
            }
        }
    }

    internal static func result<T>(_ value: T?, _ error: Error?) -> Result<T, Error> {
        if let value { return .success(value) }
        return .failure(error ?? StorageError.internalError(message: "Internal failure: no value and no error"))
    }
}

/// The Apple SDK's completion handlers that take a `Result` (its Result.swift).
public extension StorageReference {
    func downloadURL(completion: @escaping (Result<URL, Error>) -> Void) {
        downloadURL { completion(Self.result($0, $1)) }
    }

    @discardableResult
    func getData(maxSize: Int64, completion: @escaping (Result<Data, Error>) -> Void) -> StorageDownloadTask {
        getData(maxSize: maxSize) { completion(Self.result($0, $1)) }
    }

    func getMetadata(completion: @escaping (Result<StorageMetadata, Error>) -> Void) {
        getMetadata { completion(Self.result($0, $1)) }
    }

    func list(maxResults: Int64, pageToken: String, completion: @escaping (Result<StorageListResult, Error>) -> Void) {
        list(maxResults: maxResults, pageToken: pageToken) { completion(Self.result($0, $1)) }
    }

    func list(maxResults: Int64, completion: @escaping (Result<StorageListResult, Error>) -> Void) {
        list(maxResults: maxResults) { completion(Self.result($0, $1)) }
    }

    func listAll(completion: @escaping (Result<StorageListResult, Error>) -> Void) {
        listAll { completion(Self.result($0, $1)) }
    }

    @discardableResult
    func putData(_ uploadData: Data, metadata: StorageMetadata? = nil,
                 completion: @escaping (Result<StorageMetadata, Error>) -> Void) -> StorageUploadTask {
        putData(uploadData, metadata: metadata) { completion(Self.result($0, $1)) }
    }

    @discardableResult
    func putFile(from: URL, metadata: StorageMetadata? = nil,
                 completion: @escaping (Result<StorageMetadata, Error>) -> Void) -> StorageUploadTask {
        putFile(from: from, metadata: metadata) { completion(Self.result($0, $1)) }
    }

    func updateMetadata(_ metadata: StorageMetadata, completion: @escaping (Result<StorageMetadata, Error>) -> Void) {
        updateMetadata(metadata) { completion(Self.result($0, $1)) }
    }

    @discardableResult
    func write(toFile: URL, completion: @escaping (Result<URL, Error>) -> Void) -> StorageDownloadTask {
        write(toFile: toFile) { completion(Self.result($0, $1)) }
    }
}
