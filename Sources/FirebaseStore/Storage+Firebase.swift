import Foundation
import CloudHTTP
import Logging
import StorageModel

extension Storage {
    /// A ready `Storage` for a Cloud Storage for Firebase bucket, reached through the v0 API as the
    /// Firebase SDKs reach it, as the signed-in user, under the bucket's Security Rules:
    ///
    /// ```swift
    /// let storage = try Storage.storage(url: "gs://my-app.appspot.com")
    /// let metadata = try await storage.reference().child("images/forest.jpg").getMetadata()
    /// ```
    ///
    /// `url` names the bucket as the SDKs do (`gs://BUCKET`), or as bucketfs does
    /// (`firebase://BUCKET`), or is a v0 URL (`https://HOST/v0/b/BUCKET/o`, whose host is the
    /// endpoint). It names no object. Tokens and endpoints come from `FirebaseSession.resolve`:
    /// the login `bucketfs login` kept, the emulator variables, or `idToken`. Certificates are
    /// trusted as the command line trusts them: the system store, or `SSL_CERT_FILE` /
    /// `SSL_CERT_DIR`, and `caFile` (a PEM file of a private CA) added.
    public static func storage(url: String, idToken: String? = nil, storageEndpoint: String? = nil,
                               authEndpoint: String? = nil, caFile: String? = nil,
                               environment: [String: String] = ProcessInfo.processInfo.environment,
                               logger: Logger = Logger(label: "bucketfs.firebase")) throws(StorageError) -> Storage {
        let (bucket, origin) = try bucketOf(url)
        let trust = TrustRoots.resolve(caFile: caFile, environment: environment)
        let session = try FirebaseSession.resolve(bucket: bucket, idToken: idToken, storageEndpoint: storageEndpoint,
                                                  authEndpoint: authEndpoint, origin: origin,
                                                  environment: environment, trust: trust, logger: logger)
        var tuning = FirebaseStore.Tuning()
        tuning.trust = trust
        return Storage(store: FirebaseStore(session: session, logger: logger, tuning: tuning))
    }

    /// A ready `Storage` for a Cloud Storage for Firebase bucket as `user`, signed in by the program
    /// itself (`FirebaseAuth`): no login file is read, and the user's ID tokens refresh themselves.
    ///
    /// ```swift
    /// let user = try await FirebaseAuth(apiKey: "AIza…").signInAnonymously()
    /// let storage = try Storage.storage(url: "gs://my-app.firebasestorage.app", user: user)
    /// ```
    ///
    /// `url` names the bucket as in `storage(url:)`; the requests go to the storage endpoint the
    /// user's `FirebaseAuth` resolved, or to a v0 URL's host when `url` is one.
    public static func storage(url: String, user: FirebaseUser,
                               logger: Logger = Logger(label: "bucketfs.firebase")) throws(StorageError) -> Storage {
        let (bucket, origin) = try bucketOf(url)
        var endpoints = user.endpoints
        if let origin, let u = URL(string: origin) { endpoints.storage = u }
        let session = FirebaseSession(bucket: bucket, endpoints: endpoints, tokens: user.tokens, identity: user.identity,
                                      login: nil)
        var tuning = FirebaseStore.Tuning()
        tuning.trust = user.trust
        return Storage(store: FirebaseStore(session: session, logger: logger, tuning: tuning))
    }

    /// Closes the connections of a store that holds any (the Firebase and Cloud Storage stores);
    /// call it when done. Later calls do nothing.
    public func shutdown() async throws {
        if let f = store as? FirebaseStore { try await f.shutdown() }
    }

    /// (bucket, the origin of a v0 URL) of a bucket URL; a URL naming an object is refused.
    static func bucketOf(_ url: String) throws(StorageError) -> (String, String?) {
        if url.hasPrefix("firebase://") {
            return try bucketOf("gs://" + url.dropFirst("firebase://".count))
        }
        let (bucket, path) = try parse(url: url)
        guard path.isEmpty else {
            throw .invalidArgument(message: "'\(url)' names an object; give the bucket alone (gs://\(bucket)) and use reference(withPath: \"\(path)\")")
        }
        // A v0 URL's host is the endpoint, unless it is production's (then the emulator
        // variables still apply, as for the command line).
        var origin: String?
        if !url.hasPrefix("gs://"), let c = URLComponents(string: url), let scheme = c.scheme, let host = c.host,
           !(host.lowercased() == FirebaseEndpoints.production.storage.host && c.port == nil) {
            origin = "\(scheme.lowercased())://\(host)" + (c.port.map { ":\($0)" } ?? "")
        }
        return (bucket, origin)
    }
}

extension FirebaseStore {
    /// The store of a resolved session, with the library's defaults: the whole bucket, requests
    /// of at most 30 s, retries of transient errors for up to 60 s, 16 connections.
    public convenience init(session: FirebaseSession, prefix: String = "", logger: Logger,
                            requestTimeout: Duration = .seconds(30), deadline: Duration = .seconds(60),
                            maxConnections: Int = 16, tuning: Tuning = Tuning()) {
        self.init(bucket: session.bucket, prefix: prefix, endpoints: session.endpoints, tokens: session.tokens,
                  logger: logger, requestTimeout: requestTimeout, deadline: deadline,
                  maxConnections: maxConnections, tuning: tuning)
    }
}
