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
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            func listAllPaginated(pageToken: String? = nil) {
                let handle = { (result: StorageListResult?, error: Error?) in
                    guard let result = result else {
                        show("list error", error)
                        done.resume()
                        return
                    }
                    // Handle the page
                    pages += 1
                    show("page \(pages)", (result.prefixes + result.items).map(\.name).joined(separator: ","))
                    // Process the next page, if any
                    if let token = result.pageToken {
                        listAllPaginated(pageToken: token)
                    } else {
                        done.resume()
                    }
                }
                if let pageToken = pageToken {
                    storageReference.list(maxResults: 2, pageToken: pageToken, completion: handle)
                } else {
                    storageReference.list(maxResults: 2, completion: handle)
                }
            }
            listAllPaginated()
        }
        show("pages", pages)
    }
}
