import Foundation
import GCSStore
import StorageModel
import Testing

/// The default for an upload over the resumable threshold is one streamed request, and the
/// server's object has exactly its bytes (its crc32c and md5 confirmed by the store): checked the
/// same way against each real server. `addedKeyPrefixes`: custom keys the server adds itself
/// (`ConformanceCapabilities.addedKeyPrefixes`), left out of the comparison.
func checkStreamedResumableUpload(_ store: GCSStore, addedKeyPrefixes: [String] = []) async throws {
    let name = "streamed-\(UUID().uuidString.prefix(8)).bin"
    let data = bigData((9 << 20) + 3333, seed: 31)
    let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
    try data.write(to: URL(fileURLWithPath: path))
    defer { try? FileManager.default.removeItem(atPath: path) }
    let info = try await store.write(name, from: .file(path: path), metadata: .init(customMetadata: ["k": "v"]),
                                     preconditions: .doesNotExist)
    #expect(info.size == Int64(data.count))
    #expect(try await store.read(name, generation: nil, range: nil) == data)
    let custom = try await store.getMetadata(name).customMetadata
    #expect(custom.filter { kv in !addedKeyPrefixes.contains { kv.key.hasPrefix($0) } } == ["k": "v"])
    try await store.delete(name, preconditions: .none)
    try await store.shutdown()
}
