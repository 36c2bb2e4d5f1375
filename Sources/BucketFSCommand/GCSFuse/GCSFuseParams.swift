/// gcsfuse's flags and config-file keys (its `cfg/params.yaml`), each with what bucketfs does with
/// it (docs/KUBERNETES.md, "gcsfuse's command line"): mapped to a bucketfs option
/// (`GCSFuseTranslation`), accepted with no effect (named once in the log, with why), or refused
/// by `GCSFuseTranslation` for the values bucketfs cannot honour. A name not here is an error.
struct GCSFuseParam: Sendable {
    enum Kind: Sendable { case bool, value, list }

    /// Why a parameter changes nothing here: one sentence per family, for the log and the docs.
    enum NoEffect: String, Sendable {
        case appName = "it names the mount in gcsfuse's user agent and metrics"
        case tokenReuse = "bucketfs keeps a fetched token until shortly before it expires"
        case renames = "bucketfs renames a directory of any size: one folder rename on a hierarchical bucket, object by object on a flat one"
        case layout = "bucketfs asks the bucket whether it has a hierarchical namespace and uses its folders when it does"
        case kernelListCache = "bucketfs decides itself when the kernel may keep a listing (while its own is fresh)"
        case profiler = "bucketfs has no Cloud Profiler agent"
        case fileCache = "bucketfs's read cache (on with cache-dir, bounded by file-cache:max-size-mb) has no such setting: it fills by the read-ahead's parallel ranged reads and checks every file"
        case metadataCache = "bucketfs bounds its metadata cache by --max-cached-entries and ages it by --metadata-ttl"
        case telemetry = "bucketfs exports Prometheus metrics only (--prometheus-port)"
        case writes = "bucketfs stages a written file, sends a large new one as it is written (--stream-uploads) and the rest at close"
        case reads = "bucketfs sizes its read-ahead by --read-ahead-mb and --read-streams"
        case retries = "bucketfs retries each operation within --op-timeout"
        case logging = "bucketfs writes its log where the log file says; rotate it with logrotate"
        case kernel = "a setting of gcsfuse's kernel interface; bucketfs's are its own"
        case debugging = "a switch of gcsfuse's own debugging"
        case connection = "bucketfs speaks the JSON API over HTTP/1.1 and HTTP/2 with its own connection settings"
        case dummyIO = "gcsfuse's simulated I/O, off"
        case gcsfuseInternal = "a switch of gcsfuse's internals"
    }

    enum Disposition: Sendable {
        case mapped
        case noEffect(NoEffect)
    }

    let flag: String
    /// Its place in the config file, dotted (`logging.severity`); empty when it has none.
    let configPath: String
    let kind: Kind
    let disposition: Disposition

    init(_ flag: String, _ configPath: String, _ kind: Kind, _ disposition: Disposition) {
        self.flag = flag
        self.configPath = configPath
        self.kind = kind
        self.disposition = disposition
    }

    static let byFlag: [String: GCSFuseParam] = Dictionary(all.map { ($0.flag, $0) }, uniquingKeysWith: { a, _ in a })
    static let byConfigPath: [String: GCSFuseParam] = Dictionary(all.filter { !$0.configPath.isEmpty }.map { ($0.configPath, $0) },
                                                                 uniquingKeysWith: { a, _ in a })

