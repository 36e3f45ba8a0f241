/// Every key gateway.yaml accepts, per section: the single list that decoding, unknown-key errors,
/// suggestions and the documentation test share.
enum ConfigKeys {
    static let top = [
        "workers", "listeners", "admin", "limits", "upstreams", "routes", "apps", "trust", "attest", "store", "logging",
        "trusted_proxies", "apple", "risk", "verdict", "accounts", "android",
    ]
    static let listener = [
        "name", "address", "protocols", "tls", "http2", "underscores_in_headers", "trusted_proxies", "proxy_protocol",
    ]
    static let listenerHTTP2 = [
        "max_concurrent_streams", "max_header_list_size", "initial_window_size", "connection_window_size",
        "max_frame_size", "max_continuations", "max_resets", "reset_window", "max_outbound_ack", "max_settings_entries",
    ]
    static let listenerTLS = ["certificate", "private_key", "certificates", "ticket_rotation"]
    static let listenerCertificate = ["certificate", "private_key", "server_names"]
    static let admin = ["address", "token_file", "protect_metrics", "allow"]
    static let limits = [
        "max_request_line", "max_header_bytes", "max_header_count", "max_body", "idle_timeout", "header_timeout",
        "body_timeout", "send_timeout", "discard_body", "drain_timeout", "max_connections", "max_receipt",
    ]
    static let upstream = [
        "name", "url", "max_connections", "connect_timeout", "response_timeout", "idle_timeout", "tls",
        "servers", "balance", "max_fails", "fail_timeout", "max_fail_timeout", "health_check", "resolve_interval", "retries",
    ]
    static let upstreamTLS = ["ca_file", "server_name", "client_certificate", "client_key", "verify"]
    static let upstreamServer = ["url", "weight"]
    static let upstreamHealthCheck = ["path", "interval", "timeout", "expect_status"]
    static let route = ["name", "match", "upstream", "max_body", "assertion", "timeouts", "pass_server_header"]
    static let routeTimeouts = ["response", "connect"]
    static let routeMatch = ["methods", "path_prefix", "path", "host", "fold"]
    static let assertion = [
        "mode", "bind", "challenge", "rollout", "on_store_error", "client_data", "max_risk_metric", "on_risk", "counter_window",
        "fallback", "key_rate", "verdict_header", "max_keys_per_account", "on_keys",
    ]
    static let keyRate = ["rate", "burst"]
    static let accounts = ["window"]
    static let app = [
        "team_id", "bundle_ids", "environments", "validation_categories", "min_bundle_version", "receipts",
        "require_macos_security", "android",
    ]
    static let android = ["status_url", "refresh", "ca_file", "connect_timeout", "response_timeout"]
    static let androidApp = [
        "package_names", "signing_cert_sha256", "min_security_level", "require_locked_bootloader", "require_verified_boot",
        "allow_self_signed_boot", "min_patch_level",
    ]
    static let trust = ["extra_roots", "extra_receipt_roots", "extra_android_roots"]
    static let attest = [
        "challenge_path", "register_path", "challenge_ttl", "verified_key_header", "challenge_rate", "registration_rate",
    ]
    static let attestChallengeRate = ["per_client", "burst", "clients"]
    /// Key bounds, on either kind of store.
    static let storeKeys = ["max_keys", "max_reregistrations", "reregistration_window"]
    static let memoryStore =
        [
            "kind", "shards", "data_dir", "snapshot_interval", "max_anonymous_challenges", "max_key_bound_challenges",
            "max_challenges_per_key", "key_idle_ttl",
        ] + storeKeys
    static let redisStore = ["kind", "url", "timeout", "wait_replicas", "cluster", "seeds", "password_file", "tls"] + storeKeys
    static let store =
        [
            "kind", "shards", "data_dir", "snapshot_interval", "max_anonymous_challenges", "max_key_bound_challenges",
            "max_challenges_per_key", "url", "timeout", "wait_replicas", "cluster", "seeds", "key_idle_ttl", "password_file", "tls",
        ] + storeKeys
    static let storeTLS = ["ca_file", "server_name", "client_certificate", "client_key"]
    static let logging = ["level", "access_log"]
    static let apple = [
        "team_id", "key_id", "private_key", "attest_data_url", "ca_file", "connect_timeout", "response_timeout",
        "devicecheck_url", "devicecheck_environment",
    ]
    static let fallback = ["devicecheck", "max_share", "window", "min_requests", "token_ttl"]
    static let fallbackDeviceCheck = ["bits"]
    static let risk = ["refresh", "concurrency", "rate", "stale_probe"]
    static let accessLog = ["path", "format", "buffer", "flush"]
    static let verdict = ["key", "ttl", "issuer", "publish"]

    /// Section name to keys, for the documentation test.
    static let all: [(section: String, keys: [String])] = [
        ("top level", top), ("listeners[]", listener), ("listeners[].tls", listenerTLS),
        ("listeners[].http2", listenerHTTP2),
        ("listeners[].tls.certificates[]", listenerCertificate), ("admin", admin), ("limits", limits),
        ("upstreams[]", upstream), ("upstreams[].tls", upstreamTLS), ("upstreams[].servers[]", upstreamServer),
        ("upstreams[].health_check", upstreamHealthCheck), ("routes[]", route),
        ("routes[].match", routeMatch), ("routes[].timeouts", routeTimeouts),
        ("routes[].assertion", assertion), ("routes[].assertion.fallback", fallback),
        ("routes[].assertion.fallback.devicecheck", fallbackDeviceCheck), ("apps[]", app), ("apps[].android", androidApp), ("trust", trust),
        ("attest", attest),
        ("attest.challenge_rate", attestChallengeRate), ("store", store), ("store.tls", storeTLS),
        ("logging", logging), ("logging.access_log", accessLog), ("apple", apple), ("risk", risk),
        ("routes[].assertion.key_rate", keyRate),
        ("verdict", verdict), ("android", android),
    ]
}
