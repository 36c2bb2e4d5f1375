import ArgumentParser
import FirebaseStore
import Foundation
import GCSStore
import Logging
import ObjectStores
import StorageModel

/// A source that cannot work, in one line: what is wrong and what to do about it.
struct SourceProblem: Error, CustomStringConvertible, Equatable {
    let description: String
    init(_ s: String) { description = s }
}

/// The checks made before a mount (and before each library command) starts (docs/SEMANTICS.md §3): the
/// endpoint is a URL, the key file is a key, and one list request (maxResults=1, its own short
/// deadline) shows the bucket exists and the credentials may list it. For the embedded bucket:
/// the directory is one, or can be made.
enum SourceCheck {
    /// Bound on the probe, retries included, whatever the endpoint does.
    static let probeTimeout: Duration = .seconds(5)

    /// The endpoint from `--endpoint` or STORAGE_EMULATOR_HOST, checked; nil for the public one.
    static func endpoint(option: String?, environment: [String: String]) throws(SourceProblem) -> URL? {
        let origin: String
        let raw: String
        if let option {
            (origin, raw) = ("--endpoint \(option)", option)
        } else if let env = environment["STORAGE_EMULATOR_HOST"], !env.isEmpty {
            (origin, raw) = ("STORAGE_EMULATOR_HOST=\(env)", env)
        } else {
            return nil
        }
        let fix = "give scheme://host[:port], e.g. http://127.0.0.1:9023"
        let full = raw.contains("://") ? raw : "http://" + raw
        guard let c = URLComponents(string: full), let url = c.url else {
            throw SourceProblem("\(origin) is not a URL: \(fix)")
        }
        guard let scheme = c.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw SourceProblem("\(origin): the scheme must be http or https: \(fix)")
        }
        guard let host = c.host, !host.isEmpty else { throw SourceProblem("\(origin) has no host: \(fix)") }
        if let port = c.port, !(1...65535).contains(port) {
            throw SourceProblem("\(origin): port \(port) is out of range: \(fix)")
        }
        if !(c.path.isEmpty || c.path == "/") || c.query != nil {
            throw SourceProblem("\(origin) has a path or query; the endpoint is only scheme://host[:port]: \(fix)")
        }
        return url
    }

    /// Checks a source and returns its store, ready to use.
    static func open(_ source: Source, gcs: GCSOptions, firebase: FirebaseOptions, logger: Logger,
                     prefixMount: Bool, mounting: Bool, allowSharedFiles: Bool = false) async throws -> any ObjectStore {
        switch source {
        case .embedded(let dir, _):
            let store = try openEmbedded(dir)
            if !allowSharedFiles { SharedFiles.warnAboutBucket(dir) }
            return store
        case .firebase(let bucket, let path, let origin):
            let access = try FirebaseAccess.resolve(bucket: bucket, origin: origin, gcs: gcs, firebase: firebase,
                                                    environment: ProcessInfo.processInfo.environment, logger: logger)
            // Auth first, then storage, within one bound: whichever does not answer is named.
            let end = ContinuousClock.now + probeTimeout
            try await signIn(access)
            var tuning = GCSStore.Tuning()
            tuning.trust = try gcs.trustRoots()
            tuning.httpVersion = gcs.httpVersion
            let store = openFirebaseStore(access, prefix: prefixMount ? path : "", logger: logger, tuning: tuning)
            do {
                try await store.probe(timeout: max(end - ContinuousClock.now, .milliseconds(500)))
            } catch {
                // A library command may still read or write what the rules allow without a list.
                if !mounting, case StorageError.unauthorized = error { return store }
                try? await store.shutdown()
                var cause = error
                let endpoint = access.endpoints.storage.absoluteString
                if case StorageError.timeout = error, let refusal = connectProblem(endpoint) {
                    cause = StorageError.unknown(status: 0, message: refusal)
                }
                throw explainFirebase(cause, access: access, listed: prefixMount ? path : "")
            }
            return store
        case .gcs(let bucket, _):
            let env = ProcessInfo.processInfo.environment
            let endpoint = try endpoint(option: gcs.endpoint, environment: env)
            let check = try CredentialCheck.resolve(gcs, environment: env)
            if !mounting {
                // A mount says these in its own log (Mount.run); its check is quiet.
                check.logNotices(logger, mounting: false)
                logger.info("gs://\(bucket): \(check.description)")
            }
            let creds = check.found.source
            let store = try openStore(source, gcs: gcs, firebase: firebase, logger: logger, prefixMount: prefixMount)
            guard let g = store as? GCSStore else { return store }
            do {
                try await checkCredential(g)
                try await g.probe(timeout: probeTimeout)
                try await g.learnLayout(timeout: probeTimeout)
            } catch {
                var why: String? = nil
                if case StorageError.unauthenticated = error { why = await check.refusalContext(g, environment: env) }
                try? await g.shutdown()
                if !mounting, case StorageError.unauthorized = error { return try openStore(source, gcs: gcs, firebase: firebase, logger: logger, prefixMount: prefixMount) }
                var cause = error
                if case StorageError.timeout = error, let refusal = connectProblem(g.endpoint) {
                    // The HTTP client keeps retrying a refused connection until its deadline: say why.
                    cause = StorageError.unknown(status: 0, message: refusal)
                }
                throw explain(cause, bucket: bucket, endpoint: g.endpoint, identity: creds.identity, why: why)
            }
            return g
        }
    }

    /// Bound on getting the first access token (an executable source may take its 5 s timeout).
    static let credentialTimeout: Duration = .seconds(8)

    /// Gets an access token before the probe: a refused credential, or one that gives no token
    /// within `credentialTimeout`, fails by name (docs/CREDENTIALS.md); a transient failure is the
    /// probe's to retry.
    static func checkCredential(_ g: GCSStore) async throws {
        do {
            try await g.checkCredential(within: credentialTimeout)
        } catch let e as StorageError where e.isTransient && !e.description.contains("gave no access token") {
            return
        }
    }

    /// Gets an ID token within `limit` (a refresh of the login's; nothing for --id-token), so that
    /// an Auth server that is down or refuses the login is named as such, not as storage.
    static func signIn(_ access: FirebaseAccess, within limit: Duration = probeTimeout) async throws {
        guard access.login != nil else { return }
        let tokens = access.tokens
        do {
            _ = try await Bounded.run(limit, clock: .real, late: { .timeout(message: "no answer") }) {
                try await tokens.idToken(afterUnauthorized: false)
            }
        } catch {
            throw explainAuth(error, access: access)
        }
    }

    /// A sign-in or token refresh that failed, in one line: the Auth server named with what set
    /// it when it did not answer; the server's refusal and the line to sign in again when it refused.
    static func explainAuth(_ error: any Error, access: FirebaseAccess) -> SourceProblem {
        if let e = error as? StorageError, case .unauthenticated = e { return explainFirebase(e, access: access, listed: "") }
        if let e = error as? StorageError, case .unauthorized = e { return explainFirebase(e, access: access, listed: "") }
        return unreachableAuth(error, endpoints: access.endpoints, setBy: access.authSetBy) ?? SourceProblem("\(error)")
    }

    /// When Firebase Auth did not answer (or failed with a server error): one line naming it and
    /// what set its address; nil for anything else (a refusal, a bad argument).
    static func unreachableAuth(_ error: any Error, endpoints: FirebaseEndpoints, setBy: String) -> SourceProblem? {
        let auth = endpoints.authBase?.absoluteString ?? endpoints.secureToken.absoluteString
        let fix = "Is the Auth server (or emulator) running and the address right? It is set by \(setBy)"
        guard let e = error as? StorageError else { return nil }
        switch e {
        case .timeout(let m):
            if let refusal = connectProblem(auth) { return SourceProblem("cannot reach Firebase Auth at \(auth): \(refusal). \(fix)") }
            // `m` names the call that timed out when the Auth client saw it; the bound's own says only "no answer".
            let what = m.hasPrefix("Firebase Auth") ? " (\(m))" : ""
            return SourceProblem("Firebase Auth at \(auth) did not answer within \(probeTimeout)\(what). \(fix)")
        case .unknown(0, let m), .retryLimitExceeded(let m):
            // The Auth client's message names the host: "Firebase Auth (securetoken) at URL did not answer …".
            return SourceProblem(m.hasPrefix("Firebase Auth") ? "\(m). \(fix)" : "cannot reach Firebase Auth at \(auth): \(m). \(fix)")
        case .unknown, .quotaExceeded:
            return SourceProblem("Firebase Auth at \(auth) failed: \(e). \(fix)")
        default:
            return nil
        }
    }

    /// Why a TCP connection to the endpoint's host and port cannot be made (within 1 s), or nil
    /// when it can (then the server accepted and did not answer).
    static func connectProblem(_ endpoint: String) -> String? {
        guard let c = URLComponents(string: endpoint), let host = c.host else { return nil }
        let port = c.port ?? (c.scheme == "https" ? 443 : 80)
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), String(port), &hints, &list)
        guard rc == 0, let first = list else { return "cannot resolve \(host): \(String(cString: gai_strerror(rc)))" }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        if connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 { return nil }
        guard errno == EINPROGRESS else { return "connection to \(host):\(port) failed: \(String(cString: strerror(errno)))" }
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        guard poll(&p, 1, 1000) == 1 else { return nil }  // no verdict within 1 s: leave it to the timeout
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
        return err == 0 ? nil : "connection to \(host):\(port) failed: \(String(cString: strerror(err)))"
    }

    static func openEmbedded(_ dir: String) throws -> any ObjectStore {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), !isDir.boolValue {
            throw SourceProblem("\(dir) is a file, not a directory: an embedded bucket is a directory (created if missing)")
        }
        do {
            return try EmbeddedStore(directory: dir, bucket: "local")
        } catch {
            throw SourceProblem("cannot use \(dir) as an embedded bucket: \(reason(error)). Choose a directory you can write")
        }
    }

    /// The probe's failure as one line naming the cause and the fix.
    static func explain(_ error: any Error, bucket: String, endpoint: String, identity: String, why: String? = nil) -> SourceProblem {
        guard let e = error as? StorageError else { return SourceProblem("checking gs://\(bucket) at \(endpoint) failed: \(error)") }
        switch e {
        case .bucketNotFound:
            return SourceProblem("bucket '\(bucket)' does not exist at \(endpoint): check the name in gs://BUCKET "
                + "(Firebase: PROJECT.firebasestorage.app or PROJECT.appspot.com)")
        case .unauthorized(_, let m):
            return SourceProblem("\(identity) may not list gs://\(bucket) (HTTP 403: \(m)): grant it "
                + "roles/storage.objectViewer (read) or roles/storage.objectAdmin (read and write) on the bucket, "
                + "or use other credentials (--key-file, --token)")
        case .unauthenticated(let m):
            return SourceProblem("the credentials were refused (\(identity)): \(m)" + (why.map { "; \($0)" } ?? ""))
        case .invalidArgument(let m) where m.lowercased().contains("requester pays"):
            return SourceProblem("gs://\(bucket) is a requester-pays bucket (HTTP 400: \(m)): name the project to bill with --billing-project PROJECT")
        case .tls(let m):
            return SourceProblem(m)
        case .timeout(let m) where m.contains("gave no access token"):
            return noToken(m, identity)
        case .timeout:
            return SourceProblem("\(endpoint) did not answer within \(probeTimeout) (a list of gs://\(bucket)): "
                + "is it the Cloud Storage JSON API? Check --endpoint / STORAGE_EMULATOR_HOST and the network")
        case .retryLimitExceeded(var m), .unknown(0, var m):
            // "list gs://b: gave up after N attempts within 60 s: CAUSE" → CAUSE (the probe has its own deadline).
            if let r = m.range(of: #"gave up after \d+ attempts within [^:]*: "#, options: .regularExpression) { m = String(m[r.upperBound...]) }
            if let token = tokenEndpointFailure(m, bucket: bucket, endpoint: endpoint) { return token }
            if m.contains("gave no access token") { return noToken(m, identity) }
            return SourceProblem("cannot reach \(endpoint): \(m). Is the server running and the address right? "
                + "(--endpoint / STORAGE_EMULATOR_HOST)")
        case .invalidArgument(let m):
            return SourceProblem("\(endpoint) refused gs://\(bucket): \(m). Check the bucket name")
        case .unknown(let status, let m):
            return SourceProblem("\(endpoint) answered HTTP \(status) to a list of gs://\(bucket): \(m)")
        default:
            return SourceProblem("checking gs://\(bucket) at \(endpoint) failed: \(e)")
        }
    }

    /// A credential that gave no token in time, every attempt of the probe having waited for it.
    static func noToken(_ m: String, _ identity: String) -> SourceProblem {
        SourceProblem("\(m) (\(identity)): is its token endpoint reachable? See docs/CREDENTIALS.md")
    }

    /// A token endpoint that did not answer (docs/CREDENTIALS.md, "When a token endpoint fails"): the
    /// message names it and the setting that chose it (`TokenAnswers.unreachable`); storage was not asked.
    static func tokenEndpointFailure(_ m: String, bucket: String, endpoint: String) -> SourceProblem? {
        guard let r = m.range(of: TokenAnswers.unreachablePrefix) else { return nil }
        return SourceProblem("cannot get an access token: \(m[r.upperBound...]). Is it running and the address right? "
            + "(no request went to gs://\(bucket) at \(endpoint))")
    }

    /// The probe's failure for firebase://, in one line naming the cause and the fix (docs/SEMANTICS.md §5: what
    /// the rules or the server said, and what to change).
    static func explainFirebase(_ error: any Error, access: FirebaseAccess, listed prefix: String) -> SourceProblem {
        let bucket = access.bucket
        let endpoint = access.endpoints.storage.absoluteString
        let listedSource = "firebase://\(bucket)" + (prefix.isEmpty ? "" : "/\(prefix)")
        let settings = "(Firebase Storage's endpoint is set by \(access.storageSetBy.isEmpty ? "--endpoint / FIREBASE_STORAGE_EMULATOR_HOST" : access.storageSetBy))"
        guard let e = error as? StorageError else { return SourceProblem("checking \(listedSource) at \(endpoint) failed: \(error)") }
        switch e {
        case .bucketNotFound, .objectNotFound:
            return SourceProblem("bucket '\(bucket)' does not exist at \(endpoint): check the name in firebase://BUCKET "
                + "(PROJECT.firebasestorage.app or PROJECT.appspot.com)")
        case .unauthorized(_, let m):
            // The store's message may already say what listing needs; say it once.
            let needs = m.contains("rules_version") ? ""
                : " Listing needs an `allow list` rule matching " + (prefix.isEmpty ? "the bucket's root" : "'\(prefix)'")
                    + ", in rules that start with rules_version = '2'; (under rules_version = '1' every list is refused)."
            let own = access.login.map { "users/\($0.uid)" }
            let other = own.map { $0 == prefix ? "" : " Or mount a prefix the rules let you list, e.g. firebase://\(bucket)/\($0)" }
                ?? " Or mount a prefix the rules let you list"
            return SourceProblem("\(access.identity) may not list \(listedSource) (HTTP 403: \(m)): the project's Security Rules "
                + "refuse it.\(needs)\(other)")
        case .unauthenticated(let m):
            let again = m.contains("bucketfs login") ? ""
                : access.login == nil ? "; pass a fresh ID token, or sign in: \(FirebaseAccess.loginLine(bucket))"
                : "; sign in again: \(FirebaseAccess.loginLine(bucket))"
            return SourceProblem("the sign-in was refused (\(access.identity)): \(m)\(again)")
        case .tls(let m):
            return SourceProblem(m)
        case .timeout:
            return SourceProblem("Firebase Storage at \(endpoint) did not answer within \(probeTimeout) (a list of \(listedSource)): is it the "
                + "Firebase Storage API (v0) or its emulator? Check the address \(settings) and the network")
        case .retryLimitExceeded(var m), .unknown(0, var m):
            if let r = m.range(of: #"gave up after \d+ attempts within [^:]*: "#, options: .regularExpression) { m = String(m[r.upperBound...]) }
            return SourceProblem("cannot reach \(endpoint) (Firebase Storage): \(m). Is the server running and the address right? \(settings)")
        case .invalidArgument(let m):
            return SourceProblem("\(endpoint) refused \(listedSource): \(m)")
        case .unknown(let status, let m):
            return SourceProblem("\(endpoint) answered HTTP \(status) to a list of \(listedSource): \(m)")
        default:
            return SourceProblem("checking \(listedSource) at \(endpoint) failed: \(e)")
        }
    }

    static func reason(_ error: any Error) -> String {
        if case StorageError.unauthenticated(let m) = error { return m }
        if case StorageError.invalidArgument(let m) = error { return m }
        return "\(error)"
    }
}

extension Mount {
    /// Refuses a source that cannot work before anything is mounted: prints one line, exits 1.
    func checkSource() async throws {
        let quiet = Logger(label: "bucketfs", factory: { _ in SwiftLogNoOpLogHandler() })
        do {
            let parsed = try Source.parse(source, splitLocal: false)
            let store = try await SourceCheck.open(parsed, gcs: gcs, firebase: firebase, logger: quiet, prefixMount: true, mounting: true,
                                                   allowSharedFiles: allowSharedFiles)
            // A mount at a moment needs a bucket that keeps its past: said here, on the terminal.
            var refusal: (any Error)?
            if let at = behaviour.at {
                do { _ = try await PastMount.view(store, at: at, source: parsed.display, logger: quiet) } catch { refusal = error }
            }
            if let g = store as? GCSStore { try? await g.shutdown() }
            if let f = store as? FirebaseStore { try? await f.shutdown() }
            if let refusal { throw refusal }
        } catch let e as PastMount.Refusal {
            report.say("cannot mount \(source): \(e)")
            throw ExitCode(1)
        } catch {
            report.say("cannot mount \(source): \(error)")
            throw ExitCode(1)
        }
    }
}

extension BucketLayout {
    /// The line a mount logs, and whoami prints, about a bucket's layout.
    static func describe(_ layout: BucketLayout) -> String {
        switch layout {
        case .hierarchical: return "bucket layout: hierarchical namespace (folders; a directory rename is one request)"
        case .flat: return "bucket layout: flat"
        }
    }
}
