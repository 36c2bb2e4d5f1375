import Foundation
import Testing
import TestSupport

/// The test bundle's own settings hold: a bounded number of tests at once, and an environment in
/// which no credential, endpoint, trust root or configuration directory of the machine's shows.
@Suite struct TestBundleTests {
    @Test func atMostFourTestsPerCPURunAtOnceUnlessTold() {
        let width = TestBundle.parallelWidth
        #expect(width >= 1)
        let set = ProcessInfo.processInfo.environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"]
        #expect(set == String(width), "the width Swift Testing reads is the one reported")
    }

    @Test func theMachinesVariablesAreNotSeen() {
        let env = ProcessInfo.processInfo.environment
        for name in TestBundle.removedNames { #expect(env[name] == nil, "\(name) is set") }
        for (name, _) in env {
            #expect(!TestBundle.removedPrefixes.contains { name.hasPrefix($0) }, "\(name) is set")
        }
    }

    @Test func homeIsADirectoryOfTheRunsOwn() throws {
        let home = TestBundle.home
        #expect(home.hasPrefix("/tmp/bucketfs-tests-home-"))
        #expect(ProcessInfo.processInfo.environment["HOME"] == home)
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: home, isDirectory: &isDirectory) && isDirectory.boolValue)
    }
}
