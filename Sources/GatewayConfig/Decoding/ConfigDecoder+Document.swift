/// The top level and the small sections: workers, admin, limits, trust, attest, logging.
extension ConfigDecoder {
    func decodeDocument(_ root: YAMLNode?) -> GatewayConfig? {
        guard let root else {
            report("the configuration is empty: it needs at least listeners, upstreams and routes", at: .start)
            return nil
        }
        guard let top = fields(of: root, path: "", keys: ConfigKeys.top) else { return nil }

        let workers = top["workers"].flatMap { decodeWorkers($0) } ?? .auto
        let limits = top["limits"].flatMap { decodeLimits($0, path: "limits") } ?? LimitsConfig()
        // nil when written and invalid (reported): the listeners then check nothing against it.
        let trustedProxies: [IPNetwork]? =
            if let node = top["trusted_proxies"] { networks(node, path: "trusted_proxies", nonEmpty: true) } else { [] }
        let listeners =
            required("listeners", in: top).flatMap { decodeListeners($0, path: "listeners", trustedProxies: trustedProxies) } ?? []
        let admin = top["admin"].flatMap { decodeAdmin($0, path: "admin") }
        let upstreams = required("upstreams", in: top).flatMap { decodeUpstreams($0, path: "upstreams") }
        let routes = required("routes", in: top).flatMap {
            decodeRoutes(
                $0,
                path: "routes",
                defaultMaxBody: limits.maxBody,
                upstreamNames: upstreams.flatMap { $0.namesComplete ? $0.names : nil },
                demoUpstreams: upstreams?.demoNames ?? []
            )
        }
        let apps = top["apps"].flatMap { decodeApps($0, path: "apps") } ?? []
        let trust = top["trust"].flatMap { decodeTrust($0, path: "trust") } ?? TrustConfig()
        let attest = top["attest"].flatMap { decodeAttest($0, path: "attest") } ?? AttestConfig()
        let store = top["store"].flatMap { decodeStore($0, path: "store") } ?? StoreConfig()
        let logging = top["logging"].flatMap { decodeLogging($0, path: "logging") } ?? LoggingConfig()
        let apple = top["apple"].flatMap { decodeApple($0, path: "apple") }
        let decodedRisk = top["risk"].flatMap { decodeRisk($0, path: "risk") }
        let risk = decodedRisk ?? RiskConfig()
        // What the refresh needs is judged on what was written (not on defaults standing in for a bad value).
        if top["risk"] == nil || decodedRisk != nil, top["apple"] == nil || apple != nil {
            checkRisk(top: top, apple: apple, risk: risk, store: store, routes: routes)
        }
        checkFallback(top: top, routes: routes)
        let android = top["android"].flatMap { decodeAndroid($0, path: "android") } ?? AndroidConfig()
        let verdict = top["verdict"].flatMap { decodeVerdict($0, path: "verdict") }
        checkVerdict(top: top, routes: routes)
        let accounts = top["accounts"].flatMap { decodeAccounts($0, path: "accounts") } ?? AccountsConfig()

        checkAdmin(admin, against: listeners)
        if let routes, routes.everyRouteSetsMaxBody, !routes.configs.isEmpty,
            let at = Self.keyPosition("max_body", in: top["limits"])
        {
            report(
                "limits.max_body has no effect: it is the default of routes without their own max_body, and every route "
                    + "sets one; remove it",
                at: at)
        }
        if let firstAssertion = routes?.firstAssertionMode, apps.isEmpty,
            top.keyPosition("apps") == nil || isEmptyList(top["apps"])
        {
            report(
                "\(firstAssertion.path) is \(quoted(firstAssertion.mode.rawValue)), which needs at least one entry in apps "
                    + "(the team and bundle ids whose devices may attest)",
                at: firstAssertion.position
            )
        }

        guard diagnostics.isEmpty else { return nil }
        return GatewayConfig(
            workers: workers,
            listeners: listeners.map(\.config),
            admin: admin?.config ?? AdminConfig(),
            limits: limits,
            upstreams: upstreams?.configs ?? [],
            routes: routes?.configs ?? [],
            apps: apps,
            trust: trust,
            attest: attest,
            store: store,
            logging: logging,
            sourceMap: SourceMap(file: file, root: root),
            trustedProxies: trustedProxies ?? [],
            apple: apple,
            risk: risk,
            verdict: verdict,
            accounts: accounts,
            android: android
        )
    }

