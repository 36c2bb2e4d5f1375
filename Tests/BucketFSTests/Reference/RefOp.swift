import Foundation
import PropertyBased
import Testing
import TestSupport

/// Bytes of a write, described by size and seed so that a sequence prints as short Swift code.
struct RefBytes: Equatable, Sendable {
    var size: Int
    var seed: UInt32
    var data: Data { Data.pattern(size, seed: seed) }
}

/// How a step opens a file.
enum RefOpenMode: Int, CaseIterable, Sendable {
    /// O_RDONLY.
    case read
    /// O_RDWR.
    case readWrite
    /// O_RDWR | O_TRUNC.
    case truncate
    /// O_WRONLY | O_APPEND: the kernel writes at the size it knows.
    case append

    var flags: Int32 {
        switch self {
        case .read: return O_RDONLY
        case .readWrite: return O_RDWR
        case .truncate: return O_RDWR | O_TRUNC
        case .append: return O_WRONLY | O_APPEND
        }
    }
}

/// One step of a reference-model run. Arguments are indexes into what the model holds at that
/// moment (taken modulo the count, like mountpoint-s3's `DirectoryIndex`/`ChildIndex`; a handle
/// index counts from the most recently opened), so any subsequence of a sequence is still a valid
/// sequence: shrinking drops steps and makes numbers small.
enum RefOp: Equatable, Sendable {
    // Through the mount, as the kernel calls the filesystem.
    /// lookup, then create (or open O_TRUNC when a file is there) + write + flush + release.
    case writeFile(dir: Int, name: Int, RefBytes)
    /// create (or open O_TRUNC when a file is there); the handle stays open.
    case create(dir: Int, name: Int)
    /// open a file; the handle stays open.
    case open(file: Int, mode: RefOpenMode)
    /// write through an open handle at `percent`% of the file's size (over 100: past the end;
    /// an O_APPEND handle writes at the end).
    case write(handle: Int, percent: Int, RefBytes)
    /// read `size` bytes through an open handle at `percent`% of the file's size.
    case read(handle: Int, percent: Int, size: Int)
    case fsync(handle: Int)
    /// flush + release.
    case close(handle: Int)
    /// truncate(2) on a path: setattr(size:) with no handle.
    case truncate(file: Int, percent: Int)
    /// rename(2) of a file or a directory to `name` in directory `toDir`.
    case rename(node: Int, toDir: Int, name: Int)
    case unlink(file: Int)
    case mkdir(dir: Int, name: Int)
    case rmdir(dir: Int)
    case setxattr(node: Int, key: Int, value: Int)
    case removexattr(node: Int, key: Int)
    /// opendir + readdir with a reply buffer of `buffer` entries + releasedir, compared with the model.
    case readdir(dir: Int, buffer: Int)
    /// Compares everything the mount shows, and the bucket, with the model.
    case check
    // Behind the mount's back, straight to the store.
    /// PUT `dir/name` (or `dir/name/child`, which makes `dir/name` a directory); names from
    /// `remoteNames`, some of which the mount must hide.
    case remotePut(dir: Int, name: Int, child: Int?, RefBytes)
    case remoteDelete(object: Int)
    /// PATCH one custom key of an object (a placeholder included); `value: nil` removes it.
    case remotePatch(object: Int, key: Int, value: Int?)
    /// The clock moves past the metadata TTL.
    case advanceClock

    static let names = ["a", "b", "c"]
    /// Names of objects put behind the mount's back: the mount's names, and names it must hide
    /// (an empty segment, `.`, `..`, a segment over 255 bytes).
    static let remoteNames = names + ["", ".", "..", String(repeating: "L", count: 256)]
    static let keys = ["k0", "k1", "k2"]
    static let values = ["v0", "v1", "v2", "v3"]
    static let sizes = [0, 1, 7, 100, 1000, 5000]

    var isRemote: Bool {
        switch self {
        case .remotePut, .remoteDelete, .remotePatch: return true
        default: return false
        }
    }

