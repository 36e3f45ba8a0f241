struct DecodedRoutes {
    var configs: [RouteConfig] = []
    /// The first route that verifies assertions (mode enforce or shadow), which needs `apps`.
    var firstAssertionMode: (path: String, mode: AssertionPolicy.Mode, position: SourcePosition)?
    /// Every route has its own `max_body` (then `limits.max_body`, their default, applies to none).
    var everyRouteSetsMaxBody = true
    /// The first route with `assertion.max_risk_metric`, which needs the risk refresh (`apple`).
    var firstMaxRiskMetric: (path: String, position: SourcePosition)?
    /// The first route with a DeviceCheck fallback, which needs `apple`.
    var firstFallback: (path: String, position: SourcePosition)?
    /// The first route with `assertion.verdict_header: true`, which needs `verdict`.
    var firstVerdictHeader: (path: String, position: SourcePosition)?
}

/// `routes`: at least one, unique names, each naming an existing upstream.
extension ConfigDecoder {
    func decodeRoutes(
        _ node: YAMLNode, path: String, defaultMaxBody: Int, upstreamNames: Set<String>?, demoUpstreams: Set<String> = []
    ) -> DecodedRoutes? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var decoded = DecodedRoutes()
        var names: [(name: String, position: SourcePosition)] = []
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let fields = fields(of: item, path: itemPath, keys: ConfigKeys.route) else { continue }
            let nameNode = required("name", in: fields)
            let name = nameNode.flatMap { self.name($0, fields.path("name")) }
            if let name, let nameNode { names.append((name, nameNode.position)) }
            let match = required("match", in: fields).flatMap { decodeMatch($0, path: fields.path("match")) }
            let upstream = required("upstream", in: fields).flatMap {
                decodeUpstreamReference($0, fields.path("upstream"), upstreamNames)
            }
            let maxBodyNode = fields["max_body"]
            if fields.keyPosition("max_body") == nil { decoded.everyRouteSetsMaxBody = false }
            let maxBody = maxBodyNode.flatMap { size($0, fields.path("max_body"), minimum: 0) }
            var assertion: AssertionPolicy? = .off
            if let assertionNode = fields["assertion"] {
                let decodedAssertion = decodeAssertion(assertionNode, path: fields.path("assertion"))
                assertion = decodedAssertion?.policy
                if let decodedAssertion, decodedAssertion.policy.mode != .off, decoded.firstAssertionMode == nil {
                    let modePath = ConfigDecoder.child(fields.path("assertion"), "mode")
                    decoded.firstAssertionMode = (modePath, decodedAssertion.policy.mode, decodedAssertion.modePosition)
                }
                if let at = decodedAssertion?.riskPosition, decoded.firstMaxRiskMetric == nil {
                    decoded.firstMaxRiskMetric = (ConfigDecoder.child(fields.path("assertion"), "max_risk_metric"), at)
                }
                if decodedAssertion?.policy.fallback != nil, decoded.firstFallback == nil,
                    let at = ConfigDecoder.keyPosition("fallback", in: assertionNode)
                {
                    decoded.firstFallback = (ConfigDecoder.child(fields.path("assertion"), "fallback"), at)
                }
                if decodedAssertion?.policy.verdictHeader == true, decoded.firstVerdictHeader == nil,
                    let at = ConfigDecoder.keyPosition("verdict_header", in: assertionNode)
                {
                    decoded.firstVerdictHeader = (ConfigDecoder.child(fields.path("assertion"), "verdict_header"), at)
                }
            }
            var timeouts: RouteTimeouts? = RouteTimeouts()
            if let timeoutsNode = fields["timeouts"] {
                timeouts = decodeRouteTimeouts(timeoutsNode, path: fields.path("timeouts"))
                if let upstream, demoUpstreams.contains(upstream), let at = fields.keyPosition("timeouts") {
                    report(
                        "\(fields.path("timeouts")) has no effect on the demo upstream \(quoted(upstream)) (it answers in process, "
                            + "without a connection); remove it",
                        at: at)
                    timeouts = nil
                }
            }
            let passServerNode = fields["pass_server_header"]
            let passServer = passServerNode.flatMap { bool($0, fields.path("pass_server_header")) }
            guard let name, let match, let upstream, maxBodyNode == nil || maxBody != nil, let assertion, let timeouts,
                passServerNode == nil || passServer != nil
            else {
                continue
            }
            decoded.configs.append(
                RouteConfig(
                    name: name,
                    match: match,
                    upstream: upstream,
                    maxBody: maxBody ?? defaultMaxBody,
                    assertion: assertion,
                    timeouts: timeouts,
                    passServerHeader: passServer ?? false
                )
            )
        }
        checkUnique(names, what: "route name")
        return decoded
    }

    /// `timeouts: {response, connect}`: at least one.
    private func decodeRouteTimeouts(_ node: YAMLNode, path: String) -> RouteTimeouts? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.routeTimeouts) else { return nil }
        var valid = true
        let timeouts = RouteTimeouts(
            response: fields.optional("response", valid: &valid) { duration($0, $1) },
            connect: fields.optional("connect", valid: &valid) { duration($0, $1) })
        guard valid else { return nil }
        if case .mapping(let pairs, _) = node, pairs.isEmpty {
            report("\(path) must set response or connect (or both)", at: fields.position)
            return nil
        }
        return timeouts
    }

    private func decodeUpstreamReference(_ node: YAMLNode, _ path: String, _ upstreamNames: Set<String>?) -> String? {
        guard let name = string(node, path) else { return nil }
        guard let upstreamNames, !upstreamNames.contains(name) else { return name }
        let hint = Suggestion.clause(for: name, in: upstreamNames.sorted())
        let known: String
        switch upstreamNames.count {
        case 0: known = ""
        case 1: known = "; the only upstream is \(Self.list(upstreamNames.sorted()))"
        default: known = "; the upstreams are \(Self.list(upstreamNames.sorted(), conjunction: "and"))"
        }
        report("\(path) names \(quoted(name)), which is not an upstream\(hint)\(known)", at: node.position)
        return nil
    }

    func decodeMatch(_ node: YAMLNode, path: String) -> RouteMatch? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.routeMatch) else { return nil }
        var valid = true
        var methods: [String] = []
        if let methodsNode = fields["methods"] {
            if let decoded = decodeMethods(methodsNode, path: fields.path("methods")) {
                methods = decoded
            } else {
                valid = false
            }
        }
        var host: String?
        if let hostNode = fields["host"] {
            host = hostname(hostNode, fields.path("host"))
            if host == nil { valid = false }
        }
        var fold: Set<RouteMatch.Fold>?
        if let foldNode = fields["fold"] {
            fold = choiceSet(foldNode, fields.path("fold"), as: RouteMatch.Fold.self, nonEmpty: false)
            if fold == nil { valid = false }
        }
        let pathMatch: RouteMatch.Path?
        switch (fields["path_prefix"], fields["path"]) {
        case (let prefixNode?, nil):
            pathMatch = urlPath(prefixNode, fields.path("path_prefix")).map { .prefix($0) }
        case (nil, let exactNode?):
            pathMatch = urlPath(exactNode, fields.path("path")).map { .exact($0) }
        case (_?, _?):
            report(
                "\(path) must have either path_prefix or path, not both",
                at: fields.keyPosition("path") ?? fields.position
            )
            pathMatch = nil
        case (nil, nil):
            if fields.keyPosition("path_prefix") == nil && fields.keyPosition("path") == nil {
                report("\(path) needs path_prefix (e.g. path_prefix: /) or path", at: fields.position)
            }
            pathMatch = nil
        }
        guard valid, let pathMatch else { return nil }
        return RouteMatch(methods: methods, path: pathMatch, host: host, fold: fold)
    }

    /// Uppercase HTTP method tokens, each once.
    private func decodeMethods(_ node: YAMLNode, path: String) -> [String]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var methods: [String] = []
        var valid = true
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let method = string(item, itemPath) else {
                valid = false
                continue
            }
            guard TokenSyntax.isToken(method), method == method.uppercased() else {
                let hint = TokenSyntax.isToken(method) ? " (did you mean \(quoted(method.uppercased()))?)" : ""
                report(
                    "\(itemPath) must be an uppercase HTTP method such as GET or POST, got \(quoted(method))\(hint)",
                    at: item.position
                )
                valid = false
                continue
            }
            if methods.contains(method) {
                report("\(path) lists \(quoted(method)) more than once", at: item.position)
                valid = false
                continue
            }
            methods.append(method)
        }
        return valid ? methods : nil
    }

    func decodeAssertion(_ node: YAMLNode, path: String)
        -> (policy: AssertionPolicy, modePosition: SourcePosition, riskPosition: SourcePosition?)?
    {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.assertion) else { return nil }
        let modeNode = required("mode", in: fields)
        let mode = modeNode.flatMap { choice($0, fields.path("mode"), as: AssertionPolicy.Mode.self) }
        var policy = AssertionPolicy(mode: mode ?? .off)
        var valid = mode != nil
        fields.read("bind", into: &policy, \.bind, valid: &valid) { choice($0, $1, as: AssertionPolicy.Binding.self) }
        fields.read("challenge", into: &policy, \.challenge, valid: &valid) { choice($0, $1, as: AssertionPolicy.Challenge.self) }
        fields.read("rollout", into: &policy, \.rollout, valid: &valid) {
            parsed($0, $1, expected: "a percentage such as 25%", PercentageSyntax.parse)
        }
        fields.read("on_store_error", into: &policy, \.onStoreError, valid: &valid) {
            choice($0, $1, as: AssertionPolicy.StoreErrorPolicy.self)
        }
        fields.read("client_data", into: &policy, \.clientData, valid: &valid) { choice($0, $1, as: AssertionPolicy.ClientData.self) }
        policy.maxRiskMetric = fields.optional("max_risk_metric", valid: &valid) { int($0, $1, in: AssertionPolicy.maxRiskMetricRange) }
        fields.read("on_risk", into: &policy, \.onRisk, valid: &valid) { choice($0, $1, as: AssertionPolicy.RiskAction.self) }
        if fields["max_risk_metric"] == nil, let at = fields.keyPosition("on_risk") {
            report(
                "\(fields.path("on_risk")) has no effect without \(fields.path("max_risk_metric")) (the risk metric above "
                    + "which a key is flagged or refused); set it, or remove on_risk",
                at: at)
            valid = false
        }
        decodeAccountLimit(fields, into: &policy, valid: &valid)
        fields.read("counter_window", into: &policy, \.counterWindow, valid: &valid) {
            int($0, $1, in: AssertionPolicy.counterWindowRange)
        }
        fields.read("verdict_header", into: &policy, \.verdictHeader, valid: &valid) { bool($0, $1) }
        if let fallbackNode = fields["fallback"] {
            switch decodeFallback(fallbackNode, path: fields.path("fallback")) {
            case .some(let f): policy.fallback = f
            case .none: valid = false
            }
        }
        if let keyRateNode = fields["key_rate"] {
            if let k = decodeKeyRate(keyRateNode, path: fields.path("key_rate")) { policy.keyRate = k } else { valid = false }
        }
        // Strict, nothing ignored: a key that cannot change what this mode does is an error.
        if let mode {
            let inert: [(key: String, why: String)] =
                switch mode {
                case .off:
                    [
                        "bind", "challenge", "rollout", "on_store_error", "client_data", "max_risk_metric", "on_risk", "counter_window",
                        "fallback", "key_rate", "verdict_header", "max_keys_per_account", "on_keys",
                    ].map {
                        ($0, "has no effect with mode: off (the route verifies nothing); remove it, or set mode: enforce or shadow")
                    }
                case .shadow:
                    [
                        (
                            "rollout",
                            "only applies to mode: enforce (it picks the share of keys enforced; shadow verifies every "
                                + "key and forwards anyway); remove it, or set mode: enforce"
                        ),
                        (
                            "on_store_error",
                            "only applies to mode: enforce (shadow forwards when the store cannot answer "
                                + "anyway); remove it, or set mode: enforce"
                        ),
                    ]
                case .enforce: []
                }
            for (key, why) in inert {
                guard let at = fields.keyPosition(key) else { continue }
                report("\(fields.path(key)) \(why)", at: at)
                valid = false
            }
        }
        if policy.bind == .body, let clientDataNode = fields["client_data"] {
            report(
                "\(fields.path("client_data")) only applies to bind: request (with bind: body the client data is the body "
                    + "itself); remove it",
                at: clientDataNode.position
            )
            valid = false
        }
        if policy.bind == .request, policy.challenge != .required, let challengeNode = fields["challenge"] {
            report(
                "\(fields.path("challenge")) must be \"required\" when bind is \"request\" (the challenge is what makes "
                    + "a request assertion fresh); \"optional\" and \"off\" only apply to bind: body",
                at: challengeNode.position
            )
            valid = false
        }
        guard valid, let modeNode else { return nil }
        return (policy, modeNode.position, fields.keyPosition("max_risk_metric"))
    }

    /// `fallback: {devicecheck: true | {bits: off|read|write}, max_share, window, min_requests, token_ttl}`:
    /// nil when invalid (reported), `.some(nil)` for `devicecheck: false` alone (no fallback).
    func decodeFallback(_ node: YAMLNode, path: String) -> DeviceCheckFallback?? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.fallback) else { return nil }
        var fallback = DeviceCheckFallback()
        var valid = true
        var enabled = false
        if let dc = required("devicecheck", in: fields) {
            let dcPath = fields.path("devicecheck")
            if case .mapping = dc {
                if let sub = self.fields(of: dc, path: dcPath, keys: ConfigKeys.fallbackDeviceCheck) {
                    sub.read("bits", into: &fallback, \.bits, valid: &valid) { choice($0, $1, as: DeviceCheckFallback.Bits.self) }
                    enabled = true
                } else {
                    valid = false
                }
            } else if let on = bool(dc, dcPath) {
                enabled = on
            } else {
                valid = false  // reported: true or false (or a mapping such as {bits: read})
            }
        } else {
            valid = false
        }
        fields.read("max_share", into: &fallback, \.maxShare, valid: &valid) { node, p in
            guard let share = parsed(node, p, expected: "a percentage such as 5%", PercentageSyntax.parse) else { return nil }
            guard share > .zero else {
                report("\(p) must be more than 0% (to allow no fallback request, remove the fallback)", at: node.position)
                return nil
            }
            return share
        }
        fields.read("window", into: &fallback, \.window, valid: &valid) {
            duration($0, $1, minimum: DeviceCheckFallback.windowRange.lowerBound, maximum: DeviceCheckFallback.windowRange.upperBound)
        }
        fields.read("min_requests", into: &fallback, \.minRequests, valid: &valid) { int($0, $1, in: DeviceCheckFallback.minRequestsRange) }
        fields.read("token_ttl", into: &fallback, \.tokenTTL, valid: &valid) {
            duration($0, $1, minimum: DeviceCheckFallback.tokenTTLRange.lowerBound, maximum: DeviceCheckFallback.tokenTTLRange.upperBound)
        }
        if valid, !enabled {
            for key in ["max_share", "window", "min_requests", "token_ttl"] {
                guard let at = fields.keyPosition(key) else { continue }
                report("\(fields.path(key)) has no effect with devicecheck: false (no fallback); remove it", at: at)
                valid = false
            }
        }
        guard valid else { return nil }
        return .some(enabled ? fallback : nil)
    }
}
