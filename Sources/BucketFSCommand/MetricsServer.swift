import ArgumentParser
import BucketFS
import CoreMetrics
import Foundation
import FuseKit
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ObjectStores
import Prometheus
import StorageModel

/// `--metrics-address [HOST:]PORT`; HOST defaults to 127.0.0.1 (never all interfaces unless asked).
struct MetricsAddress: Equatable {
    var host: String
    var port: Int

    init(parsing s: String) throws {
        var host = "127.0.0.1"
        var portText = s
        if let colon = s.lastIndex(of: ":") {
            let h = String(s[..<colon])
            portText = String(s[s.index(after: colon)...])
            if !h.isEmpty { host = h.hasPrefix("[") && h.hasSuffix("]") ? String(h.dropFirst().dropLast()) : h }
        }
        guard let port = Int(portText), (0...65535).contains(port) else {
            throw ValidationErrorText("--metrics-address takes [HOST:]PORT, e.g. 127.0.0.1:9101, got '\(s)'")
        }
        self.host = host
        self.port = port
    }
}

/// The process's metrics, in Prometheus text format.
let metricsRegistry = PrometheusCollectorRegistry()

/// What the core holds, read at each scrape: cache sizes, open, staged and dirty files, read-ahead
/// memory, lost+found entries, cache hits/misses, and the unsaved files of the mount's source in
/// every recorded cache directory (`UnsavedFilesGauge`). Counters whose labels are known in
/// advance are exported at 0 from the start, so that an `increase()` sees their first event.
final class CoreMetricsCollector: @unchecked Sendable {
    let core: BucketFileSystem
    let unsaved: UnsavedFilesGauge?
    /// `SignInWatch`'s file: `bucketfs_signed_out` is 1 while it exists.
    let signInFile: String?
    private let lock = NSLock()
    private var seenHits: [CacheKind: Int] = [:]
    private var seenMisses: [CacheKind: Int] = [:]
    private var seenFailedUploads = 0
    private var seenHedges = (sent: 0, won: 0)
    private var seenCacheErrors: [String: Int] = [:]
    private var seenListing = RangeListingCounts()
    private var seenReadCache = ReadCache.Counts()

    init(core: BucketFileSystem, unsaved: UnsavedFilesGauge? = nil, signInFile: String? = nil) {
        self.core = core
        self.unsaved = unsaved
        self.signInFile = signInFile
        collect()
    }

