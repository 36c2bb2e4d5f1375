// swift-tools-version:6.1
// A program written for the Firebase Apple SDK, built against bucketfs's FirebaseStorage,
// FirebaseCore and FirebaseAuth and nothing else of it: no FUSE, no SQLite (docs/LIBRARY.md,
// "The Apple SDK's API"). `swift build` here builds it alone; the root package builds the same
// sources as its `sdk-samples` target, which the real-mount tier runs.
import PackageDescription

let package = Package(
    name: "SDKSamples",
    platforms: [.macOS(.v13)],
    dependencies: [.package(name: "bucketfs", path: "../..")],
    targets: [
        .executableTarget(
            name: "sdk-samples",
            dependencies: [
                .product(name: "FirebaseCore", package: "bucketfs"),
                .product(name: "FirebaseAuth", package: "bucketfs"),
                .product(name: "FirebaseStorage", package: "bucketfs"),
            ],
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
    ]
)
