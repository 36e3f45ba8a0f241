import Foundation

/// The whole of `gateway.yaml`, strictly validated: unknown keys, wrong types, bad values and
/// inconsistent references are all errors, reported together with `file:line:column`.
///
/// A value of this type only comes from `load(path:)` or `parse(yaml:file:baseDirectory:)`, so it is
/// always valid; defaults are filled in, and relative file paths are already resolved against the
/// config file's directory. Durations are Swift `Duration`s, sizes are `Int` byte counts.
/// See docs/configuration.md for every key.
public struct GatewayConfig: Sendable, Equatable {
    /// Default `.auto` (one worker per core).
    public let workers: Workers
    /// At least one; unique names; addresses that do not collide.
    public let listeners: [ListenerConfig]
    public let admin: AdminConfig
    public let limits: LimitsConfig
    /// At least one; unique names.
    public let upstreams: [UpstreamConfig]
    /// At least one; unique names; in file order (first match wins); each names an upstream.
    public let routes: [RouteConfig]
    /// At least one when a route's assertion mode is enforce or shadow.
    public let apps: [AppConfig]
    public let trust: TrustConfig
    public let attest: AttestConfig
    public let store: StoreConfig
    public let logging: LoggingConfig
    /// The top-level `trusted_proxies` (each listener's own list, or this one, is in
    /// `ListenerConfig.trustedProxies`). Default: none.
    public let trustedProxies: [IPNetwork]
    /// The team's key for Apple's device services; nil (default): none (no risk metric).
    public let apple: AppleConfig?
    /// The risk metric's refresh (with `apple`).
    public let risk: RiskConfig
    /// Google's attestation status list, for Android registrations (`android`).
    public let android: AndroidConfig
    /// The signed verdict's key (`verdict`); nil (default): none, no route may set `verdict_header`.
    public let verdict: VerdictConfig?
    /// Keys per account: the window over which an account's keys are counted.
    public let accounts: AccountsConfig
    /// Where each value was written: for problems found after decoding (`gatewayd check`, start).
    public let sourceMap: SourceMap

    init(
        workers: Workers,
        listeners: [ListenerConfig],
        admin: AdminConfig,
        limits: LimitsConfig,
        upstreams: [UpstreamConfig],
        routes: [RouteConfig],
        apps: [AppConfig],
        trust: TrustConfig,
        attest: AttestConfig,
        store: StoreConfig,
        logging: LoggingConfig,
        sourceMap: SourceMap,
        trustedProxies: [IPNetwork] = [],
        apple: AppleConfig? = nil,
        risk: RiskConfig = RiskConfig(),
        verdict: VerdictConfig? = nil,
        accounts: AccountsConfig = AccountsConfig(),
        android: AndroidConfig = AndroidConfig()
    ) {
        self.accounts = accounts
        self.android = android
        self.workers = workers
        self.listeners = listeners
        self.admin = admin
        self.limits = limits
        self.upstreams = upstreams
        self.routes = routes
        self.apps = apps
        self.trust = trust
        self.attest = attest
        self.store = store
        self.logging = logging
        self.sourceMap = sourceMap
        self.trustedProxies = trustedProxies
        self.apple = apple
        self.risk = risk
        self.verdict = verdict
    }

    /// The upstream a route names (always present in a loaded config).
    public func upstream(named name: String) -> UpstreamConfig? {
        upstreams.first { $0.name == name }
    }

    /// Reads and validates the file at `path`. Diagnostics name the file as `path` was given;
    /// relative paths inside it are resolved against its directory (made absolute). `${VAR}` in
    /// values is replaced from `environment` (the process's by default).
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigError) -> GatewayConfig
    {
        let url = URL(fileURLWithPath: path)
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            let reason =
                switch (error as? CocoaError)?.code {
                case .fileReadNoSuchFile?, .fileNoSuchFile?: "does not exist"
                case .fileReadNoPermission?: "cannot be read (permission denied)"
                default: "cannot be read"
                }
            throw ConfigError(diagnostics: [
                ConfigDiagnostic(file: path, line: 0, column: 0, message: "the configuration file \(reason)")
            ])
        }
        guard let yaml = String(data: data, encoding: .utf8) else {
            throw ConfigError(diagnostics: [
                ConfigDiagnostic(file: path, line: 0, column: 0, message: "the configuration file is not valid UTF-8")
            ])
        }
        let baseDirectory = url.deletingLastPathComponent().standardizedFileURL.path
        return try parse(yaml: yaml, file: path, baseDirectory: baseDirectory, environment: environment)
    }

    /// Validates YAML text. `file` is only used in diagnostics; `baseDirectory` is where relative file
    /// paths (PEM files, `data_dir`) are resolved from; `${VAR}` in values is replaced from
    /// `environment` (docs/configuration.md, "Environment variables"). No I/O.
    public static func parse(
        yaml: String, file: String = "gateway.yaml", baseDirectory: String,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigError) -> GatewayConfig {
        let decoder = ConfigDecoder(file: file, baseDirectory: baseDirectory)
        let root: YAMLNode?
        do {
            let composed = try YAMLLoader.compose(yaml, environment: environment)
            root = composed.root
            for problem in composed.problems { decoder.report(problem.message, at: problem.position) }
        } catch {
            decoder.report(error.message, at: error.position)
            throw ConfigError(diagnostics: decoder.sortedDiagnostics)
        }
        guard let config = decoder.decodeDocument(root) else {
            throw ConfigError(diagnostics: decoder.sortedDiagnostics)
        }
        return config
    }
}