    func collect() {
        let s = core.statistics()
        let r = metricsRegistry
        r.makeGauge(name: "bucketfs_inodes", labels: []).set(Double(s.inodes))
        r.makeGauge(name: "bucketfs_cache_entries", labels: [("cache", "attributes")]).set(Double(s.cachedAttributes))
        r.makeGauge(name: "bucketfs_cache_entries", labels: [("cache", "listing")]).set(Double(s.cachedListings))
        r.makeGauge(name: "bucketfs_cache_listed_names", labels: []).set(Double(s.cachedListingEntries))
        r.makeGauge(name: "bucketfs_cache_held_entries", labels: []).set(Double(s.cachedEntries))
        r.makeGauge(name: "bucketfs_cache_max_entries", labels: []).set(Double(s.maxCachedEntries))
        r.makeGauge(name: "bucketfs_open_files", labels: []).set(Double(s.openFiles))
        r.makeGauge(name: "bucketfs_read_ahead_bytes", labels: []).set(Double(s.readAheadBytes))
        r.makeGauge(name: "bucketfs_staged_files", labels: []).set(Double(s.stagedFiles))
        r.makeGauge(name: "bucketfs_dirty_files", labels: []).set(Double(s.dirtyFiles))
        r.makeGauge(name: "bucketfs_upload_pending_bytes", labels: []).set(Double(s.pendingBytes))
        r.makeGauge(name: "bucketfs_uploads_queued", labels: []).set(Double(s.queuedUploads))
        r.makeGauge(name: "bucketfs_uploads_in_progress", labels: []).set(Double(s.uploadingFiles))
        r.makeGauge(name: "bucketfs_lost_found_entries", labels: []).set(Double(s.lostAndFoundEntries))
        if let signInFile {
            r.makeGauge(name: "bucketfs_signed_out", labels: []).set(Double(access(signInFile, F_OK) == 0 ? 1 : 0))
        }
        if let u = unsaved?.current() {
            for (place, counts) in [("here", u.here), ("elsewhere", u.elsewhere)] {
                r.makeGauge(name: "bucketfs_unsaved_files", labels: [("where", place), ("kind", "complete")])
                    .set(Double(counts.complete))
                r.makeGauge(name: "bucketfs_unsaved_files", labels: [("where", place), ("kind", "cut_off")])
                    .set(Double(counts.cutOffTotal))
            }
        }
        lock.withLock {
            r.makeCounter(name: "bucketfs_uploads_failed_total", labels: [])
                .increment(by: Int64(s.failedUploads - seenFailedUploads))
            seenFailedUploads = s.failedUploads
            // Counted apart from the media requests per object: a hedge is a second request for a
            // file the walk fetched ahead; "won" when its answer came first.
            r.makeCounter(name: "bucketfs_walk_hedges_total", labels: [("outcome", "sent")])
                .increment(by: Int64(s.walkHedges - seenHedges.sent))
            r.makeCounter(name: "bucketfs_walk_hedges_total", labels: [("outcome", "won")])
                .increment(by: Int64(s.walkHedgesWon - seenHedges.won))
            seenHedges = (s.walkHedges, s.walkHedgesWon)
            for name in Set(UploadCounters.knownNames).union(s.cacheErrors.keys) {
                let count = s.cacheErrors[name] ?? 0
                r.makeCounter(name: "bucketfs_cache_dir_errors_total", labels: [("errno", name)])
                    .increment(by: Int64(count - (seenCacheErrors[name] ?? 0)))
                seenCacheErrors[name] = count
            }
            let l = s.listing, was = seenListing
            r.makeCounter(name: "bucketfs_list_pages_total", labels: [("by", "token")])
                .increment(by: Int64(l.walkedPages - was.walkedPages))
            r.makeCounter(name: "bucketfs_list_pages_total", labels: [("by", "range")])
                .increment(by: Int64(l.rangedPages - was.rangedPages))
            r.makeCounter(name: "bucketfs_list_ranges_total", labels: []).increment(by: Int64(l.ranges - was.ranges))
            r.makeCounter(name: "bucketfs_list_range_cuts_total", labels: []).increment(by: Int64(l.cuts - was.cuts))
            seenListing = l
            // The read cache (docs/SEMANTICS.md §3.6): exported only while it is on.
            if let c = s.readCache {
                let was = seenReadCache
                r.makeCounter(name: "bucketfs_read_cache_hits_total", labels: []).increment(by: Int64(c.hits - was.hits))
                r.makeCounter(name: "bucketfs_read_cache_misses_total", labels: []).increment(by: Int64(c.misses - was.misses))
                r.makeCounter(name: "bucketfs_read_cache_read_bytes_total", labels: []).increment(by: c.readBytes - was.readBytes)
                r.makeCounter(name: "bucketfs_read_cache_evictions_total", labels: []).increment(by: Int64(c.evictions - was.evictions))
                r.makeCounter(name: "bucketfs_read_cache_dropped_total", labels: []).increment(by: Int64(c.dropped - was.dropped))
                r.makeCounter(name: "bucketfs_read_cache_kernel_opens_total", labels: []).increment(by: Int64(c.kernelOpens - was.kernelOpens))
                r.makeCounter(name: "bucketfs_read_cache_kernel_checks_total", labels: []).increment(by: Int64(c.kernelChecks - was.kernelChecks))
                r.makeGauge(name: "bucketfs_read_cache_bytes", labels: []).set(Double(c.bytes))
                r.makeGauge(name: "bucketfs_read_cache_files", labels: []).set(Double(c.entries))
                r.makeGauge(name: "bucketfs_read_cache_capacity_bytes", labels: []).set(Double(c.capacity))
                seenReadCache = c
            }
            r.makeGauge(name: "bucketfs_list_ranges_honoured", labels: []).set(Double(l.rangesWork ? 1 : 0))
            for kind in CacheKind.allCases {
                let h = s.hits[kind] ?? 0, m = s.misses[kind] ?? 0
                r.makeCounter(name: "bucketfs_cache_hits_total", labels: [("cache", kind.rawValue)])
                    .increment(by: Int64(h - (seenHits[kind] ?? 0)))
                r.makeCounter(name: "bucketfs_cache_misses_total", labels: [("cache", kind.rawValue)])
                    .increment(by: Int64(m - (seenMisses[kind] ?? 0)))
                seenHits[kind] = h
                seenMisses[kind] = m
            }
        }
    }
}

/// A small HTTP/1.1 server: `GET /metrics` answers the registry's text; `POST /recover` has the
/// mount upload the complete files of its own lost+found while it serves, and answers one line
/// per entry (docs/OPERATING.md, "The recovery runbook"); anything else 404.
final class MetricsServer: Sendable {
    let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    var port: Int { channel.localAddress?.port ?? 0 }

    static func start(_ address: MetricsAddress, collect: @escaping @Sendable () -> Void,
                      recover: @escaping @Sendable () async -> String = { "" }) async throws -> MetricsServer {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(MetricsHandler(collect: collect, recover: recover))
                }
            }
        return MetricsServer(channel: try await bootstrap.bind(host: address.host, port: address.port).get())
    }
}

