import Foundation
import KernelFiles
import StorageModel

/// The metadata server of Google Cloud's VMs, Cloud Run and GKE (`GCE_METADATA_HOST`, else
/// metadata.google.internal): the default service account's token. Off Google Cloud it never answers,
/// so it is asked briefly and an unreachable server is final.
package struct MetadataServerSource: AccessTokenSource {
    package let host: String
    /// What chose `host`, for messages.
    let hostSetting: String
    let transport: any TokenTransport

    package init(environment: [String: String], transport: any TokenTransport) {
        host = environment["GCE_METADATA_HOST"].flatMap { $0.isEmpty ? nil : $0 } ?? "metadata.google.internal"
        hostSetting = Self.isConfigured(environment) ? "set by GCE_METADATA_HOST" : "the default; GCE_METADATA_HOST moves it"
        self.transport = transport
    }

    package static func isConfigured(_ environment: [String: String]) -> Bool {
        environment["GCE_METADATA_HOST"].map { !$0.isEmpty } ?? false
    }

    /// Whether this machine says it is a Google Compute Engine VM (as google-auth checks it), with no
    /// request: the DMI product name.
    package static func onGoogleCloud(productNameFile: String = "/sys/class/dmi/id/product_name") -> Bool {
        guard let text = KernelFile.text(productNameFile) else { return false }
        return text.trimmingCharacters(in: .whitespacesAndNewlines).hasPrefix("Google")
    }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        try await TokenAnswers.accessToken(try await get("instance/service-accounts/default/token", timeout: timeout), what: what)
    }

    /// The default service account's email (whoami).
    package func email(timeout: Duration) async throws -> String {
        String(decoding: try await get("instance/service-accounts/default/email", timeout: timeout).body, as: UTF8.self)
    }

    var what: String { "the GCE metadata server \(host) (\(hostSetting))" }

    func get(_ path: String, timeout: Duration) async throws -> TokenResponse {
        let request = TokenRequest(method: "GET", url: "http://\(host)/computeMetadata/v1/\(path)", headers: [("Metadata-Flavor", "Google")])
        do {
            return try await TokenAnswers.send(request, through: transport, timeout: min(timeout, .seconds(3)), what: what)
        } catch let e as StorageError {
            if case .unknown(0, _) = e {
                throw StorageError.unauthenticated(message: "cannot reach \(what); not on Google Cloud? "
                    + "Sign in with `gcloud auth application-default login`, or use --key-file, --token or --anonymous (with --endpoint for an emulator or another endpoint)")
            }
            throw e
        }
    }
}

/// `--token-url URL`: a local endpoint that answers a GET with `{"access_token": …, "expires_in": …}`
/// or, as Go's oauth2 token (what gcsfuse reads), `{"access_token": …, "expiry": RFC 3339}`: the
/// Cloud Storage FUSE CSI driver's token server (docs/KUBERNETES.md). `http://HOST:PORT/PATH`, or
/// over a unix socket, `unix:/path/to.sock` or `unix:///path/to.sock` (path `/`), or
/// `http+unix://%2Fpath%2Fto.sock/PATH`. A request over a unix socket names `localhost` as its
/// `Host` (an HTTP/1.1 server such as Go's net/http refuses one without it).
package struct TokenURLSource: AccessTokenSource {
    package let url: String
    let transport: any TokenTransport
    /// What an `expiry` is counted from.
    let clock: BucketClock

    package init(url: String, transport: any TokenTransport, clock: BucketClock = .real) {
        self.url = Self.clientURL(url)
        self.transport = transport
        self.clock = clock
    }

    /// `unix:/p/s.sock` and `unix:///p/s.sock` → `http+unix://%2Fp%2Fs.sock/`; anything else as given.
    package static func clientURL(_ url: String) -> String {
        guard url.hasPrefix("unix:") else { return url }
        var path = String(url.dropFirst("unix:".count))
        if path.hasPrefix("//") { path.removeFirst(2) }
        let encoded = path.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? path
        return "http+unix://\(encoded)/"
    }

    /// The request sent: a GET, with `Host: localhost` over a unix socket.
    package var request: TokenRequest {
        TokenRequest(method: "GET", url: url, headers: url.hasPrefix("http+unix://") ? [("Host", "localhost")] : [])
    }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        let what = "the token URL \(url) (--token-url)"
        let answer = try await TokenAnswers.send(request, through: transport, timeout: timeout, what: what)
        var token = try TokenAnswers.accessToken(answer, what: what)
        if token.lifetime == nil, let expiry = answer.json?["expiry"] as? String {
            token.lifetime = Self.lifetime(untilExpiry: expiry, now: clock.date)
        }
        return token
    }

    /// What is left until an RFC 3339 `expiry` (fractional seconds allowed; Go writes nanoseconds);
    /// nil when it does not parse. A past expiry is a lifetime of 0 (the token is fetched again).
    package static func lifetime(untilExpiry text: String, now: Date) -> Duration? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var date = formatter.date(from: text)
        if date == nil {
            formatter.formatOptions = [.withInternetDateTime]
            date = formatter.date(from: text)
        }
        if date == nil, let dot = text.firstIndex(of: ".") {
            // More than milliseconds (Go's RFC3339Nano): drop the fraction's digits past three.
            let digits = text[text.index(after: dot)...].prefix { $0.isNumber }
            let zone = text[text.index(after: dot)...].dropFirst(digits.count)
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            date = formatter.date(from: String(text[..<dot]) + "." + String(digits.prefix(3)) + zone)
        }
        guard let date else { return nil }
        let ms = max(0, Int64((date.timeIntervalSince(now) * 1000).rounded()))
        return .milliseconds(ms)
    }
}
