struct DecodedUpstreams {
    var configs: [UpstreamConfig] = []
    /// Every name written, including those of upstreams with other errors, so that routes naming
    /// them are not reported as well.
    var names: Set<String> = []
    /// False when some upstream's name could not be read: then no route reference can be judged.
    var namesComplete = true
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
            if let config = decodeUpstream(fields, name: name) { decoded.configs.append(config) }
        }
        checkUnique(names, what: "upstream name")
        return decoded
    }

    private func decodeUpstream(_ fields: MappingFields, name: String?) -> UpstreamConfig? {
        let target = required("url", in: fields).flatMap {
            parsed($0, fields.path("url"), expected: "\"demo\" or an http(s) url", AddressSyntax.upstreamTarget)
        }
        var upstream = UpstreamConfig(name: name ?? "", target: target ?? .demo)
        var valid = name != nil && target != nil
        fields.read("max_connections", into: &upstream, \.maxConnections, valid: &valid) { int($0, $1, in: 1...100_000) }
        fields.read("connect_timeout", into: &upstream, \.connectTimeout, valid: &valid) { duration($0, $1) }
        fields.read("response_timeout", into: &upstream, \.responseTimeout, valid: &valid) { duration($0, $1) }
        fields.read("idle_timeout", into: &upstream, \.idleTimeout, valid: &valid) { duration($0, $1) }
        if target == .demo {
            // The demo application answers in process: no connection, so no pool or timeout applies.
            for key in ["max_connections", "connect_timeout", "response_timeout", "idle_timeout"] {
                guard let at = fields.keyPosition(key) else { continue }
                report(
                    "\(fields.path(key)) has no effect on the demo upstream (it answers in process, without a connection); remove it",
                    at: at)
                valid = false
            }
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
