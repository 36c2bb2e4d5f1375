// The guide "List files with Cloud Storage on Apple platforms", as written there.
import FirebaseStorage
import Foundation

enum ListSamples {
    static func run(_ top: StorageReference) async {
        let storageReference = top.child("files/uid")
        for i in 0..<5 { _ = try? await storageReference.child("file\(i)").putDataAsync(Data("\(i)".utf8)) }
        _ = try? await storageReference.child("sub/x").putDataAsync(Data())

        // List all files
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            storageReference.listAll { (result: StorageListResult?, error: Error?) in
                if let error = error {
                    show("listAll error", error)
                }
                for prefix in result?.prefixes ?? [] {
                    // The prefixes under storageReference.
                    // You may call listAll(completion:) recursively on them.
                    show("listAll prefix", prefix.fullPath)
                }
                for item in result?.items ?? [] {
                    // The items under storageReference.
                    show("listAll item", item.fullPath)
                }
                done.resume()
            }
        }

        // Paginate list results
        var pages = 0
        func listAllPaginated(pageToken: String? = nil) async throws {
            let listResult: StorageListResult
            if let pageToken = pageToken {
                listResult = try await storageReference.list(maxResults: 2, pageToken: pageToken)
            } else {
                listResult = try await storageReference.list(maxResults: 2)
            }
            let prefixes = listResult.prefixes
            let items = listResult.items
            // Handle list result
            pages += 1
            show("page \(pages)", (prefixes + items).map(\.name).joined(separator: ","))
            // Process next page
            if let token = listResult.pageToken {
                try await listAllPaginated(pageToken: token)
            }
        }
        do {
            try await listAllPaginated()
        } catch {
            show("list error", error)
        }
        show("pages", pages)
    }
}
