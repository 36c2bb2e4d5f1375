import StorageModel

/// One cached object version (immutable), shared by its node and the readdir snapshots that
/// showed it.
final class InfoBox: Sendable {
    let info: ObjectInfo
    init(_ info: ObjectInfo) { self.info = info }
}
