import GatewayHTTP

/// The request fields only the gateway may send an upstream: a client's copy never reaches one, in
/// any spelling a backend would read as the same field (ASCII case, `_` or `.` for `-`:
/// `FieldNames`), on every route, whatever the listener's `underscores_in_headers`. This is the one
/// list; the one writer of upstream heads (`UpstreamRequestHead`, for HTTP/1.1, HTTP/2 and the
/// in-process demo upstream) reads it through `HeaderEdit`. docs/configuration.md ("What reaches
/// the backend") shows it; add a name here, and only here, when the gateway starts setting one.
///
/// Besides these: the configured `attest.verified_key_header` (set on verified requests; a
/// route removal on every route, `GatewayRuntime`), the assertion headers on protected routes,
/// and the forwarding fields that are rewritten rather than dropped (`X-Forwarded-For` is extended,
/// `X-Forwarded-Proto`, `X-Forwarded-Host` and `Via` are the gateway's, `Forwarded` goes:
/// `UpstreamRequestHead`).
public enum GatewayOwnedFields {
    /// Whole names.
    public static let names: [String] = [
        // Set by the gateway, now or in the client contract's future versions.
        "X-Request-Id",  // the exchange's id: the gateway writes it (a client's valid id is kept: `RequestID`)
        "X-Device-Check", "X-Device-Check-Bits",  // DeviceCheck results
        "X-App-Assertion",  // the client contract's assertion: read by the gateway, not forwarded
        // Method and URL overrides: a backend that honours one would run another handler than the
        // one the route matched (Rack, Express method-override, Symfony, Laravel, ASP.NET, OData,
        // IIS URL Rewrite, Zend/Laminas, nginx auth_request and Envoy conventions).
        "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-Method",
        "X-Original-URL", "X-Original-URI", "X-Rewrite-URL", "X-Override-URL", "X-HTTP-DestinationURL",
        "X-Envoy-Original-Path",
        // Scheme and host claims that frameworks read instead of X-Forwarded-Proto and -Host (Rack,
        // Tornado, IIS/ARR, ASP.NET).
        "X-Url-Scheme", "X-Scheme", "Front-End-Https", "X-ARR-SSL", "X-Host", "X-Original-Host",
        // Client-address claims that frameworks and "real IP" helpers read instead of the gateway's
        // X-Forwarded-For (PHP snippets, Express request-ip, Tornado, CDN conventions).
        "X-Real-IP", "X-Client-IP", "Client-IP", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP",
        "X-Cluster-Client-IP", "X-Forwarded", "Forwarded-For", "X-Original-Forwarded-For", "X-Originating-IP",
        "X-Remote-IP", "X-Remote-Addr", "X-ProxyUser-Ip", "X-AppEngine-User-IP", "CF-Pseudo-IPv4",
    ]

    /// Whole families: every `X-App-Attest-*` field (the verified key id, the next challenge, the
    /// risk metric, the signed verdict `X-App-Attest-Verdict`; the client contract's `X-App-Attest-Key-Id` and `X-App-Attest-Challenge`
    /// are read by the gateway, never forwarded), and every `X-Forwarded-*` field other than those the
    /// gateway rewrites (`X-Forwarded-Port`, `-Prefix`, `-Uri`, `-Path`, `-Method`, `-Server`,
    /// `-Scheme`, `-Ssl`, …).
    public static let prefixes: [String] = ["X-App-Attest-", "X-Forwarded-"]

    /// The list as the writers test it (with a route's removals, `HeaderEdit`; built once without).
    static func names(with routeRemovals: [String]) -> FieldNames {
        routeRemovals.isEmpty ? all : FieldNames(names + routeRemovals, prefixes: prefixes)
    }

    /// Whether a client field named `name` is the gateway's.
    public static func owns(_ name: String) -> Bool { all.contains(name) }

    static let all = FieldNames(names, prefixes: prefixes)
}
