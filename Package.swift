// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "bucketfs",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "bucketfs", targets: ["bucketfs"]),
        .library(name: "StorageModel", targets: ["StorageModel"]),
        .library(name: "ObjectStores", targets: ["ObjectStores"]),
        .library(name: "FirebaseStore", targets: ["FirebaseStore"]),
        // The Firebase Apple SDK's Storage API, and the part of its Core and Auth that Storage
        // code needs, over FirebaseStore (docs/LIBRARY.md, "The Apple SDK's API").
        .library(name: "FirebaseStorage", targets: ["FirebaseStorage"]),
        .library(name: "FirebaseCore", targets: ["FirebaseCore"]),
        .library(name: "FirebaseAuth", targets: ["FirebaseAuth"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.25.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.27.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.1"),
    ],
    targets: [
        // libfuse3 through a tiny C module: header defines FUSE_USE_VERSION, shims are prefixed.
        .target(
            name: "CFuse",
            cSettings: [.unsafeFlags(["-I/usr/include/fuse3"])],
            linkerSettings: [.linkedLibrary("fuse3"), .linkedLibrary("pthread")]
        ),
        // The low-level FUSE API in Swift. Knows nothing about buckets.
        .target(name: "FuseKit", dependencies: ["CFuse"]),
        // The one reader of /proc and /sys files: read(2) to the end (their size says 0).
        .target(name: "KernelFiles"),
        // Pure values: paths, metadata, list results, errors, validation, the store protocol and
        // the Firebase-shaped Storage / StorageReference facade over it.
        .target(name: "StorageModel", dependencies: ["CChecksum", .product(name: "Logging", package: "swift-log")]),
        // CRC-32C in C (SSE4.2 when present): every download and staged copy is checked with it.
        .target(name: "CChecksum", cSettings: [.unsafeFlags(["-O2"])]),
        // The embedded (local directory) bucket.
        .target(
            name: "ObjectStores",
            dependencies: [
                "StorageModel",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // The HTTP layer both cloud stores run on: the clients, the transport and its retries,
        // streamed bodies and reads, TLS trust, download checks, the object resource as JSON.
        // The only target that speaks to AsyncHTTPClient (docs/ARCHITECTURE.md, "One transport").
        .target(
            name: "CloudHTTP",
            dependencies: [
                "StorageModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // The Cloud Storage JSON API backend and Google's credential chain, on CloudHTTP.
        .target(
            name: "GCSStore",
            dependencies: [
                "StorageModel", "CloudHTTP", "KernelFiles",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // Cloud Storage for Firebase: the v0 API under Security Rules, Firebase Auth sign-in and
        // tokens, the login file. On CloudHTTP, as GCSStore is.
        .target(
            name: "FirebaseStore",
            dependencies: [
                "StorageModel", "CloudHTTP",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The Apple SDK's modules (docs/LIBRARY.md, "The Apple SDK's API"): FirebaseApp and its
        // options; Auth's sign-in and current user; Storage, references, metadata, tasks, errors.
        // Swift 5 mode, as the SDK's sources: its handlers are plain closures run on a queue.
        .target(name: "FirebaseCore", swiftSettings: [.swiftLanguageMode(.v5)]),
        .target(name: "FirebaseAuth", dependencies: ["FirebaseCore", "FirebaseStore", "StorageModel"],
                swiftSettings: [.swiftLanguageMode(.v5)]),
        .target(name: "FirebaseStorage", dependencies: ["FirebaseCore", "FirebaseStore", "StorageModel",
                                                      .product(name: "Logging", package: "swift-log")],
                swiftSettings: [.swiftLanguageMode(.v5)]),
        // The filesystem core: inode table, caches, xattrs, handles. No kernel, no network.
        .target(
            name: "BucketFS",
            dependencies: ["StorageModel", "FuseKit", .product(name: "Logging", package: "swift-log"),
                           .product(name: "Crypto", package: "swift-crypto")]
        ),
        .executableTarget(
            name: "bucketfs",
            dependencies: [
                "StorageModel", "ObjectStores", "CloudHTTP", "GCSStore", "FirebaseStore", "BucketFS", "FuseKit", "KernelFiles",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // gcsfuse's config file (docs/KUBERNETES.md).
                .product(name: "Yams", package: "Yams"),
            ],
            // The command line's sources: a folder named for what it is (the product stays `bucketfs`).
            path: "Sources/BucketFSCommand",
            plugins: ["VersionStamp"]
        ),
        // BuildInfo (the version from VERSION, the commit from git) for `bucketfs --version`.
        .plugin(name: "VersionStamp", capability: .buildTool()),
        .testTarget(
            name: "StorageModelTests",
            dependencies: ["StorageModel", "ObjectStores", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        // The test bundle's default width (docs/TESTING.md, "How many tests run at once").
        .target(name: "CTestDefaults", path: "Tests/CTestDefaults"),
        // What the test targets share: the in-memory store double (run through the store
        // conformance suite in ObjectStoresTests, used by the core tests in BucketFSTests) and the
        // store conformance suite (ObjectStoresTests, FirebaseStoreTests).
        .target(
            name: "TestSupport",
            dependencies: ["StorageModel", "CTestDefaults", .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport"
        ),
        // The project's Cloud Storage JSON API test server (one bucket, in memory, versioning
        // and fault injection): in-process in ObjectStoresTests, and as the `gcs-test-server`
        // process the real-mount tier starts (Tests/e2e/test_restore.py). Not shipped.
        .target(
            name: "GCSTestServerKit",
            dependencies: [
                "StorageModel", "TestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Tests/GCSTestServerKit"
        ),
        .executableTarget(name: "gcs-test-server", dependencies: ["GCSTestServerKit"], path: "Tests/gcs-test-server"),
        .testTarget(
            name: "ObjectStoresTests",
            dependencies: [
                "StorageModel", "ObjectStores", "CloudHTTP", "GCSStore", "TestSupport", "GCSTestServerKit",
                // The core over GCSStore and the HNS test server (GCSFolderCoreTests).
                "BucketFS", "FuseKit",
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // A bucket as an older version wrote it (EmbeddedVersionsTests).
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The v0 store, Auth client, token manager and login file against an in-process v0 + Auth
        // server; the conformance suite and the seeds' examples over firebase://.
        .testTarget(
            name: "FirebaseStoreTests",
            dependencies: [
                "FirebaseStore", "StorageModel", "CloudHTTP", "GCSStore", "TestSupport",
                // The answer writer its v0 test server shares with the JSON API's (TestAnswerWriter).
                "GCSTestServerKit",
                // The core over a v0 store, for what a running mount logs (FirebaseRefusalEpisodeTests).
                "BucketFS", "FuseKit",
                // The Apple SDK's API over the same server (FirebaseSDKTests).
                "FirebaseCore", "FirebaseAuth", "FirebaseStorage",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The credential chain and every credential type against in-process fakes of Google's
        // token endpoints; the token cache's refresh rule on an injected clock (docs/CREDENTIALS.md).
        .testTarget(
            name: "CredentialTests",
            dependencies: [
                "CloudHTTP", "GCSStore", "StorageModel", "TestSupport", "GCSTestServerKit",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "BucketFSTests", dependencies: ["BucketFS", "FuseKit", "StorageModel", "ObjectStores", "TestSupport",
                                                          "GCSStore", "GCSTestServerKit",
                                                          .product(name: "Crypto", package: "swift-crypto"),
                                                          .product(name: "PropertyBased", package: "swift-property-based")]),
        // The command line's pure parts: source checks, metrics address, log lines, progress, help.
        .testTarget(name: "CommandTests", dependencies: ["bucketfs", "StorageModel", "ObjectStores", "CloudHTTP", "GCSStore", "FirebaseStore", "FuseKit", "KernelFiles", "TestSupport"]),
        // An in-memory filesystem mounted in the foreground: FuseKitTests drive it from outside.
        .executableTarget(name: "fusekit-demo", dependencies: ["FuseKit"]),
        // The Firebase guides' Swift samples through the library's front door (docs/FIREBASE.md);
        // the real-mount tier runs it against the Firebase test server.
        .executableTarget(name: "firebase-samples", dependencies: ["FirebaseStore", "StorageModel"],
                          path: "Examples/FirebaseSamples"),
        // A program written for the Firebase Apple SDK, unchanged (docs/LIBRARY.md, "The Apple SDK's
        // API"); Examples/SDKSamples/Package.swift builds it alone; the real-mount tier runs it.
        .executableTarget(name: "sdk-samples", dependencies: ["FirebaseCore", "FirebaseAuth", "FirebaseStorage"],
                          path: "Examples/SDKSamples/Sources/sdk-samples", swiftSettings: [.swiftLanguageMode(.v5)]),
        // The Apple SDK's modules' own parts: errors and their NSError form, metadata updates, options.
        .testTarget(name: "FirebaseStorageTests", dependencies: ["FirebaseStorage", "FirebaseCore", "StorageModel"]),
        .testTarget(name: "FuseKitTests", dependencies: ["FuseKit", "KernelFiles"]),
    ]
)