private final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let collect: @Sendable () -> Void
    let recover: @Sendable () async -> String
    private var head: HTTPRequestHead?

    init(collect: @escaping @Sendable () -> Void, recover: @escaping @Sendable () async -> String) {
        self.collect = collect
        self.recover = recover
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break
        case .end:
            guard let h = head else { return }
            head = nil
            let path = h.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? h.uri
            if h.method == .POST && path == "/recover" {
                let promise = context.eventLoop.makePromise(of: String.self)
                let recover = recover
                promise.completeWithTask { await recover() }
                let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
                let version = h.version
                promise.futureResult.whenSuccess { text in
                    Self.respond(bound.value, version: version, status: .ok, type: "text/plain; charset=utf-8", body: Array(text.utf8))
                }
                return
            }
            var status = HTTPResponseStatus.ok
            var body: [UInt8]
            var type = "text/plain; version=0.0.4; charset=utf-8"
            if h.method == .GET && path == "/metrics" {
                collect()
                body = metricsRegistry.emitToBuffer()
            } else {
                status = .notFound
                type = "text/plain; charset=utf-8"
                body = Array("bucketfs: metrics are at /metrics (POST /recover uploads this mount's lost+found)\n".utf8)
            }
            Self.respond(context, version: h.version, status: status, type: type, body: body)
        }
    }

    static func respond(_ context: ChannelHandlerContext, version: HTTPVersion, status: HTTPResponseStatus, type: String, body: [UInt8]) {
        do {
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: type)
            headers.add(name: "Content-Length", value: String(body.count))
            headers.add(name: "Connection", value: "close")
            context.write(NIOAny(HTTPServerResponsePart.head(HTTPResponseHead(version: version, status: status, headers: headers))), promise: nil)
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
            context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        }
    }
}

extension Mount {
    /// Wraps the store with the decorators the options ask for: `--request-log` (one line per
    /// request) and `--metrics-address` (which also bootstraps swift-metrics with Prometheus, so
    /// it runs before any metric is made).
    func instrument(_ store: any ObjectStore) throws -> any ObjectStore {
        var s = store
        if let requestLog { s = try RequestLogStore(s, path: requestLog) }
        if monitoring.metricsAddress != nil {
            MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metricsRegistry))
            s = MetricsStore(s)
        }
        // Outermost: what the core's calls meet, whatever the log and the metrics counted.
        return SignInWatchStore(s, watch: SignInWatch(cacheDirectory: cacheDirectory))
    }

    /// With `--metrics-address`: serves /metrics and returns the filesystem wrapped to count FUSE
    /// operations. A port that cannot be bound fails the mount before anything is mounted.
    func startMetrics(_ core: BucketFileSystem, source: String, logger: Logger) async throws -> any FuseFileSystemBase {
        guard let text = monitoring.metricsAddress else { return core }
        let address = try MetricsAddress(parsing: text)
        let collector = CoreMetricsCollector(core: core, unsaved: UnsavedFilesGauge(source: source, ownDirectory: cacheDirectory),
                                             signInFile: cacheDirectory + "/" + SignInWatch.fileName)
        do {
            let server = try await MetricsServer.start(address, collect: { collector.collect() },
                                                       recover: { await Self.recoverThroughMount(core) })
            logger.notice("metrics at http://\(address.host):\(server.port)/metrics")
        } catch {
            logger.critical("cannot serve metrics at \(text): \(error)")
            throw ExitCode(1)
        }
        return MetricsFileSystem(core)
    }
}

extension Mount {
    /// `POST /recover`: the mount's own lost+found uploaded while it serves, one line per entry and
    /// a summary, as `bucketfs recover` prints them.
    static func recoverThroughMount(_ core: BucketFileSystem) async -> String {
        var lines: [String] = []
        var summary = RecoverySummary()
        for r in await core.recoverOwnLostAndFound() {
            switch r.outcome {
            case .uploaded(let g)?:
                lines.append("uploaded: '\(r.object)'\(g.map { " (generation \($0))" } ?? "")")
                summary.uploaded += 1
            case .alreadyThere?:
                lines.append("already in the bucket: '\(r.object)' (same md5); removed from lost+found")
                summary.already += 1
            case .newer(let g)?:
                lines.append("left: '\(r.object)': the bucket has a newer object (generation \(g)) than the one this file was written over; \(r.path) stays")
                summary.left += 1
            case .beside(let name, let g, let winner)?:
                lines.append(Recover.besideLine(r.object, name: name, generation: g, winner: winner, bytes: r.bytes, dryRun: false))
                summary.uploaded += 1
                summary.beside += 1
                summary.bytes += r.bytes
            case nil where r.error != nil:
                lines.append("left: '\(r.object)': \(r.error!); \(r.path) stays")
                summary.left += 1
            case nil:
                lines.append("cut off (left): \(r.path): '\(r.object)', not a complete copy")
                summary.cutOff += 1
            }
        }
        lines.append(summary.line(dryRun: false, to: "the mount's source"))
        return lines.joined(separator: "\n") + "\n"
    }
}
