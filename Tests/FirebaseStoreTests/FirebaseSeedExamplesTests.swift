import FirebaseStore
import Foundation
import StorageModel
import Testing

/// The seed documents' Swift examples (Firebase's Cloud Storage guides for Apple platforms: references, file metadata, listing), run
/// over firebase:// against the test server, as they are written but for the setup: `Storage`
/// comes from a FirebaseStore rather than `Storage.storage()`; `StorageMetadata` is a value here,
/// so the examples' `let newMetadata` is a `var`; `reference(forURL:)` throws, so it takes `try`;
/// the examples' "// ..." placeholders note what they got, for the test to check.
@Suite struct FirebaseSeedExamplesTests {
    static func withSeedBucket(_ body: (Storage, FirebaseFixture) async throws -> Void) async throws {
        try await withFirebase(flavour: .emulator) { f in
            let ref = Storage(store: f.store).reference()
            var forest = StorageMetadata()
            forest.contentType = "image/png"
            try await ref.child("images/forest.jpg").putData(Data(repeating: 7, count: 3000), metadata: forest)
            try await ref.child("images/uid/file1").putData(Data("file1".utf8))
            try await body(Storage(store: f.store), f)
        }
    }

    @Test func fileMetadataExamples() async throws {
        try await Self.withSeedBucket { storage, f in
            let storageRef = storage.reference()
            var got: StorageMetadata?

            // Create reference to the file whose metadata we want to retrieve
            let forestRef = storageRef.child("images/forest.jpg")
            // Get metadata properties
            do {
                let metadata = try await forestRef.getMetadata()
                got = metadata
            } catch {
                Issue.record("getMetadata: \(error)")
            }
            #expect(got?.name == "forest.jpg" && got?.size == 3000 && got?.contentType == "image/png")
            #expect(got?.fullPath == "images/forest.jpg" && got?.bucket == f.server.bucket)

            do {
                // Create file metadata to update
                var newMetadata = StorageMetadata()
                newMetadata.cacheControl = "public,max-age=300"
                newMetadata.contentType = "image/jpeg"
                // Update metadata properties
                do {
                    let updatedMetadata = try await forestRef.updateMetadata(newMetadata)
                    got = updatedMetadata
                } catch {
                    Issue.record("updateMetadata: \(error)")
                }
            }
            #expect(got?.cacheControl == "public,max-age=300" && got?.contentType == "image/jpeg")

            do {
                var newMetadata = StorageMetadata()
                newMetadata.contentType = nil
                do {
                    // Delete the metadata property
                    let updatedMetadata = try await forestRef.updateMetadata(newMetadata)
                    got = updatedMetadata
                } catch {
                    Issue.record("updateMetadata: \(error)")
                }
            }
            #expect(got?.contentType == nil, "nil deleted the property")
            #expect(got?.cacheControl == "public,max-age=300", "and only that one")
            let patches = f.server.recorded.filter { $0.method == "PATCH" }
            #expect(patches.count == 2)
            #expect(String(decoding: patches.last!.body, as: UTF8.self) == #"{"contentType":null}"#, "only the change is sent")

            // Custom metadata.
            let metadata = [
                "customMetadata": [
                    "location": "Yosemite, CA, USA",
                    "activity": "Hiking",
                ],
            ]
            var custom = StorageMetadata()
            custom.customMetadata = metadata["customMetadata"]
            got = try await forestRef.updateMetadata(custom)
            #expect(got?.customMetadata == ["location": "Yosemite, CA, USA", "activity": "Hiking"])
            #expect(try await forestRef.getMetadata().customMetadata == ["location": "Yosemite, CA, USA", "activity": "Hiking"])
        }
    }

