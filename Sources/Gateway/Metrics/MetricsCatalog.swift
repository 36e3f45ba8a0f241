/// Every metric family gatewayd exports: its type, labels, help text and when it is present. The
/// `# HELP` lines of `/metrics` come from here (swift-metrics has no help text), and docs/metrics.md
/// lists the same families (a test holds the three together: this, the document, a fresh `/metrics`).
/// A family added to the code is added here and to docs/metrics.md.
public enum MetricsCatalog {
    public struct Family: Sendable {
        public let name: String
        /// `counter`, `gauge` or `histogram`, as `# TYPE` says.
        public let type: String
        public let labels: [String]
        public let presence: Presence
        public let help: String
    }

    /// When a family is on `/metrics` (docs/metrics.md's "present" column).
    public enum Presence: String, Sendable, CaseIterable {
        /// From the start, whatever the configuration.
        case always
        /// With an upstream other than `demo` (a url): its latency, errors and pool.
        case upstream
        /// With an upstream server given by host name and re-resolved (`resolve_interval`).
        case upstreamName = "upstream name"
        /// With `store: {kind: memory, data_dir: …}`: the data directory's snapshots and journal.
        case dataDir = "data_dir"
        /// With `store: {kind: redis}`.
        case redis
        /// With a TLS listener, from its first handshake (or failed handshake).
        case tls
        /// With an https upstream, from its first failed handshake.
        case upstreamTLS = "https upstream"
        /// With a listener serving HTTP/2, from the first stream reset or GOAWAY.
        case http2
        /// With a `proxy_protocol` listener, from its first connection closed without a valid header.
        case proxyProtocol = "proxy_protocol"
        /// With `apple` (the risk metric's refresh).
        case apple
        /// With a route that has a DeviceCheck fallback (`assertion.fallback`).
        case fallback
        /// With an app's `android` and `android.status_url` (the attestation status list's refresh).
        case android
        /// With a route that sets `assertion.key_rate` (issue 27).
        case keyRate = "key_rate"
    }

