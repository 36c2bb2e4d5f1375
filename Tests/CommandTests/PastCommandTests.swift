import ArgumentParser
import Foundation
import StorageModel
import Testing
@testable import bucketfs

/// `mount --at`, `versions` and `restore` as the command line takes them (docs/RESTORE.md).
@Suite struct PastCommandTests {
    @Test func fstabsAtOptionBecomesAt() {
        #expect(MountHelper.translate(["gs://b", "/mnt", "-o", "at=2026-11-20T10:00:00Z,allow_other"])
                == ["gs://b", "/mnt", "--at", "2026-11-20T10:00:00Z", "--allow-other"])
    }

    @Test func aDurationIsPinnedBeforeTheMountProcessStarts() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(PastMount.pinned(["mount", "s", "m", "--at", "2h", "--foreground"], now: now)
                == ["mount", "s", "m", "--at", "2027-01-15T06:00:00.000Z", "--foreground"])
        #expect(PastMount.pinned(["mount", "s", "m", "--at=90m"], now: now) == ["mount", "s", "m", "--at=2027-01-15T06:30:00.000Z"])
        // Anything else passes unchanged (a source named like a duration, an unreadable time).
        #expect(PastMount.pinned(["mount", "2h", "m", "--at", "soon"], now: now) == ["mount", "2h", "m", "--at", "soon"])
    }

    @Test func firebaseIsRefusedAtOnceAndAnUnreadableTimeToo() {
        do {
            _ = try Mount.parse(["firebase://app.firebasestorage.app", "/mnt", "--at", "1h"])
            Issue.record("a firebase:// mount at a moment was accepted")
        } catch {
            #expect(Mount.message(for: error).contains("has no versions"))
        }
        do {
            _ = try Mount.parse(["gs://b", "/mnt", "--at", "yesterday"])
            Issue.record("an unreadable --at was accepted")
        } catch {
            #expect(Mount.message(for: error).contains("is not a time"))
        }
    }

    @Test func restoreTakesOneOfAtAndGeneration() {
        #expect(throws: (any Error).self) { try Restore.parse(["gs://b/x"]) }
        #expect(throws: (any Error).self) { try Restore.parse(["gs://b/x", "--at", "1h", "--generation", "5"]) }
        #expect(throws: (any Error).self) { try Restore.parse(["gs://b/x", "--generation", "5", "-r"]) }
        #expect(throws: (any Error).self) { try Restore.parse(["gs://b/x", "--generation", "5", "--delete"]) }
        #expect(throws: Never.self) { try Restore.parse(["gs://b/x", "--at", "1h", "-r", "--delete"]) }
    }
}
