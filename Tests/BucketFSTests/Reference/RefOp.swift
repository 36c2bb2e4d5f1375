import Foundation
import TestSupport

/// Bytes of a write, described by size and seed so that a sequence prints as short Swift code.
struct RefBytes: Equatable, Sendable {
    var size: Int
    var seed: UInt32
    var data: Data { Data.pattern(size, seed: seed) }
}

/// One step of a reference-model run. Arguments are indexes into what the model holds at that
/// moment (taken modulo the count, like mountpoint-s3's `DirectoryIndex`/`ChildIndex`), so any
/// subsequence of a sequence is still a valid sequence: shrinking only drops steps.
enum RefOp: Equatable, Sendable {
    // Through the mount, as the kernel calls the filesystem.
    /// lookup, then create (or open O_TRUNC when a file is there) + write + flush + release.
    case writeFile(dir: Int, name: Int, RefBytes)
    /// open O_WRONLY, write at `percent`% of the size (over 100: past the end), flush, release.
    case writeAt(file: Int, percent: Int, RefBytes)
    /// open O_WRONLY|O_APPEND, write at the size the kernel knows, flush, release.
    case append(file: Int, RefBytes)
    /// truncate(2) on a path: setattr(size:) with no handle.
    case truncate(file: Int, percent: Int)
    /// rename(2) of a file or a directory to `name` in directory `toDir`.
    case rename(node: Int, toDir: Int, name: Int)
    case unlink(file: Int)
    case mkdir(dir: Int, name: Int)
    case rmdir(dir: Int)
    case setxattr(node: Int, key: Int, value: Int)
    case removexattr(node: Int, key: Int)
    // Behind the mount's back, straight to the store.
    /// PUT `dir/name` (or `dir/name/child`, which makes `dir/name` a directory).
    case remotePut(dir: Int, name: Int, child: Int?, RefBytes)
    case remoteDelete(object: Int)
    /// PATCH one custom key of an object (a placeholder included); `value: nil` removes it.
    case remotePatch(object: Int, key: Int, value: Int?)
    /// The clock moves past the metadata TTL.
    case advanceClock

    static let names = ["a", "b", "c"]
    static let keys = ["k0", "k1", "k2"]
    static let values = ["v0", "v1", "v2", "v3"]

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
        case let .writeAt(file, percent, x): return ".writeAt(file: \(file), percent: \(percent), \(b(x)))"
        case let .append(file, x): return ".append(file: \(file), \(b(x)))"
        case let .truncate(file, percent): return ".truncate(file: \(file), percent: \(percent))"
        case let .rename(node, toDir, name): return ".rename(node: \(node), toDir: \(toDir), name: \(name))"
        case let .unlink(file): return ".unlink(file: \(file))"
        case let .mkdir(dir, name): return ".mkdir(dir: \(dir), name: \(name))"
        case let .rmdir(dir): return ".rmdir(dir: \(dir))"
        case let .setxattr(node, key, value): return ".setxattr(node: \(node), key: \(key), value: \(value))"
        case let .removexattr(node, key): return ".removexattr(node: \(node), key: \(key))"
        case let .remotePut(dir, name, child, x):
            return ".remotePut(dir: \(dir), name: \(name), child: \(child.map(String.init) ?? "nil"), \(b(x)))"
        case let .remoteDelete(object): return ".remoteDelete(object: \(object))"
        case let .remotePatch(object, key, value):
            return ".remotePatch(object: \(object), key: \(key), value: \(value.map(String.init) ?? "nil"))"
        case .advanceClock: return ".advanceClock"
        }
    }

    /// The same step with its bytes replaced (for shrinking), or nil when it has none.
    func withBytes(_ x: RefBytes) -> RefOp? {
        switch self {
        case let .writeFile(dir, name, _): return .writeFile(dir: dir, name: name, x)
        case let .writeAt(file, percent, _): return .writeAt(file: file, percent: percent, x)
        case let .append(file, _): return .append(file: file, x)
        case let .remotePut(dir, name, child, _): return .remotePut(dir: dir, name: name, child: child, x)
        default: return nil
        }
    }

    var bytes: RefBytes? {
        switch self {
        case let .writeFile(_, _, x), let .writeAt(_, _, x), let .append(_, x), let .remotePut(_, _, _, x): return x
        default: return nil
        }
    }
}


extension RefOp {
    /// A random sequence of up to `maxLength` steps from `seed`.
    static func sequence(seed: UInt64, maxLength: Int) -> [RefOp] {
        var rng = SplitMix64(seed: seed)
        let count = Int.random(in: 1...maxLength, using: &rng)
        return (0..<count).map { _ in random(using: &rng) }
    }

    static func random(using rng: inout SplitMix64) -> RefOp {
        func i(_ n: Int = 16) -> Int { Int.random(in: 0..<n, using: &rng) }
        func bytes() -> RefBytes {
            let size = [0, 1, 7, 100, 1000, 5000][i(6)]
            return RefBytes(size: size, seed: UInt32(i(1000)))
        }
        // Weights: namespace changes and writes most, then xattrs, remote changes, the clock.
        switch i(100) {
        case 0..<14: return .writeFile(dir: i(), name: i(names.count), bytes())
        case 14..<20: return .writeAt(file: i(), percent: [0, 50, 100, 120][i(4)], bytes())
        case 20..<25: return .append(file: i(), bytes())
        case 25..<30: return .truncate(file: i(), percent: [0, 50, 100, 150][i(4)])
        case 30..<40: return .rename(node: i(), toDir: i(), name: i(names.count))
        case 40..<45: return .unlink(file: i())
        case 45..<55: return .mkdir(dir: i(), name: i(names.count))
        case 55..<60: return .rmdir(dir: i())
        case 60..<67: return .setxattr(node: i(), key: i(keys.count), value: i(values.count))
        case 67..<71: return .removexattr(node: i(), key: i(keys.count))
        case 71..<80: return .remotePut(dir: i(), name: i(names.count), child: i(3) == 0 ? i(names.count) : nil, bytes())
        case 80..<85: return .remoteDelete(object: i())
        case 85..<90: return .remotePatch(object: i(), key: i(keys.count), value: i(3) == 0 ? nil : i(values.count))
        default: return .advanceClock
        }
    }
}
