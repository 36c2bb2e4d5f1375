import ArgumentParser
import FirebaseStore
import Foundation
import Logging
import StorageModel

/// `bucketfs login firebase://BUCKET --api-key KEY (--email ADDRESS [--password-file FILE] |
/// --custom-token-file FILE | --anonymous)`: signs in through the Firebase Auth REST API and keeps
/// the API key, uid and refresh token (never the password, never an ID token) in a file only the
/// user can read, which every later command and mount on that bucket uses.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign in to a firebase:// bucket as a Firebase user, once; later commands and mounts use the login.",
        discussion: """
            Keeps the API key, the user id and the refresh token (never the password) in \
            $XDG_CONFIG_HOME/bucketfs/firebase-BUCKET.json (else ~/.config/bucketfs/), mode 0600. \
            Against the Local Emulator Suite, set FIREBASE_AUTH_EMULATOR_HOST and \
            FIREBASE_STORAGE_EMULATOR_HOST (as `firebase emulators:start` prints them) or pass \
            --auth-endpoint / --endpoint; the login remembers them.
            """)

    @Argument(help: "firebase://BUCKET (e.g. firebase://my-app.firebasestorage.app)") var source: String
    @Option(name: .customLong("api-key"), help: "The project's Web API key (Firebase console: Project settings → General).")
    var apiKey: String
    @Option(help: "Sign in with this email address and its password.") var email: String?
    @Option(name: .customLong("password-file"),
            help: "Read the password from this file's first line (else from the terminal without echo, or from standard input when it is not a terminal).")
    var passwordFile: String?
    @Option(name: .customLong("custom-token-file"), help: "Sign in with the custom token in this file (minted by your server with the Admin SDK).")
    var customTokenFile: String?
    @Flag(help: "Sign up as a new anonymous user.") var anonymous = false
    @Option(help: "The Firebase Storage endpoint later commands use, e.g. http://127.0.0.1:9199 (else FIREBASE_STORAGE_EMULATOR_HOST).")
    var endpoint: String?
    @Option(name: .customLong("auth-endpoint"), help: "The Firebase Auth emulator's base URL, e.g. http://127.0.0.1:9099 (else FIREBASE_AUTH_EMULATOR_HOST).")
    var authEndpoint: String?
    @Option(name: .customLong("ca-file"),
            help: ArgumentHelp("Also trust the CA certificates in this PEM file for an https Auth endpoint (default: the system store; SSL_CERT_FILE / SSL_CERT_DIR replace it when set).",
                               valueName: "PEM"))
    var caFile: String?
    @OptionGroup var log: LogOptions

    func validate() throws {
        let ways = [email != nil, customTokenFile != nil, anonymous].filter { $0 }.count
        guard ways == 1 else {
            throw ValidationError("give exactly one of --email ADDRESS, --custom-token-file FILE or --anonymous")
        }
        if passwordFile != nil && email == nil { throw ValidationError("--password-file goes with --email") }
        guard !apiKey.isEmpty else { throw ValidationError("--api-key is empty") }
    }

    func run() async throws {
        let logger = log.bootstrap()
        let env = ProcessInfo.processInfo.environment
        do {
            let bucket = try firebaseBucket(source)
            let endpoints = try FirebaseAccess.endpointsFor(login: nil, origin: nil, storageOption: endpoint,
                                                            authOption: authEndpoint, environment: env)
            let client = FirebaseAuthClient(endpoints: endpoints, apiKey: apiKey, logger: logger,
                                            trust: try checkedTrust(caFile: caFile, environment: env))
            let signIn: @Sendable () async throws -> FirebaseTokens
            if let email {
                let password = try PasswordInput.read(file: passwordFile, email: email)
                signIn = { try await client.signIn(email: email, password: password) }
            } else if let customTokenFile {
                guard let data = FileManager.default.contents(atPath: customTokenFile) else {
                    throw ValidationErrorText("cannot read the custom token file \(customTokenFile)")
                }
                let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                guard !token.isEmpty else { throw ValidationErrorText("the custom token file \(customTokenFile) is empty") }
                signIn = { try await client.signIn(customToken: token) }
            } else {
                signIn = { try await client.signUpAnonymously() }
            }
            // Within the bound of a mount's check, naming the Auth server if it does not answer.
            let tokens: FirebaseTokens
            do {
                tokens = try await Bounded.run(SourceCheck.probeTimeout, clock: .real, late: { .timeout(message: "no answer") }, signIn)
            } catch {
                let setBy = FirebaseAccess.settings(login: nil, origin: nil, storageOption: endpoint, authOption: authEndpoint,
                                                    environment: env).auth
                throw SourceCheck.unreachableAuth(error, endpoints: endpoints, setBy: setBy) ?? error
            }
            let kept = FirebaseAccess.remembered(endpoints, authOption: authEndpoint, storageOption: endpoint, environment: env)
            let login = FirebaseLogin(bucket: bucket, apiKey: apiKey, uid: tokens.uid, email: tokens.email,
                                      provider: tokens.provider, refreshToken: tokens.refreshToken,
                                      authEndpoint: kept.auth, storageEndpoint: kept.storage)
            try FirebaseLoginFile.save(login, environment: env)
            print("signed in to firebase://\(bucket)")
            print("uid: \(tokens.uid)")
            print("email: \(tokens.email ?? "-")")
            print("provider: \(tokens.provider)")
            // The folder the usual rules give each user (`users/{uid}`): the bucket's root is
            // refused by them, so suggesting it would send a newcomer to a refusal.
            print("login kept in \(FirebaseLoginFile.path(bucket: bucket, environment: env)) (mode 0600); "
                + "mount your folder with: bucketfs mount firebase://\(bucket)/users/\(tokens.uid) DIR "
                + "(the root too, if the rules let you list it)")
        } catch {
            throw failed(error, "login \(source)")
        }
    }
}