    public static let families: [Family] = [
        // Build and process.
        .init(
            name: "attest_gateway_build_info", type: "gauge", labels: ["version", "commit"], presence: .always,
            help: "Always 1; the labels say which build runs (gatewayd --version)."),
        .init(
            name: "process_cpu_seconds_total", type: "counter", labels: [], presence: .always,
            help: "Total user and system CPU time spent in seconds."),
        .init(
            name: "process_resident_memory_bytes", type: "gauge", labels: [], presence: .always,
            help: "Resident memory size in bytes."),
        .init(
            name: "process_virtual_memory_bytes", type: "gauge", labels: [], presence: .always,
            help: "Virtual memory size in bytes."),
        .init(
            name: "process_open_fds", type: "gauge", labels: [], presence: .always,
            help: "Number of open file descriptors."),
        .init(
            name: "process_max_fds", type: "gauge", labels: [], presence: .always,
            help: "Maximum number of open file descriptors (RLIMIT_NOFILE)."),
        .init(
            name: "process_start_time_seconds", type: "gauge", labels: [], presence: .always,
            help: "Start time of the process since unix epoch in seconds."),

        // The proxy (GatewayMetrics).
        .init(
            name: GatewayMetrics.requestsTotal, type: "counter", labels: ["route", "status_class", "protocol"], presence: .always,
            help: "Requests answered, by route (attest_challenge, attest_register, - when no route matched), status class and protocol."),
        .init(
            name: GatewayMetrics.requestDuration, type: "histogram", labels: ["route"], presence: .always,
            help: "Request latency in seconds (the whole exchange), by route."),
        .init(
            name: GatewayMetrics.upstreamDuration, type: "histogram", labels: ["upstream"], presence: .upstream,
            help: "Upstream latency in seconds, by upstream."),
        .init(
            name: GatewayMetrics.upstreamErrorsTotal, type: "counter", labels: ["upstream", "reason"], presence: .upstream,
            help: "Requests an upstream failed, by upstream and error code (upstream_unavailable, upstream_timeout, ...)."),
        .init(
            name: GatewayMetrics.activeConnectionsName, type: "gauge", labels: [], presence: .always,
            help: "Downstream connections open now."),
        .init(
            name: GatewayMetrics.refusedConnectionsName, type: "counter", labels: [], presence: .always,
            help: "Connections closed at accept: over limits.max_connections, or accept failed (descriptors)."),
        .init(
            name: GatewayMetrics.poolConnections, type: "gauge", labels: ["upstream", "state"], presence: .upstream,
            help: "Upstream pool connections by state (busy, idle), summed over event loops."),
        .init(
            name: GatewayMetrics.upstreamServerUp, type: "gauge", labels: ["upstream", "server"], presence: .upstream,
            help: "1 while the upstream server is in the balance, 0 while ejected (passive health) or failing its health check."),
        .init(
            name: GatewayMetrics.upstreamServerEjections, type: "counter", labels: ["upstream", "server"], presence: .upstream,
            help: "Times the upstream server was ejected after max_fails failures in a row (or one on probation)."),
        .init(
            name: GatewayMetrics.upstreamServerRequests, type: "counter", labels: ["upstream", "server"], presence: .upstream,
            help: "Requests sent to the upstream server, retries included (published once a second)."),
        .init(
            name: GatewayMetrics.upstreamServerFailures, type: "counter", labels: ["upstream", "server", "reason"], presence: .upstream,
            help: "Failures of the upstream server by reason (connect_failed, connect_timeout, tls, closed, health_check)."),
        .init(
            name: GatewayMetrics.upstreamRetries, type: "counter", labels: ["upstream"], presence: .upstream,
            help: "Requests sent to another server of the upstream after one failed (published once a second)."),
        .init(
            name: GatewayMetrics.upstreamDNSResolutions, type: "counter", labels: ["upstream", "server", "result"], presence: .upstreamName,
            help: "Lookups of an upstream server's host name by result (success, failure; a failure keeps the last address)."),
        .init(
            name: GatewayMetrics.configReloads, type: "counter", labels: ["result"], presence: .always,
            help: "Configuration reloads (SIGHUP) by result (success, failure)."),
        .init(
            name: GatewayMetrics.configReloadPendingRestart, type: "gauge", labels: [], presence: .always,
            help:
                "1 while the configuration file sets workers or store.* otherwise than the running process (a reload applied the rest; a restart applies these), else 0."
        ),
        .init(
            name: GatewayMetrics.h2StreamsReset, type: "counter", labels: ["reason"], presence: .http2,
            help: "HTTP/2 streams reset, by who and why (client_<code>, or the gateway's error code)."),
        .init(
            name: GatewayMetrics.h2Goaways, type: "counter", labels: ["reason"], presence: .http2,
            help: "HTTP/2 GOAWAY frames sent or received, by reason."),
        .init(
            name: GatewayMetrics.tlsHandshakes, type: "counter", labels: ["listener", "version", "resumed"], presence: .tls,
            help: "Completed TLS handshakes by listener, protocol version and session resumption."),
        .init(
            name: GatewayMetrics.tlsHandshakeFailures, type: "counter", labels: ["listener", "reason"], presence: .tls,
            help: "Failed TLS handshakes by listener and reason."),
        .init(
            name: GatewayMetrics.upstreamTLSFailures, type: "counter", labels: ["upstream", "reason"], presence: .upstreamTLS,
            help: "Failed TLS handshakes with an https upstream, by upstream and reason."),
        .init(
            name: GatewayMetrics.proxyProtocolFailures, type: "counter", labels: ["listener", "reason"], presence: .proxyProtocol,
            help: "Connections to a proxy_protocol listener closed without a valid PROXY header, by listener and reason."),

        // App Attest (AttestMetrics).
        .init(
            name: AttestMetrics.verdicts, type: "counter", labels: ["route", "mode", "verdict", "reason"], presence: .always,
            help:
                "Protected requests by route, mode (enforce, shadow), verdict (accepted, refused, would_refuse, fail_open, flagged) and reason."
        ),
        .init(
            name: AttestMetrics.registrations, type: "counter", labels: ["result", "reason"], presence: .always,
            help: "Device key registrations by result (registered, refused) and reason."),
        .init(
            name: AttestMetrics.challengesIssued, type: "counter", labels: ["purpose"], presence: .always,
            help: "Challenges issued by purpose (register, assert, any, next)."),
        .init(
            name: AttestMetrics.challengesExpired, type: "counter", labels: [], presence: .always,
            help: "Challenges that expired unused."),
        .init(
            name: AttestMetrics.challengesEvicted, type: "counter", labels: ["budget"], presence: .always,
            help: "Live challenges replaced because their budget was full, by budget (anonymous, key_bound, per_key)."),
        .init(
            name: AttestMetrics.rateLimitedTotal, type: "counter", labels: ["limit", "endpoint"], presence: .always,
            help: "Requests answered 429 by limit (client, registration) and endpoint (challenge, register)."),
        .init(
            name: AttestMetrics.storeKeys, type: "gauge", labels: [], presence: .always,
            help: "Registered device keys in the store."),
        .init(
            name: AttestMetrics.storeChallenges, type: "gauge", labels: [], presence: .always,
            help: "Live (issued, unexpired) challenges in the store."),
        .init(
            name: AttestMetrics.keyCapacityGauge, type: "gauge", labels: [], presence: .always,
            help: "store.max_keys in effect: new keys are refused (key_capacity) once attest_gateway_store_keys reaches it."),
        .init(
            name: AttestMetrics.keysEvicted, type: "counter", labels: [], presence: .always,
            help: "Keys removed because they were idle longer than store.key_idle_ttl."),
        .init(
            name: AttestMetrics.receiptBytesGauge, type: "gauge", labels: ["state"], presence: .dataDir,
            help: "Bytes of the receipts file (state=file) and the part registered keys point to (state=live)."),
        .init(
            name: AttestMetrics.receiptCompactions, type: "counter", labels: ["result"], presence: .dataDir,
            help: "Receipt file compactions by result (success, failure)."),
        .init(
            name: AttestMetrics.snapshotDuration, type: "histogram", labels: [], presence: .dataDir,
            help: "Seconds to write a store snapshot."),
        .init(
            name: AttestMetrics.snapshotAge, type: "gauge", labels: [], presence: .dataDir,
            help: "Seconds since the oldest change not yet in a snapshot (0 when the snapshot covers everything)."),
        .init(
            name: AttestMetrics.snapshotFailures, type: "counter", labels: [], presence: .dataDir,
            help: "Store snapshots that failed."),
        .init(
            name: AttestMetrics.restoreDuration, type: "gauge", labels: [], presence: .dataDir,
            help: "Seconds the store took to restore its state at start."),
        .init(
            name: AttestMetrics.fsyncDuration, type: "histogram", labels: [], presence: .dataDir,
            help: "Seconds per journal fsync."),
        .init(
            name: AttestMetrics.storeWriteErrors, type: "counter", labels: ["file", "errno"], presence: .dataDir,
            help: "Failed system calls on the data directory, by file and errno."),
        .init(
            name: AttestMetrics.journalCorruptRecords, type: "counter", labels: [], presence: .dataDir,
            help: "Journal records the last restore could not use and skipped."),

        // Apple's fraud assessment (RiskMetrics).
        .init(
            name: RiskMetrics.refreshes, type: "counter", labels: ["result"], presence: .apple,
            help:
                "Risk metric refreshes with Apple's App Attest data service, by result (refreshed, not_modified, stale, rate_limited, server_error, unauthorized, bad_request, invalid_receipt, unavailable, error)."
        ),
        .init(
            name: RiskMetrics.riskMetric, type: "histogram", labels: [], presence: .apple,
            help: "Risk metrics in the receipts Apple returned (attested keys of the device for the app in 30 days)."),
        .init(
            name: RiskMetrics.lag, type: "gauge", labels: [], presence: .apple,
            help: "Seconds the oldest due risk refresh is late (0 when none is due)."),

        // Android's attestation status list (AndroidStatusMetrics; docs/android.md, "Revocation").
        .init(
            name: AndroidStatusMetrics.fetches, type: "counter", labels: ["result"], presence: .android,
            help:
                "Android attestation status list refreshes by result (fetched, not_modified, shared: read from the fleet's store, failed)."
        ),
        .init(
            name: AndroidStatusMetrics.age, type: "gauge", labels: [], presence: .android,
            help: "Seconds since the status list held was last confirmed by its origin (-1 while none is held)."),
        .init(
            name: AndroidStatusMetrics.entries, type: "gauge", labels: [], presence: .android,
            help: "Certificates listed (revoked or suspended) in the status list held."),

        // Devices without App Attest (AttestMetrics; docs/verification.md, "Devices without App Attest").
        .init(
            name: AttestMetrics.unsupportedClaims, type: "counter", labels: ["route"], presence: .always,
            help:
                "Requests on a protected route saying App Attest is unsupported on their device (X-App-Attest-Unsupported: 1), with or without a fallback."
        ),
        .init(
            name: AttestMetrics.fallbackRequests, type: "counter", labels: ["route", "result"], presence: .fallback,
            help:
                "DeviceCheck fallback requests by route and result (accepted, device_token_invalid, device_token_replayed, fallback_share_exceeded, devicecheck_unavailable), whatever the mode."
        ),
        .init(
            name: AttestMetrics.fallbackShareGauge, type: "gauge", labels: ["route"], presence: .fallback,
            help: "The route's share of fallback requests over its fallback window (0 to 1): what fallback.max_share is held against."),
        .init(
            name: AttestMetrics.deviceCheckRequests, type: "counter", labels: ["endpoint", "result"], presence: .fallback,
            help:
                "Calls to Apple's DeviceCheck by endpoint (validate_device_token, query_two_bits, update_two_bits) and result (ok, bits_not_found, invalid_token, bad_timestamp, unauthorized, bad_request, rate_limited, server_error, unavailable, error)."
        ),

        // Budgets per attested key (AttestMetrics; issue 27).
        .init(
            name: AttestMetrics.keyRateLimitedTotal, type: "counter", labels: ["route"], presence: .keyRate,
            help:
                "Verified requests over their key's assertion.key_rate, by route, whatever the mode (refused 429 key_rate_limited where enforced, forwarded where shadowed); nothing of theirs was consumed."
        ),
        // Keys per account (AttestMetrics; docs/verification.md, "Keys per account").
        .init(
            name: AttestMetrics.accountKeys, type: "histogram", labels: [], presence: .always,
            help: "Distinct keys of the account an upstream named (X-App-Attest-Account), observed when each association is recorded."),
        .init(
            name: AttestMetrics.accountAssociations, type: "counter", labels: ["result"], presence: .always,
            help:
                "Key-to-account associations from upstreams' X-App-Attest-Account, by result (recorded, moved, key_gone, capacity, store_error)."
        ),
        .init(
            name: AttestMetrics.accountHeaderInvalid, type: "counter", labels: [], presence: .always,
            help: "Upstream X-App-Attest-Account values ignored: empty, longer than 128 bytes, or not visible ASCII."),

        // The Redis store (RedisMetrics).
        .init(
            name: RedisMetrics.operationDuration, type: "histogram", labels: ["operation"], presence: .redis,
            help: "Seconds per Redis store operation, by operation."),
        .init(
            name: RedisMetrics.operationErrors, type: "counter", labels: ["operation", "error"], presence: .redis,
            help: "Failed Redis store operations by operation and error."),
        .init(
            name: RedisMetrics.connections, type: "gauge", labels: [], presence: .redis,
            help: "Live connections to Redis."),
        .init(
            name: RedisMetrics.connectionEvents, type: "counter", labels: ["event"], presence: .redis,
            help: "Redis connections made and lost, by event (connected, lost)."),
        .init(
            name: RedisMetrics.clusterRedirects, type: "counter", labels: ["kind"], presence: .redis,
            help: "Redis Cluster redirections and retries by kind (moved, ask, try_again)."),
    ]

    static let byName: [String: Family] = Dictionary(uniqueKeysWithValues: families.map { ($0.name, $0) })

    public static func family(_ name: String) -> Family? { byName[name] }
}