    @Test func referenceExamples() async throws {
        try await Self.withSeedBucket { storage, f in
            let your_firebase_storage_bucket = "gs://\(f.server.bucket)"

            // Create a storage reference from our storage service
            let storageRef = storage.reference()

            // Create a child reference
            // imagesRef now points to "images"
            let imagesRef = storageRef.child("images")
            // Child references can also take paths delimited by '/'
            // spaceRef now points to "images/space.jpg"
            // imagesRef still points to "images"
            var spaceRef = storageRef.child("images/space.jpg")
            // This is equivalent to creating the full reference
            let storagePath = "\(your_firebase_storage_bucket)/images/space.jpg"
            spaceRef = try storage.reference(forURL: storagePath)
            #expect(imagesRef.fullPath == "images" && spaceRef.fullPath == "images/space.jpg")

            do {
                // Parent allows us to move to the parent of a reference
                // imagesRef now points to 'images'
                let imagesRef = spaceRef.parent()
                // Root allows us to move all the way back to the top of our bucket
                // rootRef now points to the root
                let rootRef = spaceRef.root()
                #expect(imagesRef?.fullPath == "images" && rootRef.fullPath == "" && rootRef.name == "")
            }

            // References can be chained together multiple times
            // earthRef points to "images/earth.jpg"
            let earthRef = spaceRef.parent()?.child("earth.jpg")
            // nilRef is nil, since the parent of root is nil
            let nilRef = spaceRef.root().parent()
            #expect(earthRef?.fullPath == "images/earth.jpg" && nilRef == nil)

            // Reference's path is: "images/space.jpg"
            // This is analogous to a file path on disk
            #expect(spaceRef.fullPath == "images/space.jpg")
            // Reference's name is the last segment of the full path: "space.jpg"
            // This is analogous to the file name
            #expect(spaceRef.name == "space.jpg")
            // Reference's bucket is the name of the storage bucket where files are stored
            #expect(spaceRef.bucket == f.server.bucket)

            do {
                // Points to the root reference
                let storageRef = storage.reference()
                // Points to "images"
                let imagesRef = storageRef.child("images")
                // Points to "images/space.jpg"
                // Note that you can use variables to create child values
                let fileName = "space.jpg"
                let spaceRef = imagesRef.child(fileName)
                // File path is "images/space.jpg"
                let path = spaceRef.fullPath
                // File name is "space.jpg"
                let name = spaceRef.name
                // Points to "images"
                let images = spaceRef.parent()
                #expect(path == "images/space.jpg" && name == "space.jpg" && images == imagesRef)
            }
            // The references reach the bucket: the forest is there, the space is not.
            #expect(try await imagesRef.child("forest.jpg").getMetadata().size == 3000)
            let e = await storageError { _ = try await spaceRef.getMetadata() }
            #expect(e == .objectNotFound(path: "images/space.jpg"))
        }
    }

    @Test func listingExamples() async throws {
        try await Self.withSeedBucket { storage, f in
            for i in 0..<250 { f.server.seed(String(format: "files/uid/file%03d", i), Data("\(i)".utf8)) }
            for d in ["a", "b", "c"] { f.server.seed("files/uid/\(d)/x", Data()) }
            var prefixesSeen: [String] = []
            var itemsSeen: [String] = []

            let storageReference = storage.reference().child("files/uid")
            do {
                let result = try await storageReference.listAll()
                for prefix in result.prefixes {
                    // The prefixes under storageReference.
                    // You may call listAll(completion:) recursively on them.
                    prefixesSeen.append(prefix.fullPath)
                }
                for item in result.items {
                    // The items under storageReference.
                    itemsSeen.append(item.fullPath)
                }
            } catch {
                Issue.record("listAll: \(error)")
            }
            #expect(prefixesSeen == ["files/uid/a", "files/uid/b", "files/uid/c"])
            #expect(itemsSeen == (0..<250).map { String(format: "files/uid/file%03d", $0) })

            var pages = 0
            var paged: [String] = []
            var pagedPrefixes: [String] = []
            func listAllPaginated(pageToken: String? = nil) async throws {
                let storageReference = storage.reference().child("files/uid")

                let listResult: StorageListResult
                if let pageToken = pageToken {
                    listResult = try await storageReference.list(maxResults: 100, pageToken: pageToken)
                } else {
                    listResult = try await storageReference.list(maxResults: 100)
                }
                let prefixes = listResult.prefixes
                let items = listResult.items
                // Handle list result
                pages += 1
                paged += items.map(\.fullPath)
                pagedPrefixes += prefixes.map(\.fullPath)
                #expect(items.count <= 100)

                // Process next page
                if let token = listResult.pageToken {
                    try await listAllPaginated(pageToken: token)
                }
            }
            try await listAllPaginated()
            #expect(pages == 3, "250 items at 100 per page")
            #expect(paged == itemsSeen)
            #expect(pagedPrefixes == prefixesSeen, "each prefix once, though the emulator sends them on every page")
        }
    }

    /// The listing document's own bucket: correctPrefix/happyItem, wrongPrefix//sadItem, lonelyItem/.
    @Test func namesTheSDKDoesNotList() async throws {
        try await withFirebase { f in
            for n in ["correctPrefix/happyItem", "wrongPrefix//sadItem", "lonelyItem/"] { f.server.seed(n, Data(n.utf8)) }
            let root = Storage(store: f.store).reference()
            let top = try await root.listAll()
            #expect(top.prefixes.map(\.fullPath) == ["correctPrefix", "lonelyItem", "wrongPrefix"])
            #expect(top.items.isEmpty)
            #expect(try await root.child("correctPrefix").listAll().items.map(\.fullPath) == ["correctPrefix/happyItem"])
            let wrong = try await root.child("wrongPrefix").listAll()
            #expect(wrong.items.isEmpty && wrong.prefixes.isEmpty)
            let lonely = try await root.child("lonelyItem").listAll()
            #expect(lonely.items.isEmpty && lonely.prefixes.isEmpty)
        }
    }
}
