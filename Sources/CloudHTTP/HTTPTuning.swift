import StorageModel

/// The knobs of the HTTP layer both stores share, with production defaults; tests shrink them.
/// Each store's `Tuning` holds one (`http`) and reads its fields as its own (`tuning.idleTimeout`).
public struct HTTPTuning: Sendable {
    public var initialBackoff: Duration = .milliseconds(100)
    public var maxBackoff: Duration = .seconds(5)
    /// The clock the HTTP layer keeps its time on (retry pauses, each call's deadline, an
    /// attempt's bound, an upload's progress) and token lifetimes: real time, unless a test
    /// injects its own (docs/ARCHITECTURE.md, "One clock").
    public var clock: BucketClock = .real
    /// Uploads larger than this go resumable; smaller ones multipart.
    public var resumableThreshold: Int64 = 8 << 20
    /// A response (headers or body) that sends no bytes for this long is abandoned and retried.
    public var idleTimeout: Duration = .seconds(10)
    /// What one socket read takes in at most (NIO's default: 64 KiB). Each connection keeps one
    /// such buffer for its reads; only the pages a read fills become resident.
    public var receiveBuffer: Int = 512 << 10
    /// The certificates trusted for https endpoints (the system store by default).
    public var trust: TrustRoots = .system
    /// HTTP/2 or HTTP/1.1 over https (`--http-version`).
    public var httpVersion: HTTPVersionChoice = .auto
    public init() {}
}

/// A store's knobs that hold the HTTP layer's (`http`) and read and set its fields as their own
/// (`tuning.idleTimeout` for `tuning.http.idleTimeout`).
@dynamicMemberLookup
public protocol HTTPTuned {
    var http: HTTPTuning { get set }
}

extension HTTPTuned {
    public subscript<T>(dynamicMember field: WritableKeyPath<HTTPTuning, T>) -> T {
        get { http[keyPath: field] }
        set { http[keyPath: field] = newValue }
    }
}

extension RetryPolicy {
    /// The policy of a store's calls: `tuning`'s backoff and clock, the store's deadline and
    /// request timeout.
    package init(tuning: HTTPTuning, deadline: Duration, requestTimeout: Duration) {
        self.init(deadline: deadline, requestTimeout: requestTimeout, initialBackoff: tuning.initialBackoff,
                  maxBackoff: tuning.maxBackoff, clock: tuning.clock)
    }
}

extension CloudHTTPClients {
    /// The clients of a store at an endpoint (`https` or not) with `tuning`'s trust, HTTP version,
    /// idle timeout and socket reads, and at most `maxConnections` HTTP/1.1 connections per host.
    package convenience init(tuning: HTTPTuning, https: Bool, maxConnections: Int) {
        self.init(settings: ClientSettings(trust: tuning.trust, httpVersion: tuning.httpVersion), https: https,
                  idleTimeout: tuning.idleTimeout, maxConnections: maxConnections, receiveBuffer: tuning.receiveBuffer)
    }
}