    /// Swift source for this step, to paste into a `regression_*` test.
    var swift: String {
        func b(_ x: RefBytes) -> String { ".init(size: \(x.size), seed: \(x.seed))" }
        switch self {
        case let .writeFile(dir, name, x): return ".writeFile(dir: \(dir), name: \(name), \(b(x)))"
        case let .create(dir, name): return ".create(dir: \(dir), name: \(name))"
        case let .open(file, mode): return ".open(file: \(file), mode: .\(mode))"
        case let .write(handle, percent, x): return ".write(handle: \(handle), percent: \(percent), \(b(x)))"
        case let .read(handle, percent, size): return ".read(handle: \(handle), percent: \(percent), size: \(size))"
        case let .fsync(handle): return ".fsync(handle: \(handle))"
        case let .close(handle): return ".close(handle: \(handle))"
        case let .truncate(file, percent): return ".truncate(file: \(file), percent: \(percent))"
        case let .rename(node, toDir, name): return ".rename(node: \(node), toDir: \(toDir), name: \(name))"
        case let .unlink(file): return ".unlink(file: \(file))"
        case let .mkdir(dir, name): return ".mkdir(dir: \(dir), name: \(name))"
        case let .rmdir(dir): return ".rmdir(dir: \(dir))"
        case let .setxattr(node, key, value): return ".setxattr(node: \(node), key: \(key), value: \(value))"
        case let .removexattr(node, key): return ".removexattr(node: \(node), key: \(key))"
        case let .readdir(dir, buffer): return ".readdir(dir: \(dir), buffer: \(buffer))"
        case .check: return ".check"
        case let .remotePut(dir, name, child, x):
            return ".remotePut(dir: \(dir), name: \(name), child: \(child.map(String.init) ?? "nil"), \(b(x)))"
        case let .remoteDelete(object): return ".remoteDelete(object: \(object))"
        case let .remotePatch(object, key, value):
            return ".remotePatch(object: \(object), key: \(key), value: \(value.map(String.init) ?? "nil"))"
        case .advanceClock: return ".advanceClock"
        }
    }
}

/// An object in the bucket before the mount starts: its name's segments (indexes into
/// `segments`, some of which the mount must hide), a placeholder (`dir/`) or a file.
struct RefSeed: Equatable, Sendable {
    var path: [Int]
    var placeholder: Bool
    var bytes: RefBytes

    /// The mount's names, and names it must hide: an empty segment (`a//b`), `.`, `..`, and a
    /// segment over 255 bytes.
    static let segments = ["a", "b", "c", "", ".", "..", String(repeating: "S", count: 256)]

    var name: String { path.map { Self.segments[$0 % Self.segments.count] }.joined(separator: "/") + (placeholder ? "/" : "") }
    var swift: String { ".init(path: \(path), placeholder: \(placeholder), bytes: .init(size: \(bytes.size), seed: \(bytes.seed)))" }
}

/// One generated case: the bucket it starts from, the steps, and the readdir reply buffer
/// (entries per answer) the comparisons use.
struct RefCase: Equatable, Sendable, CustomTestStringConvertible {
    var tree: [RefSeed]
    var ops: [RefOp]
    var buffer: Int

    init(tree: [RefSeed] = [], ops: [RefOp], buffer: Int = 4096) {
        self.tree = tree
        self.ops = ops
        self.buffer = buffer
    }

    /// Swift source for a `regression_*` test.
    var swift: String {
        """
        RefCase(tree: [\(tree.map { "\n        " + $0.swift + "," }.joined())\(tree.isEmpty ? "" : "\n    ")], ops: [
        \(ops.map { "        " + $0.swift + "," }.joined(separator: "\n"))
            ], buffer: \(buffer))
        """
    }

    var testDescription: String { "\n    " + swift + "\n" }
}

/// Generators (swift-property-based) of cases: shrinking drops steps and seeds and moves every
/// number towards 0.
enum RefGen {
    static let index = Gen.int(in: 0...15)
    static let name = Gen.int(in: 0...(RefOp.names.count - 1))
    static let bytes = zip(Gen.int(in: 0...(RefOp.sizes.count - 1)), Gen.uint32(in: 0...999))
        .map { RefBytes(size: RefOp.sizes[$0], seed: $1) }
    static let percent = Gen.int(in: 0...4).map { [0, 50, 100, 120, 150][$0] }
    static let mode = Gen.int(in: 0...(RefOpenMode.allCases.count - 1)).map { RefOpenMode(rawValue: $0)! }

