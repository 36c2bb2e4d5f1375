import Foundation
import FuseKit

// fusekit-demo MOUNTPOINT [--readdirplus always|auto|off] [-o opt,opt]
// Mounts DemoFileSystem in the foreground until unmounted or signalled (SIGINT/SIGTERM/SIGHUP).
// Prints "ready" once the kernel handshake is done and "exited <code>" at the end.

var arguments = Array(CommandLine.arguments.dropFirst())
var readdirplus = FuseSession.ReaddirPlus.always
var options = ["fsname=fusekit-demo", "subtype=fusekit-demo", "default_permissions"]
var mountpoint: String?
while !arguments.isEmpty {
    let a = arguments.removeFirst()
    switch a {
    case "--readdirplus":
        switch arguments.first {
        case "always": readdirplus = .always
        case "auto": readdirplus = .auto
        case "off": readdirplus = .off
        default: FileHandle.standardError.write(Data("--readdirplus always|auto|off\n".utf8)); exit(2)
        }
        arguments.removeFirst()
    case "-o":
        options += arguments.removeFirst().split(separator: ",").map(String.init)
    default:
        mountpoint = a
    }
}
guard let mountpoint else {
    FileHandle.standardError.write(Data("usage: fusekit-demo MOUNTPOINT [--readdirplus always|auto|off] [-o opts]\n".utf8))
    exit(2)
}

let session = FuseSession(filesystem: DemoFileSystem(), mountpoint: mountpoint, options: options,
                          readdirplus: readdirplus, logger: DemoLog.write)
session.onReady = DemoLog.ready
do {
    try session.mount()
    try session.installSignalHandlers()
} catch {
    DemoLog.write("mount failed: \(error)")
    exit(1)
}
let code = session.run()
print("exited \(code)")
exit(0)
