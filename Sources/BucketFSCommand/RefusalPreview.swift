import BucketFS
import Foundation
import StorageModel

/// What a dry run of `recover` can tell of a refusal without writing anything (docs/OPERATING.md,
/// "The recovery runbook"): the store's rules are asked where it has rules to ask
/// (`ObjectStore.probeCreate`: firebase://), and a file that was refused at its close is counted
/// as refused again unless the upload goes elsewhere (`--to`): a refusal at an upload's end (a
/// rule on the size or the bytes, an emulator that checks its rules only then, IAM) cannot be
/// asked for without making a generation.
enum RefusalPreview {
    /// Why uploading `e` as `name` would be refused, or nil when nothing says it would.
    static func reason(_ e: LostEntry, name: String, store: any ObjectStore, elsewhere: Bool) async -> String? {
        var metadata = e.record.metadata
        if metadata.contentType == nil { metadata.contentType = ContentTypePolicy().type(for: name) }
        let answer = try? await store.probeCreate(name, metadata: metadata)
        if case .refused(let m)?? = answer { return "the rules refuse to create it now (\(m))" }
        guard e.refused, !elsewhere else { return nil }
        let why = answer == .allowed
            ? "the rules let an upload of it start, but its refusal came at the upload's end, which cannot be asked without writing"
            : "the store has no rules to ask without writing (IAM answers an upload only)"
        return "it was refused at its close (\(e.reason)), and is refused again unless the rules or permissions changed since: \(why)"
    }
}
