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
        func read<Value>(
            _ key: String,
            _ keyPath: WritableKeyPath<UpstreamConfig, Value>,
            _ decode: (YAMLNode, String) -> Value?
        ) {
            guard let node = fields[key] else { return }
            guard let value = decode(node, fields.path(key)) else {
                valid = false
                return
            }
            upstream[keyPath: keyPath] = value
        }
        read("max_connections", \.maxConnections) { int($0, $1, in: 1...100_000) }
        read("connect_timeout", \.connectTimeout) { duration($0, $1) }
        read("response_timeout", \.responseTimeout) { duration($0, $1) }
        read("idle_timeout", \.idleTimeout) { duration($0, $1) }

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
        /// Reads an optional key; a present but invalid value marks the block invalid.
        func read<Value>(_ key: String, _ decode: (YAMLNode, String) -> Value?) -> Value? {
            guard let node = fields[key] else { return nil }
            let value = decode(node, fields.path(key))
            if value == nil { valid = false }
            return value
        }
        tls.caFile = read("ca_file") { filePath($0, $1) }
        tls.serverName = read("server_name") { hostname($0, $1) }
        tls.clientCertificate = read("client_certificate") { filePath($0, $1) }
        tls.clientKey = read("client_key") { filePath($0, $1) }
        tls.verify = read("verify") { bool($0, $1) } ?? true
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
