import Foundation
import StorageModel

/// Whether a bucket keeps a past that `--at`, `versions` and `restore` can use, in words a user
/// can act on (docs/RESTORE.md "What each source keeps").
public enum KeptPast {
    /// nil when the bucket keeps old generations; else why the past cannot be shown, naming
    /// what soft delete keeps when the bucket has a policy (soft-deleted objects can be listed
    /// but not read until restored one by one, so a mount cannot show them).
    public static func refusal(_ state: VersioningState, source: String) -> String? {
        if state.enabled { return nil }
        var s = "\(source) keeps no old versions: object versioning is off, so an overwritten or deleted object is gone"
        if let r = state.softDeleteRetention, r > 0 {
            s += "; its soft-delete policy keeps deleted objects for \(duration(r)), but a soft-deleted object cannot be read"
                + " until it is restored (gcloud storage restore), so bucketfs cannot show it"
        } else {
            s += " (and it has no soft-delete policy)"
        }
        s += ". Turn versioning on (gcloud storage buckets update --versioning, or bucketfs mb DIR --versioning) to keep the past from now on"
        return s
    }

    /// Why a store shows no past at all (its `versions` is nil).
    public static func none(source: String) -> String {
        if source.hasPrefix("firebase://") {
            return "\(source): Firebase Storage's API (v0) has no versions: it lists and reads live objects only; use the bucket's gs:// name with Cloud Storage credentials"
        }
        return "\(source) shows no old versions"
    }

    static func duration(_ t: TimeInterval) -> String {
        let days = t / 86400
        if days >= 1, days == days.rounded() { return "\(Int(days)) day\(days == 1 ? "" : "s")" }
        let hours = t / 3600
        if hours >= 1, hours == hours.rounded() { return "\(Int(hours)) h" }
        return "\(Int(t)) s"
    }
}