    typealias OpGen = Generator<RefOp, AnySequence<Any>>
    static let writeFile: OpGen = zip(index, name, bytes).map { RefOp.writeFile(dir: $0, name: $1, $2) }.eraseToAny()
    static let create: OpGen = zip(index, name).map { RefOp.create(dir: $0, name: $1) }.eraseToAny()
    static let open: OpGen = zip(index, mode).map { RefOp.open(file: $0, mode: $1) }.eraseToAny()
    static let write: OpGen = zip(index, percent, bytes).map { RefOp.write(handle: $0, percent: $1, $2) }.eraseToAny()
    static let readSize = Gen.int(in: 0...3).map { [1, 100, 4096, 10000][$0] }
    static let read: OpGen = zip(index, percent, readSize).map { RefOp.read(handle: $0, percent: $1, size: $2) }.eraseToAny()
    static let fsync: OpGen = index.map { RefOp.fsync(handle: $0) }.eraseToAny()
    static let close: OpGen = index.map { RefOp.close(handle: $0) }.eraseToAny()
    static let truncate: OpGen = zip(index, percent).map { RefOp.truncate(file: $0, percent: $1) }.eraseToAny()
    static let rename: OpGen = zip(index, index, name).map { RefOp.rename(node: $0, toDir: $1, name: $2) }.eraseToAny()
    static let unlink: OpGen = index.map { RefOp.unlink(file: $0) }.eraseToAny()
    static let mkdir: OpGen = zip(index, name).map { RefOp.mkdir(dir: $0, name: $1) }.eraseToAny()
    static let rmdir: OpGen = index.map { RefOp.rmdir(dir: $0) }.eraseToAny()
    static let key = Gen.int(in: 0...(RefOp.keys.count - 1))
    static let value = Gen.int(in: 0...(RefOp.values.count - 1))
    static let setxattr: OpGen = zip(index, key, value).map { RefOp.setxattr(node: $0, key: $1, value: $2) }.eraseToAny()
    static let removexattr: OpGen = zip(index, key).map { RefOp.removexattr(node: $0, key: $1) }.eraseToAny()
    static let buffer = Gen.int(in: 0...3).map { [1, 2, 3, 4096][$0] }
    static let readdir: OpGen = zip(index, buffer).map { RefOp.readdir(dir: $0, buffer: $1) }.eraseToAny()
    static let check: OpGen = Gen.always(RefOp.check).eraseToAny()
    static let remoteName = Gen.int(in: 0...(RefOp.remoteNames.count - 1))
    /// A child name one time in three (the put makes a directory).
    static let child = Gen.int(in: 0...(RefOp.names.count * 3 - 1)).map { $0 < RefOp.names.count ? $0 : nil }
    static let remotePut: OpGen = zip(index, remoteName, child, bytes).map { RefOp.remotePut(dir: $0, name: $1, child: $2, $3) }.eraseToAny()
    static let remoteDelete: OpGen = index.map { RefOp.remoteDelete(object: $0) }.eraseToAny()
    static let patchValue = Gen.int(in: 0...RefOp.values.count).map { $0 < RefOp.values.count ? $0 : nil }
    static let remotePatch: OpGen = zip(index, key, patchValue).map { RefOp.remotePatch(object: $0, key: $1, value: $2) }.eraseToAny()
    static let advanceClock: OpGen = Gen.always(RefOp.advanceClock).eraseToAny()

    /// Weights: writes and handles most, then namespace changes, xattrs, changes behind the
    /// mount's back, listings and checkpoints, the clock.
    static let weights: [(weight: Double, gen: OpGen)] = [
        (10, writeFile), (6, create), (8, open), (10, write), (5, read), (2, fsync), (9, close),
        (4, truncate), (8, rename), (4, unlink), (7, mkdir), (4, rmdir),
        (5, setxattr), (3, removexattr), (3, readdir), (4, check),
        (6, remotePut), (3, remoteDelete), (3, remotePatch), (3, advanceClock),
    ]
    static let op = Gen<RefOp>.frequency(weights)

    /// Mostly the mount's names, sometimes one it must hide.
    static let segment = Gen.int(in: 0...19).map { $0 < 16 ? $0 % 3 : 3 + ($0 - 16) }
    static let seed = zip(segment.array(of: 1...3), Gen.bool(0.15), bytes)
        .map { (path: [Int], placeholder: Bool, bytes: RefBytes) -> RefSeed in
            RefSeed(path: path, placeholder: placeholder, bytes: placeholder ? RefBytes(size: 0, seed: 0) : bytes)
        }

    static let caseBuffer = Gen.int(in: 0...3).map { [4096, 1, 2, 5][$0] }

    static func cases(maxSteps: Int) -> Generator<RefCase, some SendableSequenceType> {
        zip(seed.array(of: 0...6), op.array(of: 1...maxSteps), caseBuffer)
            .map { (tree: [RefSeed], ops: [RefOp], buffer: Int) -> RefCase in RefCase(tree: tree, ops: ops, buffer: buffer) }
    }
}