    /// Every parameter of gcsfuse 3's `cfg/params.yaml`, and `config-file`.
    static let all: [GCSFuseParam] = [
        .init("app-name", "app-name", .value, .noEffect(.appName)),
        .init("cache-dir", "cache-dir", .value, .mapped),
        .init("cloud-profiler-allocated-heap", "cloud-profiler.allocated-heap", .bool, .noEffect(.profiler)),
        .init("cloud-profiler-cpu", "cloud-profiler.cpu", .bool, .noEffect(.profiler)),
        .init("enable-cloud-profiler", "cloud-profiler.enabled", .bool, .noEffect(.profiler)),
        .init("cloud-profiler-goroutines", "cloud-profiler.goroutines", .bool, .noEffect(.profiler)),
        .init("cloud-profiler-heap", "cloud-profiler.heap", .bool, .noEffect(.profiler)),
        .init("cloud-profiler-label", "cloud-profiler.label", .value, .noEffect(.profiler)),
        .init("cloud-profiler-mutex", "cloud-profiler.mutex", .bool, .noEffect(.profiler)),
        .init("cloud-profiler-service-name", "cloud-profiler.service-name", .value, .noEffect(.profiler)),
        .init("debug_invariants", "debug.exit-on-invariant-violation", .bool, .noEffect(.debugging)),
        .init("debug_fuse", "debug.fuse", .bool, .mapped),
        .init("debug_gcs", "debug.gcs", .bool, .mapped),
        .init("debug_mutex", "debug.log-mutex", .bool, .noEffect(.debugging)),
        .init("disable-autoconfig", "disable-autoconfig", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-dummy-io", "dummy-io.enable", .bool, .mapped),
        .init("dummy-io-per-mb-latency", "dummy-io.per-mb-latency", .value, .noEffect(.dummyIO)),
        .init("dummy-io-reader-latency", "dummy-io.reader-latency", .value, .noEffect(.dummyIO)),
        .init("enable-atomic-rename-object", "enable-atomic-rename-object", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-google-lib-auth", "enable-google-lib-auth", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-hns", "enable-hns", .bool, .noEffect(.layout)),
        .init("enable-new-reader", "enable-new-reader", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-standard-symlinks", "enable-standard-symlinks", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-type-cache-deprecation", "enable-type-cache-deprecation", .bool, .noEffect(.gcsfuseInternal)),
        .init("enable-unsupported-path-support", "enable-unsupported-path-support", .bool, .noEffect(.gcsfuseInternal)),
        .init("file-cache-cache-file-for-range-read", "file-cache.cache-file-for-range-read", .bool, .noEffect(.fileCache)),
        .init("file-cache-download-chunk-size-mb", "file-cache.download-chunk-size-mb", .value, .noEffect(.fileCache)),
        .init("file-cache-enable-crc", "file-cache.enable-crc", .bool, .noEffect(.fileCache)),
        .init("enable-experimental-shared-chunk-cache", "file-cache.enable-experimental-shared-chunk-cache", .bool, .noEffect(.fileCache)),
        .init("file-cache-enable-o-direct", "file-cache.enable-o-direct", .bool, .noEffect(.fileCache)),
        .init("file-cache-enable-parallel-downloads", "file-cache.enable-parallel-downloads", .bool, .noEffect(.fileCache)),
        .init("file-cache-exclude-regex", "file-cache.exclude-regex", .value, .noEffect(.fileCache)),
        .init("file-cache-experimental-disable-size-calculation-fix", "file-cache.experimental-disable-size-calculation-fix", .bool, .noEffect(.fileCache)),
        .init("file-cache-experimental-enable-chunk-cache", "file-cache.experimental-enable-chunk-cache", .bool, .noEffect(.fileCache)),
        .init("file-cache-experimental-parallel-downloads-default-on", "file-cache.experimental-parallel-downloads-default-on", .bool, .noEffect(.fileCache)),
        .init("file-cache-include-regex", "file-cache.include-regex", .value, .noEffect(.fileCache)),
        .init("file-cache-max-parallel-downloads", "file-cache.max-parallel-downloads", .value, .noEffect(.fileCache)),
        .init("file-cache-max-size-mb", "file-cache.max-size-mb", .value, .mapped),
        .init("file-cache-parallel-downloads-per-file", "file-cache.parallel-downloads-per-file", .value, .noEffect(.fileCache)),
        .init("file-cache-shared-cache-chunk-size-mb", "file-cache.shared-cache-chunk-size-mb", .value, .noEffect(.fileCache)),
        .init("file-cache-write-buffer-size", "file-cache.write-buffer-size", .value, .noEffect(.fileCache)),
        .init("congestion-threshold", "file-system.congestion-threshold", .value, .noEffect(.kernel)),
        .init("dir-mode", "file-system.dir-mode", .value, .mapped),
        .init("disable-parallel-dirops", "file-system.disable-parallel-dirops", .bool, .noEffect(.kernel)),
        .init("enable-kernel-reader", "file-system.enable-kernel-reader", .bool, .noEffect(.kernel)),
        .init("experimental-enable-dentry-cache", "file-system.experimental-enable-dentry-cache", .bool, .noEffect(.kernel)),
        .init("experimental-enable-pirlo", "file-system.experimental-enable-pirlo", .bool, .noEffect(.kernel)),
        .init("experimental-enable-readdirplus", "file-system.experimental-enable-readdirplus", .bool, .noEffect(.kernel)),
        .init("experimental-o-direct", "file-system.experimental-o-direct", .bool, .noEffect(.kernel)),
        .init("file-mode", "file-system.file-mode", .value, .mapped),
        .init("fuse-max-request-size-kb", "file-system.fuse-max-request-size-kb", .value, .noEffect(.kernel)),
        .init("fuse-max-write-size-kb", "file-system.fuse-max-write-size-kb", .value, .noEffect(.kernel)),
        .init("o", "file-system.fuse-options", .list, .mapped),
        .init("gid", "file-system.gid", .value, .mapped),
        .init("ignore-interrupts", "file-system.ignore-interrupts", .bool, .noEffect(.kernel)),
        .init("inactive-mrd-cache-size", "file-system.inactive-mrd-cache-size", .value, .noEffect(.kernel)),
        .init("kernel-list-cache-ttl-secs", "file-system.kernel-list-cache-ttl-secs", .value, .noEffect(.kernelListCache)),
        .init("kernel-params-file", "file-system.kernel-params-file", .value, .mapped),
        .init("max-background", "file-system.max-background", .value, .noEffect(.kernel)),
        .init("max-read-ahead-kb", "file-system.max-read-ahead-kb", .value, .noEffect(.kernel)),
        .init("rename-dir-limit", "file-system.rename-dir-limit", .value, .noEffect(.renames)),
        .init("strong-consistency-on-open", "file-system.strong-consistency-on-open", .bool, .noEffect(.kernel)),
        .init("temp-dir", "file-system.temp-dir", .value, .mapped),
        .init("uid", "file-system.uid", .value, .mapped),
        .init("foreground", "foreground", .bool, .mapped),
        .init("anonymous-access", "gcs-auth.anonymous-access", .bool, .mapped),
        .init("key-file", "gcs-auth.key-file", .value, .mapped),
        .init("reuse-token-from-url", "gcs-auth.reuse-token-from-url", .bool, .noEffect(.tokenReuse)),
        .init("token-url", "gcs-auth.token-url", .value, .mapped),
        .init("billing-project", "gcs-connection.billing-project", .value, .mapped),
        .init("client-protocol", "gcs-connection.client-protocol", .value, .mapped),
        .init("custom-endpoint", "gcs-connection.custom-endpoint", .value, .mapped),
        .init("enable-http-dns-cache", "gcs-connection.enable-http-dns-cache", .bool, .noEffect(.connection)),
        .init("experimental-enable-json-read", "gcs-connection.experimental-enable-json-read", .bool, .noEffect(.connection)),
        .init("experimental-local-socket-address", "gcs-connection.experimental-local-socket-address", .value, .noEffect(.connection)),
        .init("experimental-grpc-conn-pool-size", "gcs-connection.grpc-conn-pool-size", .value, .noEffect(.connection)),
        .init("grpc-path-strategy", "gcs-connection.grpc-path-strategy", .value, .noEffect(.connection)),
        .init("http-client-timeout", "gcs-connection.http-client-timeout", .value, .mapped),
        .init("limit-bytes-per-sec", "gcs-connection.limit-bytes-per-sec", .value, .mapped),
        .init("limit-ops-per-sec", "gcs-connection.limit-ops-per-sec", .value, .mapped),
        .init("max-conns-per-host", "gcs-connection.max-conns-per-host", .value, .mapped),
        .init("max-idle-conns-per-host", "gcs-connection.max-idle-conns-per-host", .value, .noEffect(.connection)),
        .init("sequential-read-size-mb", "gcs-connection.sequential-read-size-mb", .value, .noEffect(.reads)),
        .init("chunk-retry-deadline-secs", "gcs-retries.chunk-retry-deadline-secs", .value, .noEffect(.retries)),
        .init("chunk-transfer-timeout-secs", "gcs-retries.chunk-transfer-timeout-secs", .value, .noEffect(.retries)),
        .init("enable-mount-retries", "gcs-retries.enable-mount-retries", .bool, .noEffect(.retries)),
        .init("max-retry-attempts", "gcs-retries.max-retry-attempts", .value, .noEffect(.retries)),
        .init("max-retry-sleep", "gcs-retries.max-retry-sleep", .value, .mapped),
        .init("retry-multiplier", "gcs-retries.multiplier", .value, .noEffect(.retries)),
        .init("enable-read-stall-retry", "gcs-retries.read-stall.enable", .bool, .noEffect(.retries)),
        .init("read-stall-initial-req-timeout", "gcs-retries.read-stall.initial-req-timeout", .value, .noEffect(.retries)),
        .init("read-stall-max-req-timeout", "gcs-retries.read-stall.max-req-timeout", .value, .noEffect(.retries)),
        .init("read-stall-min-req-timeout", "gcs-retries.read-stall.min-req-timeout", .value, .noEffect(.retries)),
        .init("read-stall-req-increase-rate", "gcs-retries.read-stall.req-increase-rate", .value, .noEffect(.retries)),
        .init("read-stall-req-target-percentile", "gcs-retries.read-stall.req-target-percentile", .value, .noEffect(.retries)),
        .init("implicit-dirs", "implicit-dirs", .bool, .mapped),
        .init("enable-empty-managed-folders", "list.enable-empty-managed-folders", .bool, .noEffect(.gcsfuseInternal)),
        .init("experimental-enable-otel-logging", "logging.experimental-enable-otel-logging", .bool, .noEffect(.telemetry)),
        .init("experimental-otel-logging-endpoint", "logging.experimental-otel-logging-endpoint", .value, .noEffect(.telemetry)),
        .init("experimental-otel-logging-project-id", "logging.experimental-otel-logging-project-id", .value, .noEffect(.telemetry)),
        .init("log-file", "logging.file-path", .value, .mapped),
        .init("log-format", "logging.format", .value, .mapped),
        .init("log-rotate-backup-file-count", "logging.log-rotate.backup-file-count", .value, .noEffect(.logging)),
        .init("log-rotate-compress", "logging.log-rotate.compress", .bool, .noEffect(.logging)),
        .init("log-rotate-max-file-size-mb", "logging.log-rotate.max-file-size-mb", .value, .noEffect(.logging)),
        .init("log-severity", "logging.severity", .value, .mapped),
        .init("wire-log", "logging.wire-log", .value, .noEffect(.logging)),
        .init("machine-type", "machine-type", .value, .noEffect(.gcsfuseInternal)),
        .init("stat-cache-capacity", "metadata-cache.deprecated-stat-cache-capacity", .value, .noEffect(.metadataCache)),
        .init("stat-cache-ttl", "metadata-cache.deprecated-stat-cache-ttl", .value, .mapped),
        .init("type-cache-ttl", "metadata-cache.deprecated-type-cache-ttl", .value, .mapped),
        .init("enable-metadata-prefetch", "metadata-cache.enable-metadata-prefetch", .bool, .noEffect(.metadataCache)),
        .init("enable-nonexistent-type-cache", "metadata-cache.enable-nonexistent-type-cache", .bool, .noEffect(.metadataCache)),
        .init("experimental-enable-optimized-metadata-cache", "metadata-cache.experimental-enable-optimized-metadata-cache", .bool, .noEffect(.metadataCache)),
        .init("experimental-metadata-prefetch-on-mount", "metadata-cache.experimental-metadata-prefetch-on-mount", .value, .noEffect(.metadataCache)),
        .init("metadata-prefetch-entries-limit", "metadata-cache.metadata-prefetch-entries-limit", .value, .noEffect(.metadataCache)),
        .init("metadata-prefetch-max-workers", "metadata-cache.metadata-prefetch-max-workers", .value, .noEffect(.metadataCache)),
        .init("metadata-cache-negative-ttl-secs", "metadata-cache.negative-ttl-secs", .value, .noEffect(.metadataCache)),
        .init("stat-cache-max-size-mb", "metadata-cache.stat-cache-max-size-mb", .value, .noEffect(.metadataCache)),
        .init("metadata-cache-ttl-secs", "metadata-cache.ttl-secs", .value, .mapped),
        .init("type-cache-max-size-mb", "metadata-cache.type-cache-max-size-mb", .value, .noEffect(.metadataCache)),
        .init("metrics-buffer-size", "metrics.buffer-size", .value, .noEffect(.telemetry)),
        .init("cloud-metrics-export-interval-secs", "metrics.cloud-metrics-export-interval-secs", .value, .noEffect(.telemetry)),
        .init("experimental-enable-grpc-metrics", "metrics.experimental-enable-grpc-metrics", .bool, .noEffect(.telemetry)),
        .init("experimental-enable-otel-metrics", "metrics.experimental-enable-otel-metrics", .bool, .noEffect(.telemetry)),
        .init("experimental-otel-metrics-endpoint", "metrics.experimental-otel-metrics-endpoint", .value, .noEffect(.telemetry)),
        .init("experimental-otel-metrics-project-id", "metrics.experimental-otel-metrics-project-id", .value, .noEffect(.telemetry)),
        .init("prometheus-port", "metrics.prometheus-port", .value, .mapped),
        .init("stackdriver-export-interval", "metrics.stackdriver-export-interval", .value, .noEffect(.telemetry)),
        .init("metrics-use-new-names", "metrics.use-new-names", .bool, .noEffect(.telemetry)),
        .init("metrics-workers", "metrics.workers", .value, .noEffect(.telemetry)),
        .init("mount-id", "mount-id", .value, .noEffect(.gcsfuseInternal)),
        .init("mrd-pool-size", "mrd.pool-size", .value, .noEffect(.reads)),
        .init("only-dir", "only-dir", .value, .mapped),
        .init("profile", "profile", .value, .noEffect(.gcsfuseInternal)),
        .init("read-block-size-mb", "read.block-size-mb", .value, .noEffect(.reads)),
        .init("enable-buffered-read", "read.enable-buffered-read", .bool, .noEffect(.reads)),
        .init("enable-grpc-read-checksums", "read.enable-grpc-read-checksums", .bool, .noEffect(.reads)),
        .init("read-global-max-blocks", "read.global-max-blocks", .value, .noEffect(.reads)),
        .init("read-inactive-stream-timeout", "read.inactive-stream-timeout", .value, .noEffect(.reads)),
        .init("read-max-blocks-per-handle", "read.max-blocks-per-handle", .value, .noEffect(.reads)),
        .init("read-min-blocks-per-handle", "read.min-blocks-per-handle", .value, .noEffect(.reads)),
        .init("read-random-seek-threshold", "read.random-seek-threshold", .value, .noEffect(.reads)),
        .init("read-start-blocks-per-handle", "read.start-blocks-per-handle", .value, .noEffect(.reads)),
        .init("trace-exporters", "trace.exporters", .list, .noEffect(.telemetry)),
        .init("trace-project-id", "trace.project-id", .value, .noEffect(.telemetry)),
        .init("trace-sampling-ratio", "trace.sampling-ratio", .value, .noEffect(.telemetry)),
        .init("workload-insight-forward-merge-threshold-mb", "workload-insight.forward-merge-threshold-mb", .value, .noEffect(.telemetry)),
        .init("workload-insight-output-file", "workload-insight.output-file", .value, .noEffect(.telemetry)),
        .init("visualize-workload-insight", "workload-insight.visualize", .bool, .noEffect(.telemetry)),
        .init("write-block-size-mb", "write.block-size-mb", .value, .mapped),
        .init("create-empty-file", "write.create-empty-file", .bool, .noEffect(.writes)),
        .init("enable-rapid-appends", "write.enable-rapid-appends", .bool, .noEffect(.writes)),
        .init("enable-rapid-writes", "write.enable-rapid-writes", .bool, .noEffect(.writes)),
        .init("enable-streaming-writes", "write.enable-streaming-writes", .bool, .mapped),
        .init("finalize-file-for-rapid", "write.finalize-file-for-rapid", .bool, .noEffect(.writes)),
        .init("write-global-max-blocks", "write.global-max-blocks", .value, .noEffect(.writes)),
        .init("write-max-blocks-per-file", "write.max-blocks-per-file", .value, .noEffect(.writes)),
        .init("debug_fs", "", .bool, .mapped),
        .init("debug_fuse_errors", "", .bool, .noEffect(.debugging)),
        .init("debug_http", "", .bool, .mapped),
        .init("max-retry-duration", "", .value, .noEffect(.retries)),
        .init("config-file", "", .value, .mapped),
    ]
}
