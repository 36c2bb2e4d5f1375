import BucketFS
import Foundation
import FuseKit
import Logging

/// Wires the filesystem core to a FuseKit session and runs the loop on its own thread, so the
/// Swift concurrency pool stays free for the request Tasks.
enum FuseMounter {
    /// `passthrough`: the kernel may read the read cache's complete files itself.
    static func mount(filesystem: any FuseFileSystemBase, target: MountTarget, options: [String], passthrough: Bool = false,
                      logger: Logger) throws -> FuseSession {
        let session = FuseSession(filesystem: filesystem, target: target, options: options,
                                  maxThreads: 8, maxInFlight: 64, passthrough: passthrough, logger: { logger.warning("\($0)") })
        do {
            try session.mount()
            try session.installSignalHandlers()
        } catch {
            logger.critical("cannot \(target.isPreMounted ? "serve" : "mount at") \(target): \(error)")
            throw error
        }
        return session
    }

    static func run(_ session: FuseSession) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let t = Thread {
                session.run()
                done.resume()
            }
            t.stackSize = 8 << 20
            t.start()
        }
    }
}
