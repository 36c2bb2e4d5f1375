import Foundation

/// The open file and directory handles, by number. A part of the superblock, guarded by its lock.
/// An open handle keeps its node in the table (`holds`).
///
/// INVARIANT: every open file and directory names a node in the table
/// (`Superblock.invariantViolations`).
struct HandleTable {
    /// GUARDED_BY(Superblock.lock)
    private(set) var files: [UInt64: Handle] = [:]
    /// GUARDED_BY(Superblock.lock)
    private(set) var directories: [UInt64: DirHandle] = [:]
    /// GUARDED_BY(Superblock.lock)
    private var nextFh: UInt64 = 1

    /// Adds a file handle; returns its number.
    mutating func add(_ h: Handle) -> UInt64 {
        let fh = nextFh
        nextFh += 1
        files[fh] = h
        return fh
    }

    /// Adds a directory handle; returns its number.
    mutating func add(_ h: DirHandle) -> UInt64 {
        let fh = nextFh
        nextFh += 1
        directories[fh] = h
        return fh
    }

    mutating func removeFile(_ fh: UInt64) -> Handle? { files.removeValue(forKey: fh) }
    mutating func removeDirectory(_ fh: UInt64) -> DirHandle? { directories.removeValue(forKey: fh) }

    /// The open file handles on inode `ino`.
    func fileHandles(on ino: UInt64) -> [Handle] { files.values.filter { $0.ino == ino } }

    /// Whether an open file or directory handle holds inode `ino`.
    func holds(_ ino: UInt64) -> Bool {
        files.values.contains { $0.ino == ino } || directories.values.contains { $0.ino == ino }
    }

    /// The inodes of the open file handles.
    var openFileInos: Set<UInt64> { Set(files.values.map(\.ino)) }

    /// Whether a handle open for writing keeps `s` (its close will upload it).
    func isOpenForWriting(_ s: StagedFile) -> Bool { files.values.contains { $0.writable && $0.stage === s } }

    /// How many handles open for writing keep `s`.
    func writers(of s: StagedFile) -> Int { files.values.filter { $0.writable && $0.stage === s }.count }

    /// The streams of the open file handles.
    var streams: [ReadStream] { files.values.compactMap(\.stream) }
}
