import BucketFS
import Foundation

/// What `bucketfs status` says of a cache directory that a process holds (docs/OPERATING.md,
/// "bucketfs status"): a mount running at its mount point, a signed-out one (every operation
/// refused until it signs in again), or a process whose mount has ended and that is still
/// uploading what was written before.
struct RunningMountState: Equatable {
    /// The state column.
    var state: String
    /// What to do, when something is wrong (status then exits 1).
    var step: String?

    static func of(cacheDirectory: String, mountPoint: String, source: String, mounted: Bool) -> RunningMountState {
        let pid = CacheDirectoryLock.holderPID(cacheDirectory)
        let who = pid.map { "bucketfs process \($0)" } ?? "a bucketfs process"
        guard mounted else {
            let wait = pid.map { " (`tail --pid=\($0) -f /dev/null` waits for it)" } ?? ""
            return RunningMountState(state: "unmounted, still uploading (\(who)): mount again once it has exited\(wait)")
        }
        guard let out = SignInWatch.read(cacheDirectory) else {
            return RunningMountState(state: "running: mounted at \(mountPoint) (\(who))")
        }
        return RunningMountState(
            state: "signed out: mounted at \(mountPoint) (\(who)), every request refused since \(out.since): \(out.reason)",
            step: "sign in again (\(signInCommand(source))), then `bucketfs unmount \(mountPoint)` and mount again")
    }

    /// How to sign in again for `source`.
    static func signInCommand(_ source: String) -> String {
        if source.hasPrefix("firebase://") {
            let bucket = source.dropFirst("firebase://".count).split(separator: "/").first.map(String.init) ?? "BUCKET"
            return "`bucketfs login firebase://\(bucket)`"
        }
        return "`gcloud auth application-default login`, a fresh --token or a working credential file; `bucketfs whoami \(source)` checks it"
    }
}
