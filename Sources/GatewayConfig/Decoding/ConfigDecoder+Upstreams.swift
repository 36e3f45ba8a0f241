struct DecodedUpstreams {
    var configs: [UpstreamConfig] = []
    /// Every name written, including those of upstreams with other errors, so that routes naming
    /// them are not reported as well.
    var names: Set<String> = []
    /// False when some upstream's name could not be read: then no route reference can be judged.
    var namesComplete = true
    /// The names of `url: demo` upstreams.
    var demoNames: Set<String> = []
}

/// `upstreams`: at least one, unique names, a `demo` or http(s) url, TLS only for https.
extension ConfigDecoder {
    func decodeUpstreams(_ node: YAMLNode, path: String) -> DecodedUpstreams? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var decoded = DecodedUpstreams()
        var names: [(name: String, position: SourcePosition)] = []
        for (index, item) in items.enumerated() {
            guard let fields = fields(of: item, path: Self.element(path, index), keys: ConfigKeys.upstream) else {
                continue
            }
            let nameNode = required("name", in: fields)
            let name = nameNode.flatMap { self.name($0, fields.path("name")) }
            if let name, let nameNode {
                names.append((name, nameNode.position))
                decoded.names.insert(name)
            } else {
                decoded.namesComplete = false
            }
            if let config = decodeUpstream(fields, name: name) {
                decoded.configs.append(config)
                if config.target == .demo { decoded.demoNames.insert(config.name) }
            }
        }
        checkUnique(names, what: "upstream name")
        return decoded
    }

    private func decodeUpstream(_ fields: MappingFields, name: String?) -> UpstreamConfig? {
        // `url` (one server) or `servers` (several), not both.
        let target: UpstreamTarget?
        var servers: [UpstreamServerConfig]?
        if fields.keyPosition("servers") != nil {
            if let at = fields.keyPosition("url") {
                report("\(fields.path) must have either url or servers, not both", at: at)
                target = nil
            } else {
                servers = fields["servers"].flatMap { decodeServers($0, path: fields.path("servers")) }
                target = servers.map { .url($0[0].url) }
            }
        } else {
            target = required("url", in: fields).flatMap {
                parsed($0, fields.path("url"), expected: "\"demo\" or an http(s) url", AddressSyntax.upstreamTarget)
            }
        }
        var upstream = UpstreamConfig(name: name ?? "", target: target ?? .demo, servers: servers)
        var valid = name != nil && target != nil
        fields.read("max_connections", into: &upstream, \.maxConnections, valid: &valid) { int($0, $1, in: 1...100_000) }
        fields.read("connect_timeout", into: &upstream, \.connectTimeout, valid: &valid) { duration($0, $1) }
        fields.read("response_timeout", into: &upstream, \.responseTimeout, valid: &valid) { duration($0, $1) }
        fields.read("idle_timeout", into: &upstream, \.idleTimeout, valid: &valid) { duration($0, $1) }
        fields.read("balance", into: &upstream, \.balance, valid: &valid) { choice($0, $1, as: UpstreamBalance.self) }
        fields.read("max_fails", into: &upstream, \.maxFails, valid: &valid) { int($0, $1, in: 0...1000) }
        fields.read("fail_timeout", into: &upstream, \.failTimeout, valid: &valid) { duration($0, $1) }
        fields.read("max_fail_timeout", into: &upstream, \.maxFailTimeout, valid: &valid) { duration($0, $1) }
        fields.read("retries", into: &upstream, \.retries, valid: &valid) { int($0, $1, in: 0...UpstreamConfig.maximumServers - 1) }
        if let node = fields["health_check"] {
            upstream.healthCheck = decodeHealthCheck(node, path: fields.path("health_check"))
            if upstream.healthCheck == nil { valid = false }
        }
        if let node = fields["resolve_interval"] {
            if case .scalar(let s) = node, s.isPlain, s.text == "off" {
                upstream.resolveInterval = nil
            } else if let interval = duration(node, fields.path("resolve_interval"), minimum: .seconds(1)) {
                upstream.resolveInterval = interval
            } else {
                valid = false
            }
        }
        if target == .demo {
            // The demo application answers in process: no connection, so no pool or timeout applies.
            for key in [
                "max_connections", "connect_timeout", "response_timeout", "idle_timeout", "balance", "max_fails", "fail_timeout",
                "max_fail_timeout", "health_check", "resolve_interval", "retries",
            ] {
                guard let at = fields.keyPosition(key) else { continue }
                report(
                    "\(fields.path(key)) has no effect on the demo upstream (it answers in process, without a connection); remove it",
                    at: at)
                valid = false
            }
        } else if target != nil {
            valid = checkServerKeys(fields, upstream) && valid
        }

        let isHTTPS: Bool
        if case .url(let url) = target, url.scheme == .https { isHTTPS = true } else { isHTTPS = false }
        if let tlsNode = fields["tls"] {
            if let target, !isHTTPS {
                let kind = target == .demo ? "the demo upstream" : "an http:// url"
                report(
                    "\(fields.path("tls")) applies only to https:// urls, not to \(kind)",
                    at: fields.keyPosition("tls") ?? tlsNode.position
                )
                valid = false
            } else if let tls = decodeUpstreamTLS(tlsNode, path: fields.path("tls")) {
                upstream.tls = tls
            } else {
                valid = false
            }
        } else if isHTTPS {
            upstream.tls = UpstreamTLSConfig()
        }
        return valid ? upstream : nil
    }

    private func decodeUpstreamTLS(_ node: YAMLNode, path: String) -> UpstreamTLSConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.upstreamTLS) else { return nil }
        var tls = UpstreamTLSConfig()
        var valid = true
        tls.caFile = fields.optional("ca_file", valid: &valid) { filePath($0, $1) }
        tls.serverName = fields.optional("server_name", valid: &valid) { hostname($0, $1) }
        tls.clientCertificate = fields.optional("client_certificate", valid: &valid) { filePath($0, $1) }
        tls.clientKey = fields.optional("client_key", valid: &valid) { filePath($0, $1) }
        tls.verify = fields.optional("verify", valid: &valid) { bool($0, $1) } ?? true
        if !tls.verify, let at = fields.keyPosition("ca_file") {
            report("\(fields.path("ca_file")) has no effect with verify: false (no certificate is checked); remove one of them", at: at)
            valid = false
        }
        if (fields["client_certificate"] == nil) != (fields["client_key"] == nil) {
            let missing = fields["client_key"] == nil ? "client_key" : "client_certificate"
            let present = missing == "client_key" ? "client_certificate" : "client_key"
            report(
                "\(path) has \(present) but no \(missing): mutual TLS needs both",
                at: fields.keyPosition(present) ?? fields.position
            )
            valid = false
        }
        return valid ? tls : nil
    }
}

