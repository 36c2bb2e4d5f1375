// The Firebase guides' Swift samples for Cloud Storage (references, file metadata, listing), as
// they read on Linux with bucketfs's library. Run it against a bucket you are signed in to:
//
//   bucketfs login firebase://BUCKET --api-key KEY --email ADDRESS
//   swift run firebase-samples gs://BUCKET users/UID
//
// `firebase-samples sign-in …` runs the other sample, a program that signs in by itself
// (SignInSample.swift).
//
// The second argument is a folder the bucket's rules let you write (the samples' "images/…"
// and "files/uid/…" are made under it). With FIREBASE_STORAGE_EMULATOR_HOST and
// FIREBASE_AUTH_EMULATOR_HOST set, it talks to the emulators. docs/FIREBASE.md walks through it.
import FirebaseStore
import Foundation
import StorageModel

@main
struct FirebaseSamples {
    static func main() async {
        let args = CommandLine.arguments.dropFirst()
        if args.first == "sign-in" { exit(await SignInSample.run(Array(args.dropFirst()))) }
        guard args.count == 2, let url = args.first, let folder = args.last else {
            FileHandle.standardError.write(Data("usage: firebase-samples gs://BUCKET FOLDER\n".utf8))
            exit(2)
        }
        do {
            // The one line that differs from the guides, which call Storage.storage() with the
            // app's configuration: here the bucket is named, and the sign-in is bucketfs login's.
            let storage = try Storage.storage(url: url)
            let top = storage.reference().child(folder)
            try await references(storage, top)
            try await fileMetadata(top)
            try await listing(top)
            try await storage.shutdown()
        } catch {
            FileHandle.standardError.write(Data("firebase-samples: \(error)\n".utf8))
            exit(1)
        }
    }

    static func show(_ what: String, _ value: Any?) {
        print("\(what): \(value.map { "\($0)" } ?? "nil")")
    }

    // Create a reference.
    static func references(_ storage: Storage, _ storageRef: StorageReference) async throws {
        // Create a child reference
        // imagesRef now points to "images"
        let imagesRef = storageRef.child("images")
        // Child references can also take paths delimited by '/'
        // spaceRef now points to "images/space.jpg"
        // imagesRef still points to "images"
        var spaceRef = storageRef.child("images/space.jpg")
        // This is equivalent to creating the full reference
        let storagePath = "gs://\(storage.bucket)/\(storageRef.fullPath)/images/space.jpg"
        spaceRef = try storage.reference(forURL: storagePath)

        // Parent allows us to move to the parent of a reference
        // imagesParent now points to 'images'
        let imagesParent = spaceRef.parent()
        // Root allows us to move all the way back to the top of our bucket
        // rootRef now points to the root
        let rootRef = spaceRef.root()
        // References can be chained together multiple times
        // earthRef points to "images/earth.jpg"
        let earthRef = spaceRef.parent()?.child("earth.jpg")
        // nilRef is nil, since the parent of root is nil
        let nilRef = spaceRef.root().parent()

        show("imagesRef.fullPath", imagesRef.fullPath)
        show("spaceRef.fullPath", spaceRef.fullPath)
        show("spaceRef.name", spaceRef.name)
        show("spaceRef.bucket", spaceRef.bucket)
        show("imagesParent == imagesRef", imagesParent == imagesRef)
        show("rootRef.fullPath", "'\(rootRef.fullPath)'")
        show("earthRef.fullPath", earthRef?.fullPath)
        show("nilRef", nilRef)
    }

    // Get and update file metadata, custom metadata, delete a property with nil.
    static func fileMetadata(_ storageRef: StorageReference) async throws {
        // The guides upload the forest first; so does this sample.
        let forestRef = storageRef.child("images/forest.jpg")
        var upload = StorageMetadata()
        upload.contentType = "image/png"
        _ = try await forestRef.putData(Data(repeating: 7, count: 3000), metadata: upload)

        // Get metadata properties
        let metadata = try await forestRef.getMetadata()
        show("metadata.name", metadata.name)
        show("metadata.size", metadata.size)
        show("metadata.contentType", metadata.contentType)

        // Create file metadata to update
        var newMetadata = StorageMetadata()
        newMetadata.cacheControl = "public,max-age=300"
        newMetadata.contentType = "image/jpeg"
        // Update metadata properties
        let updatedMetadata = try await forestRef.updateMetadata(newMetadata)
        show("updated.cacheControl", updatedMetadata.cacheControl)
        show("updated.contentType", updatedMetadata.contentType)

        // Delete the metadata property
        var deleting = StorageMetadata()
        deleting.contentType = nil
        let afterDelete = try await forestRef.updateMetadata(deleting)
        show("deleted.contentType", afterDelete.contentType)
        show("deleted.cacheControl", afterDelete.cacheControl)

        // Custom metadata
        let custom = [
            "customMetadata": [
                "location": "Yosemite, CA, USA",
                "activity": "Hiking",
            ],
        ]
        var withCustom = StorageMetadata()
        withCustom.customMetadata = custom["customMetadata"]
        let afterCustom = try await forestRef.updateMetadata(withCustom)
        show("customMetadata", afterCustom.customMetadata?.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))
    }

    // List all files, then page through them.
    static func listing(_ top: StorageReference) async throws {
        let storageReference = top.child("files/uid")
        for i in 0..<5 { _ = try await storageReference.child("file\(i)").putData(Data("\(i)".utf8)) }
        _ = try await storageReference.child("sub/x").putData(Data())

        let result = try await storageReference.listAll()
        for prefix in result.prefixes {
            // The prefixes under storageReference.
            // You may call listAll(completion:) recursively on them.
            show("listAll prefix", prefix.fullPath)
        }
        for item in result.items {
            // The items under storageReference.
            show("listAll item", item.fullPath)
        }

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
        try await listAllPaginated()
        show("pages", pages)
    }
}
