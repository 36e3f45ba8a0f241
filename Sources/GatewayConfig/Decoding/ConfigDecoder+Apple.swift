/// `apple` (the team's key for Apple's device services) and `risk` (the risk metric's refresh).
extension ConfigDecoder {
    func decodeApple(_ node: YAMLNode, path: String) -> AppleConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.apple) else { return nil }
        let teamID = required("team_id", in: fields).flatMap { decodeTeamID($0, fields.path("team_id")) }
        let keyID = required("key_id", in: fields).flatMap { decodeAppleKeyID($0, fields.path("key_id")) }
        let privateKey = required("private_key", in: fields).flatMap { filePath($0, fields.path("private_key")) }
        var valid = teamID != nil && keyID != nil && privateKey != nil
        var apple = AppleConfig(teamID: teamID ?? "", keyID: keyID ?? "", privateKey: privateKey ?? "")
        apple.attestDataURL = fields.optional("attest_data_url", valid: &valid) { serviceURL($0, $1) }
        apple.caFile = fields.optional("ca_file", valid: &valid) { filePath($0, $1) }
        fields.read("connect_timeout", into: &apple, \.connectTimeout, valid: &valid) { duration($0, $1, maximum: .seconds(60)) }
        fields.read("response_timeout", into: &apple, \.responseTimeout, valid: &valid) { duration($0, $1, maximum: .seconds(300)) }
        apple.deviceCheckURL = fields.optional("devicecheck_url", valid: &valid) { serviceURL($0, $1) }
        fields.read("devicecheck_environment", into: &apple, \.deviceCheckEnvironment, valid: &valid) {
            choice($0, $1, as: AppleConfig.DeviceCheckEnvironment.self)
        }
        if apple.deviceCheckURL != nil, let at = fields.keyPosition("devicecheck_environment") {
            report(
                "\(fields.path("devicecheck_environment")) has no effect with \(fields.path("devicecheck_url")) (the url names the "
                    + "one DeviceCheck server spoken to); remove one of them",
                at: at)
            valid = false
        }
        return valid ? apple : nil
    }

    /// Apple's key ids are 10 characters, A-Z and 0-9, like team ids.
    private func decodeAppleKeyID(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        guard text.count == 10, text.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) else {
            report(
                "\(path) must be the 10-character id Apple shows for the key (A-Z, 0-9; the .p8 file is named AuthKey_<id>.p8), "
                    + "got \(quoted(text))",
                at: node.position)
            return nil
        }
        return text
    }

    /// An https base url: the service's requests go over TLS, always.
    func serviceURL(_ node: YAMLNode, _ path: String, service: String = "Apple's services are") -> UpstreamURL? {
        guard let target = parsed(node, path, expected: "an https:// url", AddressSyntax.upstreamTarget) else { return nil }
        guard case .url(var url) = target, url.scheme == .https else {
            report(
                "\(path) must be an https:// url (\(service) only spoken to over TLS), got \(quoted(target.description))",
                at: node.position)
            return nil
        }
        while url.path.hasSuffix("/") { url.path.removeLast() }
        return url
    }

    /// What a route's DeviceCheck fallback needs: `apple` (the key its calls are signed with).
    func checkFallback(top: MappingFields, routes: DecodedRoutes?) {
        guard let first = routes?.firstFallback, top.keyPosition("apple") == nil else { return }
        report(
            "\(first.path) needs Apple's DeviceCheck, which the gateway calls with the team's key, but apple is not configured: "
                + "add apple: {team_id, key_id, private_key}, or remove the fallback",
            at: first.position)
    }

    func decodeRisk(_ node: YAMLNode, path: String) -> RiskConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.risk) else { return nil }
        var risk = RiskConfig()
        var valid = true
        if let refreshNode = fields["refresh"] {
            if case .scalar(let s) = refreshNode, s.text == "off" {
                risk.refresh = nil
            } else if let value = duration(refreshNode, fields.path("refresh"), minimum: RiskConfig.minimumRefresh) {
                risk.refresh = value
            } else {
                valid = false
            }
        }
        fields.read("concurrency", into: &risk, \.concurrency, valid: &valid) { int($0, $1, in: RiskConfig.concurrencyRange) }
        fields.read("rate", into: &risk, \.rate, valid: &valid) {
            parsed($0, $1, expected: "a rate such as 10/s, 600/m or 100/h", RateSyntax.parse)
        }
        fields.read("stale_probe", into: &risk, \.staleProbe, valid: &valid) { duration($0, $1, minimum: .seconds(1)) }
        if risk.refresh == nil {
            for key in ["concurrency", "rate", "stale_probe"] {
                guard let at = fields.keyPosition(key) else { continue }
                report("\(fields.path(key)) has no effect with refresh: off (no key is refreshed); remove it", at: at)
                valid = false
            }
        }
        return valid ? risk : nil
    }

    /// What the risk refresh needs: `apple` (the key its tokens are signed with) and receipts kept
    /// somewhere (a data directory or Redis); and what needs it: a route's `max_risk_metric`.
    func checkRisk(top: MappingFields, apple: AppleConfig?, risk: RiskConfig, store: StoreConfig, routes: DecodedRoutes?) {
        let appleWritten = top.keyPosition("apple") != nil
        if !appleWritten, let at = top.keyPosition("risk") {
            report(
                "risk has no effect without apple (the team's key that authenticates the refresh with Apple's data service); "
                    + "add apple: {team_id, key_id, private_key}, or remove risk",
                at: at)
        }
        if let apple, risk.refresh != nil, case .memory(let memory) = store.backend, memory.dataDirectory == nil {
            _ = apple
            report(
                "the risk refresh needs the receipts kept: set store.data_dir (a memory-only store does not keep receipts), "
                    + "use store.kind: redis, or set risk.refresh: off",
                at: Self.keyPosition("refresh", in: top["risk"]) ?? top.keyPosition("apple") ?? top.position)
        }
        if let first = routes?.firstMaxRiskMetric, appleWritten == false || risk.refresh == nil {
            let why = appleWritten ? "risk.refresh is off" : "apple is not configured"
            report(
                "\(first.path) needs the risk metric, which the gateway fetches from Apple's data service, but \(why): "
                    + "configure apple (and risk), or remove max_risk_metric",
                at: first.position)
        }
    }
}
