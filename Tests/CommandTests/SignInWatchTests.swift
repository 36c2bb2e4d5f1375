import Foundation
import StorageModel
import Testing
@testable import bucketfs

/// A mount signed out (docs/OPERATING.md, "A mount signed out"): a 401 writes CACHE_DIR/.signed-out
/// with the server's words, an answer removes it, no answer leaves it; `bucketfs status` calls a
/// healthy running mount "running", a signed-out one "signed out" with a step to take.
@Suite struct SignInWatchTests {
    func directory() throws -> String {
        let dir = NSTemporaryDirectory() + "bucketfs-signin-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test func aRefusalSignsOutAndAnAnswerSignsBackIn() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let watch = SignInWatch(cacheDirectory: dir)
        watch.saw(StorageError.unauthenticated(message: "invalid_grant: Token has been expired or revoked."))
        #expect(SignInWatch.read(dir)?.reason == "invalid_grant: Token has been expired or revoked.")
        watch.saw(StorageError.timeout(message: "no answer"))
        #expect(SignInWatch.read(dir) != nil, "no answer says nothing about the sign-in")
        let out = RunningMountState.of(cacheDirectory: dir, mountPoint: "/mnt/b", source: "gs://b", mounted: true)
        #expect(out.state.hasPrefix("signed out: mounted at /mnt/b") && out.state.contains("invalid_grant"), "\(out.state)")
        #expect(out.step?.contains("gcloud auth application-default login") == true && out.step?.contains("bucketfs unmount /mnt/b") == true)
        watch.saw(StorageError.objectNotFound(path: "x"))
        #expect(SignInWatch.read(dir) == nil, "a 404 is an answer: the credentials were accepted")
        let running = RunningMountState.of(cacheDirectory: dir, mountPoint: "/mnt/b", source: "gs://b", mounted: true)
        #expect(running.state.hasPrefix("running: mounted at /mnt/b") && running.step == nil, "\(running.state)")
        #expect(!running.state.contains("wait for it"))
        let ended = RunningMountState.of(cacheDirectory: dir, mountPoint: "/mnt/b", source: "gs://b", mounted: false)
        #expect(ended.state.hasPrefix("unmounted, still uploading") && ended.step == nil, "\(ended.state)")
        let firebase = RunningMountState.signInCommand("firebase://p.appspot.com/users/u")
        #expect(firebase == "`bucketfs login firebase://p.appspot.com`")
    }
}
