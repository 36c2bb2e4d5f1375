import BucketFS
import FuseKit
import Testing

/// `ls -l` asks for security.selinux and system.posix_acl_access on every file: the core answers
/// such names synchronously (FuseKit then replies on the libfuse thread, no Task, no request).
@Suite struct ImmediateXattrTests {
    @Test func localNamespacesAndHiddenKeysAreAnsweredWithoutIO() {
        let h = Harness()
        // Not supported, so that `ls -l` stops asking for them after the first file (it asks
        // again for every file of a filesystem that answers ENODATA).
        #expect(h.fs.immediateGetxattrError(name: "security.selinux") == .ENOTSUP)
        #expect(h.fs.immediateGetxattrError(name: "security.ima") == .ENOTSUP)
        #expect(h.fs.immediateGetxattrError(name: "system.posix_acl_access") == .ENOTSUP)
        #expect(h.fs.immediateGetxattrError(name: "system.posix_acl_default") == .ENOTSUP)
        #expect(h.fs.immediateGetxattrError(name: "security.capability") == .ENODATA)
        #expect(h.fs.immediateGetxattrError(name: "trusted.x") == .ENODATA)
        #expect(h.fs.immediateGetxattrError(name: "user.firebaseStorageDownloadTokens") == .ENODATA)
        #expect(h.fs.immediateGetxattrError(name: "other.namespace") == .ENOTSUP)
        // Names that need the object's metadata go the normal way.
        #expect(h.fs.immediateGetxattrError(name: "user.location") == nil)
        #expect(h.fs.immediateGetxattrError(name: "user.storage.contentType") == nil)
        #expect(h.fs.immediateGetxattrError(name: "user.storage.md5Hash") == nil)
        #expect(h.store.counts.values.reduce(0, +) == 0)
    }
}

@Suite struct MkdirLookupErrorTests {
    /// A failing existence check must not be taken for "absent": mkdir reports it and writes nothing.
    @Test func mkdirReportsAFailedLookupInsteadOfCreating() async {
        let h = Harness()
        h.store.failNext("list", times: 2, with: .unknown(status: 503, message: "unavailable"))
        await #expect(throws: Errno.EIO) { try await h.fs.mkdir(parent: Harness.root, name: "d", mode: 0o755) }
        #expect(h.store.counts["write"] == nil)
    }
}
