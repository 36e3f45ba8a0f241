struct DecodedListener {
    let config: ListenerConfig
    let addressPosition: SourcePosition
}

/// `listeners`: at least one, unique names, addresses that can all be bound together.
extension ConfigDecoder {
    /// - Parameter trustedProxies: the top-level `trusted_proxies`, which listeners without their
    ///   own inherit; nil when it was invalid (reported already: nothing is checked against it).
    func decodeListeners(_ node: YAMLNode, path: String, trustedProxies: [IPNetwork]? = []) -> [DecodedListener]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var listeners: [DecodedListener] = []
        var names: [(name: String, position: SourcePosition)] = []
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let fields = fields(of: item, path: itemPath, keys: ConfigKeys.listener) else { continue }
            let nameNode = required("name", in: fields)
            let name = nameNode.flatMap { self.name($0, fields.path("name")) }
            if let name, let nameNode { names.append((name, nameNode.position)) }
            let addressNode = required("address", in: fields)
            let address = addressNode.flatMap { socketAddress($0, fields.path("address")) }
            var protocols: Set<ListenerProtocol>? = [.http1]
            if let node = fields["protocols"] {
                protocols = choiceSet(node, fields.path("protocols"), as: ListenerProtocol.self)
            }
            let tlsNode = fields["tls"]
            let tls = tlsNode.flatMap { decodeListenerTLS($0, path: fields.path("tls")) }
            if let node = fields["protocols"], let chosen = protocols,
                !checkHTTP2Name(chosen, node, fields.path("protocols"), tls: tlsNode != nil)
            {
                protocols = nil
            }
            var http2 = HTTP2ListenerConfig()
            var http2Valid = true
            if let http2Node = fields["http2"] {
                let http2Path = fields.path("http2")
                if let protocols, !protocols.contains(.h2c), !protocols.contains(.h2) {
                    report(
                        "\(http2Path) is only allowed on a listener that serves HTTP/2: add \(tlsNode == nil ? "h2c" : "h2") to "
                            + fields.path("protocols"),
                        at: fields.keyPosition("http2") ?? http2Node.position
                    )
                    http2Valid = false
                } else if let decoded = decodeListenerHTTP2(http2Node, path: http2Path) {
                    http2 = decoded
                } else {
                    http2Valid = false
                }
            }
            var underscores: UnderscoresInHeaders? = .drop
            if let node = fields["underscores_in_headers"] {
                underscores = choice(node, fields.path("underscores_in_headers"), as: UnderscoresInHeaders.self)
            }
            let proxies = decodeListenerProxies(fields, inherited: trustedProxies)
            guard let name, let address, let addressNode, let protocols, tlsNode == nil || tls != nil, http2Valid,
                let underscores, let proxies
            else {
                continue
            }
            let config = ListenerConfig(
                name: name, address: address, protocols: protocols, tls: tls, http2: http2, underscoresInHeaders: underscores,
                trustedProxies: proxies.trusted, proxyProtocol: proxies.proxyProtocol)
            listeners.append(DecodedListener(config: config, addressPosition: addressNode.position))
        }
        checkUnique(names, what: "listener name")
        checkAddresses(listeners)
        return listeners
    }

    /// HTTP/2 is `h2` on a TLS listener (ALPN) and `h2c` without TLS (prior knowledge): the other name
    /// is reported at its element, saying which to write. False when one was.
    private func checkHTTP2Name(_ protocols: Set<ListenerProtocol>, _ node: YAMLNode, _ path: String, tls: Bool) -> Bool {
        guard case .sequence(let items, _) = node else { return true }
        let wrong: ListenerProtocol = tls ? .h2c : .h2
        guard protocols.contains(wrong) else { return true }
        for (index, item) in items.enumerated() {
            guard case .scalar(let s) = item, s.text == wrong.rawValue else { continue }
            let at = Self.element(path, index)
            if tls {
                report(
                    "\(at) is h2c, HTTP/2 over cleartext with prior knowledge, but this listener has tls, where HTTP/2 is "
                        + "chosen by ALPN: write h2",
                    at: s.position)
            } else {
                report(
                    "\(at) is h2, HTTP/2 over TLS chosen by ALPN, but this listener has no tls: write h2c (cleartext HTTP/2 "
                        + "with prior knowledge), or add tls",
                    at: s.position)
            }
        }
        return false
    }

    /// `trusted_proxies` (the listener's own, else `inherited`) and `proxy_protocol`, which needs
    /// some: nil after reporting.
    private func decodeListenerProxies(_ fields: MappingFields, inherited: [IPNetwork]?)
        -> (trusted: [IPNetwork], proxyProtocol: Bool)?
    {
        var valid = true
        var trusted = inherited ?? []
        var trustedKnown = inherited != nil
        if let node = fields["trusted_proxies"] {
            if let own = networks(node, path: fields.path("trusted_proxies"), nonEmpty: false) {
                if own.isEmpty, let inherited, inherited.isEmpty {
                    report(
                        "\(fields.path("trusted_proxies")) is empty and the top-level trusted_proxies lists none: it has no "
                            + "effect (no peer is trusted by default); remove it",
                        at: fields.keyPosition("trusted_proxies") ?? node.position)
                    valid = false
                }
                trusted = own
                trustedKnown = true
            } else {
                valid = false
                trustedKnown = false
            }
        }
        var proxyProtocol = false
        if let node = fields["proxy_protocol"] {
            if let value = bool(node, fields.path("proxy_protocol")) {
                proxyProtocol = value
            } else {
                valid = false
            }
        }
        if proxyProtocol, trustedKnown, trusted.isEmpty {
            report(
                "\(fields.path("proxy_protocol")) needs trusted proxies: list the load balancers that send the PROXY header in "
                    + "\(fields.path("trusted_proxies")) or the top-level trusted_proxies (a header from any other peer would "
                    + "let it choose its client address, so it is refused)",
                at: fields.keyPosition("proxy_protocol") ?? fields.position)
            valid = false
        }
        return valid ? (trusted, proxyProtocol) : nil
    }

    private func checkAddresses(_ listeners: [DecodedListener]) {
        for (index, listener) in listeners.enumerated() {
            let earlier = listeners[..<index].first { $0.config.address.conflicts(with: listener.config.address) }
            guard let earlier else { continue }
            let what = earlier.config.address == listener.config.address ? "is also used by" : "overlaps the address of"
            report(
                "address \(listener.config.address) of listener \(quoted(listener.config.name)) \(what) listener "
                    + "\(quoted(earlier.config.name)) (\(earlier.config.address), at \(earlier.addressPosition))",
                at: listener.addressPosition
            )
        }
    }

    /// `{max_concurrent_streams, max_header_list_size, initial_window_size, connection_window_size,
    /// max_frame_size}`, each within its RFC 9113 §6.5.2 range, and the flood limits
    /// `{max_continuations, max_resets, reset_window, max_outbound_ack, max_settings_entries}`;
    /// absent keys keep their defaults.
    func decodeListenerHTTP2(_ node: YAMLNode, path: String) -> HTTP2ListenerConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.listenerHTTP2) else { return nil }
        typealias C = HTTP2ListenerConfig
        var http2 = C()
        var valid = true
        fields.read("max_concurrent_streams", into: &http2, \.maxConcurrentStreams, valid: &valid) {
            int($0, $1, in: C.maxConcurrentStreamsRange)
        }
        fields.read("max_header_list_size", into: &http2, \.maxHeaderListSize, valid: &valid) {
            size($0, $1, in: C.maxHeaderListSizeRange)
        }
        fields.read("initial_window_size", into: &http2, \.initialWindowSize, valid: &valid) {
            size($0, $1, in: C.initialWindowSizeRange)
        }
        fields.read("connection_window_size", into: &http2, \.connectionWindowSize, valid: &valid) {
            size($0, $1, in: C.connectionWindowSizeRange)
        }
        fields.read("max_frame_size", into: &http2, \.maxFrameSize, valid: &valid) {
            size($0, $1, in: C.maxFrameSizeRange)
        }
        fields.read("max_continuations", into: &http2, \.maxContinuations, valid: &valid) {
            int($0, $1, in: C.maxContinuationsRange)
        }
        fields.read("max_resets", into: &http2, \.maxResets, valid: &valid) {
            int($0, $1, in: C.maxResetsRange)
        }
        fields.read("reset_window", into: &http2, \.resetWindow, valid: &valid) {
            duration($0, $1, minimum: C.resetWindowRange.lowerBound, maximum: C.resetWindowRange.upperBound)
        }
        fields.read("max_outbound_ack", into: &http2, \.maxOutboundAck, valid: &valid) {
            int($0, $1, in: C.maxOutboundAckRange)
        }
        fields.read("max_settings_entries", into: &http2, \.maxSettingsEntries, valid: &valid) {
            int($0, $1, in: C.maxSettingsEntriesRange)
        }
        return valid ? http2 : nil
    }

    /// `{certificate, private_key}` or `{certificates: [{certificate, private_key, server_names}]}`,
    /// with an optional `ticket_rotation` (2s ... 24h, default 1h).
    func decodeListenerTLS(_ node: YAMLNode, path: String) -> TLSConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.listenerTLS) else { return nil }
        var rotationValid = true
        let rotation = fields.optional("ticket_rotation", valid: &rotationValid) {
            duration(
                $0, $1, minimum: TLSConfig.ticketRotationRange.lowerBound, maximum: TLSConfig.ticketRotationRange.upperBound)
        }
        guard var tls = decodeListenerCertificates(fields, path: path), rotationValid else { return nil }
        if let rotation { tls.ticketRotation = rotation }
        return tls
    }

    private func decodeListenerCertificates(_ fields: MappingFields, path: String) -> TLSConfig? {
        let single = fields["certificate"] != nil || fields["private_key"] != nil
        if single && fields["certificates"] != nil {
            report(
                "\(path) must have either certificate and private_key, or certificates, not both",
                at: fields.keyPosition("certificates") ?? fields.position
            )
            return nil
        }
        if let listNode = fields["certificates"] {
            return decodeCertificateList(listNode, path: fields.path("certificates"))
        }
        guard single else {
            report("\(path) needs certificate and private_key (or a certificates list for SNI)", at: fields.position)
            return nil
        }
        let certificate = required("certificate", in: fields).flatMap { filePath($0, fields.path("certificate")) }
        let key = required("private_key", in: fields).flatMap { filePath($0, fields.path("private_key")) }
        guard let certificate, let key else { return nil }
        return TLSConfig(certificates: [TLSConfig.Certificate(certificatePath: certificate, privateKeyPath: key)])
    }

    private func decodeCertificateList(_ node: YAMLNode, path: String) -> TLSConfig? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var certificates: [TLSConfig.Certificate] = []
        var serverNames: [(name: String, position: SourcePosition)] = []
        var valid = true
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let fields = fields(of: item, path: itemPath, keys: ConfigKeys.listenerCertificate) else {
                valid = false
                continue
            }
            let certificate = required("certificate", in: fields).flatMap { filePath($0, fields.path("certificate")) }
            let key = required("private_key", in: fields).flatMap { filePath($0, fields.path("private_key")) }
            var names: [String] = []
            if items.count == 1, let at = fields.keyPosition("server_names") {
                report(
                    "\(fields.path("server_names")) has no effect with a single certificate (it is served for every name); "
                        + "remove it, or add the other certificates",
                    at: at)
                valid = false
            } else if let namesNode = fields["server_names"] {
                let namesPath = fields.path("server_names")
                if let nameItems = list(namesNode, namesPath, nonEmpty: true) {
                    for (nameIndex, nameNode) in nameItems.enumerated() {
                        guard let name = hostname(nameNode, Self.element(namesPath, nameIndex), allowWildcard: true)
                        else {
                            valid = false
                            continue
                        }
                        names.append(name)
                        serverNames.append((name, nameNode.position))
                    }
                } else {
                    valid = false
                }
            } else if index > 0 {
                report(
                    "\(itemPath) needs server_names: only the first certificate is used when no server name matches",
                    at: fields.position
                )
                valid = false
            }
            guard let certificate, let key else {
                valid = false
                continue
            }
            certificates.append(
                TLSConfig.Certificate(certificatePath: certificate, privateKeyPath: key, serverNames: names)
            )
        }
        checkUnique(serverNames, what: "server name")
        return valid ? TLSConfig(certificates: certificates) : nil
    }
}
