import Foundation
import Testing
import GCSStore

@Suite struct CredentialChainTests {
    func resolve(_ chain: CredentialChain, _ env: [String: String], onGCE: Bool = false) -> CredentialChain.Found {
        chain.resolve(environment: env, onGoogleCloud: onGCE)
    }

    @Test func googlesOrder() throws {
        let files = try CredentialFiles()
        let home = files.dir.path + "/home"
        let gcloudDir = home + "/.config/gcloud"
        try FileManager.default.createDirectory(atPath: gcloudDir, withIntermediateDirectories: true)
        let adc = gcloudDir + "/application_default_credentials.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: adc))
        let env = ["HOME": home, "GOOGLE_APPLICATION_CREDENTIALS": "/env.json", "GOOGLE_OAUTH_ACCESS_TOKEN": "envtok"]
        #expect(resolve(CredentialChain(anonymous: true, token: "t", keyFile: "/k"), env).source == .anonymous)
        #expect(resolve(CredentialChain(token: "t", keyFile: "/k"), env).source == .token("t"))
        #expect(resolve(CredentialChain(keyFile: "/k"), env).source == .token("envtok"))
        var e = env
        e["GOOGLE_OAUTH_ACCESS_TOKEN"] = nil
        #expect(resolve(CredentialChain(tokenURL: "unix:/s", keyFile: "/k"), e).source == .tokenURL("unix:/s"))
        #expect(resolve(CredentialChain(keyFile: "/k"), e).source == .file(path: "/k", from: "--key-file"))
        #expect(resolve(CredentialChain(), e).source == .file(path: "/env.json", from: "GOOGLE_APPLICATION_CREDENTIALS"))
        e["GOOGLE_APPLICATION_CREDENTIALS"] = nil
        #expect(resolve(CredentialChain(), e).source == .file(path: adc, from: "gcloud"))
        // CLOUDSDK_CONFIG replaces ~/.config/gcloud (google-auth reads one of the two).
        e["CLOUDSDK_CONFIG"] = files.dir.path
        #expect(resolve(CredentialChain(), e).source == .metadataServer)
        let other = files.dir.path + "/application_default_credentials.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: other))
        #expect(resolve(CredentialChain(), e).source == .file(path: other, from: "CLOUDSDK_CONFIG"))
        // Nothing at all: the metadata server (at Google's endpoint).
        #expect(resolve(CredentialChain(), [:]).source == .metadataServer)
    }

    @Test func emulatorAndEndpoint() {
        let emu = ["STORAGE_EMULATOR_HOST": "127.0.0.1:9023", "GOOGLE_APPLICATION_CREDENTIALS": "/env.json"]
        #expect(resolve(CredentialChain(), emu).source == .file(path: "/env.json", from: "GOOGLE_APPLICATION_CREDENTIALS"),
                "an explicit credential wins over the emulator")
        #expect(resolve(CredentialChain(), ["STORAGE_EMULATOR_HOST": "127.0.0.1:9023"]).source == .anonymous)
        // --endpoint alone keeps the chain; with nothing found and no metadata server here, anonymous with a notice.
        let found = resolve(CredentialChain(explicitEndpoint: true), [:])
        #expect(found.source == .anonymous && found.notice?.contains("no Google credentials found") == true)
        #expect(resolve(CredentialChain(explicitEndpoint: true), [:], onGCE: true).source == .metadataServer)
        #expect(resolve(CredentialChain(explicitEndpoint: true), ["GCE_METADATA_HOST": "127.0.0.1:1"]).source == .metadataServer)
        #expect(resolve(CredentialChain(keyFile: "/k", explicitEndpoint: true), [:]).notice == nil)
    }

    @Test func impersonationWrapsWhatWasFound() {
        let found = resolve(CredentialChain(keyFile: "/k", impersonate: "d@p.iam.gserviceaccount.com, t@p.iam.gserviceaccount.com"), [:])
        #expect(found.source == .impersonated(.file(path: "/k", from: "--key-file"), chain: ["d@p.iam.gserviceaccount.com", "t@p.iam.gserviceaccount.com"]))
        #expect(found.source.file?.path == "/k")
        #expect("\(found.source)".contains("impersonating d@p.iam.gserviceaccount.com → t@p.iam.gserviceaccount.com"))
        // With the emulator set, impersonation asks for the chain: it needs a credential to start from.
        #expect(resolve(CredentialChain(impersonate: "t@p"), ["STORAGE_EMULATOR_HOST": "h:1"]).source == .impersonated(.metadataServer, chain: ["t@p"]))
        #expect(!"\(CredentialSource.token("ya29.secret"))".contains("ya29.secret"))
    }
}