/// `servers`, `balance`, `retries`, passive and active health, re-resolution.
extension ConfigDecoder {
    /// Each entry a url or `{url, weight}`; one scheme and one path for all, each `host:port` once.
    fileprivate func decodeServers(_ node: YAMLNode, path: String) -> [UpstreamServerConfig]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        guard items.count <= UpstreamConfig.maximumServers else {
            report("\(path) lists \(items.count) servers; at most \(UpstreamConfig.maximumServers)", at: node.position)
            return nil
        }
        var servers: [UpstreamServerConfig] = []
        var seen: [String: SourcePosition] = [:]
        var valid = true
        let expected = "an http:// or https:// url, or {url: …, weight: …}"
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            var server: UpstreamServerConfig?
            var urlNode = item
            if case .mapping = item {
                guard let fields = fields(of: item, path: itemPath, keys: ConfigKeys.upstreamServer) else {
                    valid = false
                    continue
                }
                guard let node = required("url", in: fields) else {
                    valid = false
                    continue
                }
                urlNode = node
                var weight = 1
                if let w = fields.optional("weight", valid: &valid, { int($0, $1, in: 1...1000) }) { weight = w }
                server = serverURL(node, fields.path("url")).map { UpstreamServerConfig(url: $0, weight: weight) }
            } else if case .scalar = item {
                server = serverURL(item, itemPath).map { UpstreamServerConfig(url: $0) }
            } else {
                report("\(itemPath) must be \(expected), got \(item.summary)", at: item.position)
            }
            guard let server else {
                valid = false
                continue
            }
            if let first = servers.first {
                if server.url.scheme != first.url.scheme || server.url.path != first.url.path {
                    report(
                        "\(itemPath) is \(server.url) but \(Self.element(path, 0)) is \(first.url): the servers of an upstream "
                            + "share one scheme and path (and one tls setting); make another upstream for it",
                        at: urlNode.position)
                    valid = false
                    continue
                }
            }
            if let first = seen[server.label] {
                report("\(itemPath) repeats \(server.label) (first at \(first)); give it a weight instead", at: urlNode.position)
                valid = false
                continue
            }
            seen[server.label] = urlNode.position
            servers.append(server)
        }
        return valid ? servers : nil
    }

    private func serverURL(_ node: YAMLNode, _ path: String) -> UpstreamURL? {
        guard let target = parsed(node, path, expected: "an http(s) url", AddressSyntax.upstreamTarget) else { return nil }
        guard case .url(let url) = target else {
            report("\(path) must be an http:// or https:// url: demo is an upstream of its own (url: demo)", at: node.position)
            return nil
        }
        return url
    }

    fileprivate func decodeHealthCheck(_ node: YAMLNode, path: String) -> UpstreamHealthCheckConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.upstreamHealthCheck) else { return nil }
        var valid = true
        let checkPath = required("path", in: fields).flatMap { urlPath($0, fields.path("path")) }
        var check = UpstreamHealthCheckConfig(path: checkPath ?? "/")
        if checkPath == nil { valid = false }
        fields.read("interval", into: &check, \.interval, valid: &valid) { duration($0, $1, minimum: .milliseconds(100)) }
        fields.read("timeout", into: &check, \.timeout, valid: &valid) { duration($0, $1) }
        if let status = fields.optional("expect_status", valid: &valid, { int($0, $1, in: 100...599) }) { check.expectStatus = status }
        if valid, check.timeout >= check.interval {
            report(
                "\(fields.path("timeout")) (\(DurationSyntax.format(check.timeout))) must be less than \(fields.path("interval")) "
                    + "(\(DurationSyntax.format(check.interval))): one check at a time per server",
                at: fields.keyPosition("timeout") ?? fields.keyPosition("interval") ?? fields.position)
            valid = false
        }
        return valid ? check : nil
    }

    /// Keys that cannot change what an upstream with these servers does are errors.
    fileprivate func checkServerKeys(_ fields: MappingFields, _ upstream: UpstreamConfig) -> Bool {
        var valid = true
        if upstream.servers.count == 1 {
            for (key, why) in [
                ("balance", "chooses among several servers"), ("retries", "sends a failed request to another server"),
            ] {
                guard let at = fields.keyPosition(key) else { continue }
                report("\(fields.path(key)) has no effect with a single server (it \(why)); list servers, or remove it", at: at)
                valid = false
            }
        } else if upstream.retries > upstream.servers.count - 1, let at = fields.keyPosition("retries") {
            report(
                "\(fields.path("retries")) is \(upstream.retries) with \(upstream.servers.count) servers: a request tries each server "
                    + "once, so at most \(upstream.servers.count - 1)",
                at: at)
            valid = false
        }
        if upstream.maxFails == 0 {
            for key in ["fail_timeout", "max_fail_timeout"] {
                guard let at = fields.keyPosition(key) else { continue }
                report("\(fields.path(key)) has no effect with max_fails: 0 (no server is ejected); remove it", at: at)
                valid = false
            }
        } else if upstream.maxFailTimeout < upstream.failTimeout,
            let at = fields.keyPosition("max_fail_timeout") ?? fields.keyPosition("fail_timeout")
        {
            report(
                "\(fields.path("max_fail_timeout")) (\(DurationSyntax.format(upstream.maxFailTimeout))) must be at least "
                    + "\(fields.path("fail_timeout")) (\(DurationSyntax.format(upstream.failTimeout)))",
                at: at)
            valid = false
        }
        if let at = fields.keyPosition("resolve_interval"), !upstream.servers.contains(where: { $0.url.hostIsName }) {
            report(
                "\(fields.path("resolve_interval")) has no effect: every server is an IP address (nothing to resolve); remove it", at: at)
            valid = false
        }
        return valid
    }
}
