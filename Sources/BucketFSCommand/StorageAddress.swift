import FirebaseStore
import Foundation
import GCSStore
import StorageModel

/// Where a mount's requests go and which setting chose it, for the log line of an operation that
/// could not reach the store (docs/SEMANTICS.md §5): the same names the commands' refusals give.
enum StorageAddress {
    static func of(_ store: any ObjectStore, gcs: GCSOptions, environment: [String: String]) -> String? {
        let given = gcs.endpoint.flatMap { $0.isEmpty ? nil : $0 } != nil
        func set(_ variable: String) -> String {
            given ? "--endpoint" : environment[variable].map { !$0.isEmpty } == true ? variable : "the default"
        }
        if let g = store as? GCSStore { return "\(g.endpoint), set by \(set("STORAGE_EMULATOR_HOST"))" }
        if let f = store as? FirebaseStore { return "\(f.endpoints.storage.absoluteString), set by \(set("FIREBASE_STORAGE_EMULATOR_HOST"))" }
        return nil
    }
}