/// `bucketfs logout firebase://BUCKET`: deletes the login file. Running mounts keep the refresh
/// token they hold in memory (nothing is revoked on the server), and say so.
struct Logout: ParsableCommand {
    static let runningMounts = "running mounts of this bucket are not signed out: they keep the refresh token they hold "
        + "and go on working until the server refuses it (revoked, password changed) or they are unmounted"
    static let configuration = CommandConfiguration(
        abstract: "Forget the login of a firebase:// bucket (deletes its login file).",
        discussion: "Nothing is revoked on the server, and \(runningMounts).")
    @Argument(help: "firebase://BUCKET") var source: String

    func run() throws {
        let env = ProcessInfo.processInfo.environment
        do {
            let bucket = try firebaseBucket(source)
            let path = FirebaseLoginFile.path(bucket: bucket, environment: env)
            if try FirebaseLoginFile.remove(bucket: bucket, environment: env) {
                print("signed out of firebase://\(bucket) (removed \(path))")
                print("note: \(Self.runningMounts)")
            } else {
                print("not signed in to firebase://\(bucket) (no \(path))")
            }
        } catch {
            throw failed(error, "logout \(source)")
        }
    }
}

/// `bucketfs whoami firebase://BUCKET`: who the login (or --id-token) is, and when its ID token
/// expires (a fresh one is fetched, so this also checks the login still works).
struct Whoami: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print who a gs:// or firebase:// bucket is reached as: for gs://, the principal, the credential's source and type, impersonation, quota project and whether the bucket answered; for firebase://, the user and when the ID token expires.")
    @Argument(help: "gs://BUCKET or firebase://BUCKET") var source: String
    @OptionGroup(title: "Cloud Storage (the credential options are for gs:// only)") var gcs: GCSOptions
    @OptionGroup(title: "Firebase") var firebase: FirebaseOptions
    @OptionGroup var log: LogOptions

    func run() async throws {
        let logger = log.bootstrap()
        let env = ProcessInfo.processInfo.environment
        if source.hasPrefix("gs://") {
            do { try await GCSWhoami.run(source, gcs: gcs, firebase: firebase, logger: logger) } catch let e as ExitCode {
                throw e  // the report said why
            } catch {
                throw failed(error, "whoami \(source)")
            }
            return
        }
        do {
            let bucket = try firebaseBucket(source)
            let gcs = self.gcs
            let access = try FirebaseAccess.resolve(bucket: bucket, origin: nil, gcs: gcs, firebase: firebase,
                                                    environment: env, logger: logger)
            try await SourceCheck.signIn(access)
            let expires = await access.tokens.expiresAt
            print("firebase://\(bucket)")
            if let l = access.login {
                print("uid: \(l.uid)")
                print("email: \(l.email ?? "-")")
                print("provider: \(l.provider)")
            } else {
                let claims = IDTokenPayload(firebase.idToken ?? env[SecretArguments.environmentName] ?? "")
                print("uid: \(claims.uid ?? "?")")
                print("email: \(claims.email ?? "-")")
                print("provider: \(claims.provider ?? "?")")
            }
            if let expires {
                let left = Int(expires.timeIntervalSinceNow.rounded())
                let when = left >= 0 ? "in \(Self.duration(left))" : "\(Self.duration(-left)) ago"
                print("ID token expires: \(RFC3339.format(expires)) (\(when))")
            } else {
                print("ID token expires: unknown")
            }
            if let l = access.login {
                if let m = access.tokens as? FirebaseTokenManager {
                    // Firebase may hand out a new refresh token with a refresh: keep it.
                    let current = await m.currentRefreshToken
                    if current != l.refreshToken {
                        var updated = l
                        updated.refreshToken = current
                        try? FirebaseLoginFile.save(updated, environment: env)
                    }
                }
                print("login: \(FirebaseLoginFile.path(bucket: bucket, environment: env)) (refreshed as needed)")
            } else {
                print("login: the ID token from --id-token / FIREBASE_ID_TOKEN (never refreshed)")
            }
        } catch {
            throw failed(error, "whoami \(source)")
        }
    }

    static func duration(_ seconds: Int) -> String {
        if seconds < 120 { return "\(seconds) s" }
        if seconds < 7200 { return "\(seconds / 60) min" }
        return "\(seconds / 3600) h \(seconds % 3600 / 60) min"
    }
}

/// The bucket of `firebase://BUCKET` (or a v0 URL); anything else is refused.
func firebaseBucket(_ spec: String) throws -> String {
    guard case .firebase(let bucket, _, _) = try Source.parse(spec, splitLocal: false) else {
        throw ValidationErrorText("'\(spec)' is not a firebase:// source: use firebase://BUCKET (e.g. firebase://my-app.firebasestorage.app)")
    }
    return bucket
}

/// The claims `whoami` shows of an ID token given with --id-token (read, not verified: the
/// server verifies it).
struct IDTokenPayload {
    var uid: String?
    var email: String?
    var provider: String?

    init(_ token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return }
        var b64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64),
              let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        uid = (o["user_id"] as? String) ?? (o["sub"] as? String)
        email = o["email"] as? String
        provider = (o["firebase"] as? [String: Any])?["sign_in_provider"] as? String
    }
}
