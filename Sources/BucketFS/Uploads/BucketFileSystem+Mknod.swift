import Foundation
import FuseKit
import StorageModel

/// A regular file made with mknod, in the default mode (docs/SEMANTICS.md §3.3, "One generation
/// per written file"): GNU tar --xattrs makes each file with mknod, sets its xattrs, then opens,
/// writes and closes it; a program may mknod a file and open it after. The empty file is not
/// uploaded at mknod: its xattrs and mode ride along with its content, and the close of the open
/// that writes it uploads once. A file nobody opens within `mknodUploadDelay` is uploaded empty
/// then (as `touch` leaves it); one still open then is the business of its close.
extension BucketFileSystem {
    /// Closes mknod's own handle without an upload, and starts the wait for an open.
    func holdMknodded(ino: UInt64, fh: UInt64) {
        guard let r = beginRelease(ino: ino, fh: fh), let n = r.node else { return }
        endRelease(r)
        guard let s = superblock.stage(of: n) else { return }
        let delay = config.mknodUploadDelay, clock = config.clock
        Task { [weak self] in
            try? await clock.sleep(for: .milliseconds(Int64(delay * 1000)))
            await self?.uploadUnopened(n, s)
        }
    }

    /// Uploads a mknod's file that is still as mknod left it: staged, unsaved, open by nobody.
    func uploadUnopened(_ n: Node, _ s: StagedFile) async {
        guard superblock.stage(of: n) === s,
              superblock.withStage(s, { $0.openHandles == 0 && $0.pins == 0 && $0.state == .dirty && $0.retryTask == nil }) else { return }
        do {
            try await perform { () async throws(Errno) in try await self.upload(ino: n.ino) }
        } catch {
            // Logged by the attempt; background retries, then lost+found, as for any upload.
        }
        dropStageIfIdle(n)
    }
}
