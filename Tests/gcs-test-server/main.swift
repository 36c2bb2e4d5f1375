import Foundation
import GCSTestServerKit

// The project's Cloud Storage test server (Tests/GCSTestServerKit) as a process of its own, for
// the real-mount tier: one bucket, on 127.0.0.1, until SIGTERM or SIGINT. Prints one line,
// `gcs-test-server listening on 127.0.0.1:PORT bucket NAME versioning on|off hns on|off`, once it
// accepts connections. `--hns`: a bucket with a hierarchical namespace (folders). Not shipped
// (Scripts/package.sh builds the bucketfs product only).

let usage = "usage: gcs-test-server [--port N] [--bucket NAME] [--versioning] [--hns]"
var port = 0
var bucket = "test-bucket"
var versioning = false
var hns = false
var args = CommandLine.arguments.dropFirst()
while let a = args.popFirst() {
    switch a {
    case "--port":
        guard let v = args.popFirst(), let n = Int(v), (0...65535).contains(n) else {
            FileHandle.standardError.write(Data("gcs-test-server: --port needs a number 0-65535\n\(usage)\n".utf8))
            exit(2)
        }
        port = n
    case "--bucket":
        guard let v = args.popFirst(), !v.isEmpty else {
            FileHandle.standardError.write(Data("gcs-test-server: --bucket needs a name\n\(usage)\n".utf8))
            exit(2)
        }
        bucket = v
    case "--versioning":
        versioning = true
    case "--hns":
        hns = true
    case "-h", "--help":
        print(usage)
        exit(0)
    default:
        FileHandle.standardError.write(Data("gcs-test-server: unknown argument \(a)\n\(usage)\n".utf8))
        exit(2)
    }
}

let server: GCSTestServer
do {
    server = try await GCSTestServer.start(bucket: bucket, port: port, hierarchical: hns)
} catch {
    FileHandle.standardError.write(Data("gcs-test-server: cannot listen on 127.0.0.1:\(port): \(error)\n".utf8))
    exit(1)
}
let on = versioning
server.configure { $0.versioning = on }

// SIGTERM and SIGINT end the process once the listener is closed.
let done = DispatchSemaphore(value: 0)
var sources: [DispatchSourceSignal] = []
for sig in [SIGTERM, SIGINT] {
    signal(sig, SIG_IGN)
    let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
    s.setEventHandler { done.signal() }
    s.resume()
    sources.append(s)
}
// (FileHandle writes at once: a pipe's reader waits for this line)
FileHandle.standardOutput.write(Data("gcs-test-server listening on 127.0.0.1:\(server.port) bucket \(bucket) versioning \(versioning ? "on" : "off") hns \(hns ? "on" : "off")\n".utf8))
await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
    DispatchQueue.global().async {
        done.wait()
        c.resume()
    }
}
try? await server.stop()
exit(0)