    /// Where `key` is written in a mapping node (nil when absent or not a mapping); reports nothing.
    static func keyPosition(_ key: String, in node: YAMLNode?) -> SourcePosition? {
        guard case .mapping(let pairs, _)? = node else { return nil }
        for (k, _) in pairs {
            if case .scalar(let s) = k, s.text == key { return s.position }
        }
        return nil
    }

    private func isEmptyList(_ node: YAMLNode?) -> Bool {
        if case .sequence(let items, _) = node { return items.isEmpty }
        return false
    }

    func decodeWorkers(_ node: YAMLNode) -> Workers? {
        let expected = "\"auto\" or a positive integer"
        guard let scalar = scalar(node, "workers", expected: expected) else { return nil }
        if scalar.text == "auto" { return .auto }
        let digits = scalar.text.allSatisfy { $0.isASCII && $0.isNumber }
        guard scalar.isPlain, digits, let count = Int(scalar.text), count >= 1 else {
            report("workers must be \(expected), got \(quoted(scalar.text))", at: scalar.position)
            return nil
        }
        guard count <= Workers.maximum else {
            report("workers must be at most \(Workers.maximum), got \(count)", at: scalar.position)
            return nil
        }
        return .count(count)
    }

    func decodeAdmin(_ node: YAMLNode, path: String) -> (config: AdminConfig, position: SourcePosition)? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.admin) else { return nil }
        var admin = AdminConfig()
        var valid = true
        fields.read("address", into: &admin, \.address, valid: &valid) { socketAddress($0, $1) }
        if let file = fields.optional("token_file", valid: &valid, { filePath($0, $1) }) { admin.tokenFile = file }
        fields.read("protect_metrics", into: &admin, \.protectMetrics, valid: &valid) { bool($0, $1) }
        if admin.protectMetrics, admin.tokenFile == nil, let node = fields["protect_metrics"] {
            report(
                "\(fields.path("protect_metrics")) needs \(fields.path("token_file")) (the bearer token that /metrics then requires)",
                at: node.position
            )
            valid = false
        }
        if let node = fields["allow"] {
            if let networks = networks(node, path: fields.path("allow"), nonEmpty: true) {
                admin.allow = networks
            } else {
                valid = false
            }
        }
        guard valid else { return nil }
        return (admin, fields["address"]?.position ?? fields.position)
    }

    /// A list of IP networks (`admin.allow`, `trusted_proxies`): each in CIDR notation or one address
    /// (`NetworkSyntax`), none twice. nil after reporting.
    func networks(_ node: YAMLNode, path: String, nonEmpty: Bool) -> [IPNetwork]? {
        guard let items = list(node, path, nonEmpty: nonEmpty) else { return nil }
        var networks: [IPNetwork] = []
        var valid = true
        var seen: [IPNetwork: SourcePosition] = [:]
        for (i, item) in items.enumerated() {
            let itemPath = ConfigDecoder.element(path, i)
            guard let network = parsed(item, itemPath, expected: "a network such as 10.0.0.0/8", NetworkSyntax.network) else {
                valid = false
                continue
            }
            if let first = seen[network] {
                report("\(itemPath) repeats \(network) (first at \(first))", at: item.position)
                valid = false
                continue
            }
            seen[network] = item.position
            networks.append(network)
        }
        return valid ? networks : nil
    }

    /// The admin endpoint, configured or by default, must not take a listener's address.
    private func checkAdmin(
        _ admin: (config: AdminConfig, position: SourcePosition)?,
        against listeners: [DecodedListener]
    ) {
        let address = admin?.config.address ?? AdminConfig().address
        for listener in listeners where listener.config.address.conflicts(with: address) {
            let what = listener.config.address == address ? "is also" : "overlaps"
            if let admin {
                report(
                    "admin.address \(address) \(what) the address of listener \(quoted(listener.config.name)) "
                        + "(\(listener.config.address), at \(listener.addressPosition))",
                    at: admin.position
                )
            } else {
                report(
                    "the address \(listener.config.address) of listener \(quoted(listener.config.name)) \(what) the default "
                        + "admin address \(address): choose another port, or set admin.address",
                    at: listener.addressPosition
                )
            }
        }
    }

    func socketAddress(_ node: YAMLNode, _ path: String) -> SocketAddressSpec? {
        parsed(node, path, expected: "an address such as 0.0.0.0:8080", AddressSyntax.socketAddress)
    }

    func decodeLimits(_ node: YAMLNode, path: String) -> LimitsConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.limits) else { return nil }
        var limits = LimitsConfig()
        // Invalid values are reported; the file then fails as a whole, so limits keep their defaults here.
        var valid = true
        fields.read("max_request_line", into: &limits, \.maxRequestLine, valid: &valid) { size($0, $1, minimum: 16) }
        fields.read("max_header_bytes", into: &limits, \.maxHeaderBytes, valid: &valid) { size($0, $1, minimum: 64) }
        fields.read("max_header_count", into: &limits, \.maxHeaderCount, valid: &valid) { int($0, $1, in: 1...10_000) }
        fields.read("max_body", into: &limits, \.maxBody, valid: &valid) { size($0, $1, minimum: 0) }
        fields.read("idle_timeout", into: &limits, \.idleTimeout, valid: &valid) { duration($0, $1) }
        fields.read("header_timeout", into: &limits, \.headerTimeout, valid: &valid) { duration($0, $1) }
        fields.read("body_timeout", into: &limits, \.bodyTimeout, valid: &valid) { duration($0, $1) }
        fields.read("send_timeout", into: &limits, \.sendTimeout, valid: &valid) { duration($0, $1) }
        fields.read("discard_body", into: &limits, \.discardBody, valid: &valid) { size($0, $1, minimum: 0) }
        fields.read("drain_timeout", into: &limits, \.drainTimeout, valid: &valid) { duration($0, $1, allowZero: true) }
        fields.read("max_connections", into: &limits, \.maxConnections, valid: &valid) { int($0, $1, in: 1...1_000_000) }
        fields.read("max_receipt", into: &limits, \.maxReceipt, valid: &valid) { size($0, $1, in: LimitsConfig.maxReceiptRange) }
        return limits
    }

    func decodeTrust(_ node: YAMLNode, path: String) -> TrustConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.trust) else { return nil }
        var valid = true
        func paths(_ key: String) -> [String] {
            guard let rootsNode = fields[key] else { return [] }
            guard let items = list(rootsNode, fields.path(key)) else {
                valid = false
                return []
            }
            let roots = items.enumerated().compactMap { filePath($1, Self.element(fields.path(key), $0)) }
            if roots.count != items.count { valid = false }
            return roots
        }
        let trust = TrustConfig(
            extraRoots: paths("extra_roots"), extraReceiptRoots: paths("extra_receipt_roots"),
            extraAndroidRoots: paths("extra_android_roots"))
        return valid ? trust : nil
    }

    func decodeAttest(_ node: YAMLNode, path: String) -> AttestConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.attest) else { return nil }
        var attest = AttestConfig()
        if let node = fields["challenge_path"], let value = urlPath(node, fields.path("challenge_path")) {
            attest.challengePath = value
        }
        if let node = fields["register_path"], let value = urlPath(node, fields.path("register_path")) {
            attest.registerPath = value
        }
        if attest.challengePath == attest.registerPath, let node = fields["register_path"] ?? fields["challenge_path"] {
            report(
                "attest.challenge_path and attest.register_path must differ, both are \(quoted(attest.registerPath))",
                at: node.position
            )
        }
        if let node = fields["challenge_ttl"],
            let value = duration(node, fields.path("challenge_ttl"), maximum: AttestConfig.maximumChallengeTTL)
        {
            attest.challengeTTL = value
        }
        if let node = fields["verified_key_header"], let value = string(node, fields.path("verified_key_header")) {
            if TokenSyntax.isToken(value) {
                attest.verifiedKeyHeader = value
            } else {
                report(
                    "\(fields.path("verified_key_header")) must be a header name such as X-App-Attest-Verified-Key-Id, got \(quoted(value))",
                    at: node.position
                )
            }
        }
        if let node = fields["challenge_rate"], let value = decodeClientRate(node, path: fields.path("challenge_rate")) {
            attest.challengeRate = value
        }
        if let node = fields["registration_rate"], let value = rateOrOff(node, fields.path("registration_rate")) {
            attest.registrationRate = value.rate
        }
        return attest
    }

    /// `attest.challenge_rate: {per_client: 10/s | off, burst: 20, clients: 65536}`.
    func decodeClientRate(_ node: YAMLNode, path: String) -> ClientRateConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.attestChallengeRate) else { return nil }
        var valid = true
        var perClient = ClientRateConfig().perClient
        if let value = fields.optional("per_client", valid: &valid, rateOrOff) { perClient = value.rate }
        let burst = fields.optional("burst", valid: &valid) { int($0, $1, in: 1...ClientRateConfig.maximumBurst) }
        let clients = fields.optional("clients", valid: &valid) { int($0, $1, in: ClientRateConfig.clientRange) }
        guard valid else { return nil }
        if perClient == nil, fields["burst"] != nil {
            report(
                "\(fields.path("burst")) has no effect with per_client: off; remove it", at: fields.keyPosition("burst") ?? fields.position)
            return nil
        }
        if perClient == nil, fields["clients"] != nil {
            report(
                "\(fields.path("clients")) has no effect with per_client: off (no client is tracked); remove it",
                at: fields.keyPosition("clients") ?? fields.position)
            return nil
        }
        return ClientRateConfig(perClient: perClient, burst: burst, clients: clients ?? ClientRateConfig().clients)
    }

    /// A rate such as `10/s`, or `off` (`RateChoice.rate` nil); nil after reporting a bad value.
    func rateOrOff(_ node: YAMLNode, _ path: String) -> RateChoice? {
        if case .scalar(let scalar) = node, scalar.text == "off" { return RateChoice(rate: nil) }
        return parsed(node, path, expected: "a rate such as 10/s, 600/m or 100/h, or off", RateSyntax.parse).map(RateChoice.init)
    }

    func decodeLogging(_ node: YAMLNode, path: String) -> LoggingConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.logging) else { return nil }
        var logging = LoggingConfig()
        if let node = fields["level"] {
            // swift-log's other level names read as a near miss: the event log writes these four only.
            if case .scalar(let s) = node, ["trace", "notice", "critical"].contains(s.text) {
                let closest = ["trace": "debug", "notice": "info", "critical": "error"][s.text] ?? "info"
                report(
                    "\(fields.path("level")) must be one of \(Self.list(LoggingConfig.Level.allCases.map(\.rawValue))), "
                        + "got \(quoted(s.text)): the event log has no such level (did you mean \(quoted(closest))?)",
                    at: s.position)
            } else if let value = choice(node, fields.path("level"), as: LoggingConfig.Level.self) {
                logging.level = value
            }
        }
        if let node = fields["access_log"] {
            if case .mapping = node {
                guard let options = decodeAccessLog(node, path: fields.path("access_log")) else { return nil }
                logging.accessLogOptions = options
            } else if case .scalar(let b) = node, b.isPlain, ["true", "false"].contains(b.text.lowercased()) {
                logging.accessLog = b.text.lowercased() == "true"
            } else if scalar(node, fields.path("access_log"), expected: Self.accessLogExpected) != nil {
                report("\(fields.path("access_log")) must be \(Self.accessLogExpected), got \(node.summary)", at: node.position)
            }
        }
        return logging
    }

    static let accessLogExpected = "true, false or a mapping such as {path: /var/log/attest-gateway/access.log}"

    /// `access_log: {path: stdout | FILE, format: json | combined, buffer: 64KiB, flush: 1s}`.
    func decodeAccessLog(_ node: YAMLNode, path: String) -> AccessLogConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.accessLog) else { return nil }
        var options = AccessLogConfig()
        var valid = true
        if let node = fields["path"] {
            if case .scalar(let s) = node, s.isPlain, s.text == "stdout" {
                options.destination = .stdout
            } else if let file = filePath(node, fields.path("path")) {
                options.destination = .file(file)
            } else {
                valid = false
            }
        }
        fields.read("format", into: &options, \.format, valid: &valid) { choice($0, $1, as: AccessLogConfig.Format.self) }
        fields.read("buffer", into: &options, \.bufferBytes, valid: &valid) {
            size($0, $1, in: 0...AccessLogConfig.maximumBufferBytes)
        }
        fields.read("flush", into: &options, \.flush, valid: &valid) {
            duration($0, $1, minimum: AccessLogConfig.minimumFlush, maximum: AccessLogConfig.maximumFlush)
        }
        guard valid else { return nil }
        if options.bufferBytes == 0, fields["flush"] != nil {
            report(
                "\(fields.path("flush")) has no effect with buffer: 0 (each line is written as it is made); remove it",
                at: fields.keyPosition("flush") ?? fields.position)
            return nil
        }
        return options
    }
}

/// A decoded rate setting: a rate, or `off` (nil).
struct RateChoice {
    let rate: Rate?
}
