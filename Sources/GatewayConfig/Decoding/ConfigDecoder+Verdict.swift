/// `verdict` (the signed verdict's key, ttl, issuer, publish) and what a route's
/// `assertion.verdict_header` needs of it.
extension ConfigDecoder {
    func decodeVerdict(_ node: YAMLNode, path: String) -> VerdictConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.verdict) else { return nil }
        let key = required("key", in: fields).flatMap { filePath($0, fields.path("key")) }
        var valid = key != nil
        var verdict = VerdictConfig(key: key ?? "")
        fields.read("ttl", into: &verdict, \.ttl, valid: &valid) {
            duration($0, $1, minimum: VerdictConfig.ttlRange.lowerBound, maximum: VerdictConfig.ttlRange.upperBound)
        }
        fields.read("issuer", into: &verdict, \.issuer, valid: &valid) { node, p in
            guard let text = string(node, p) else { return nil }
            guard (1...256).contains(text.utf8.count), text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                report(
                    "\(p) must be 1 to 256 characters without control characters (the tokens' iss), got \(quoted(text))", at: node.position)
                return nil
            }
            return text
        }
        fields.read("publish", into: &verdict, \.publish, valid: &valid) { bool($0, $1) }
        return valid ? verdict : nil
    }

    /// A route's `verdict_header: true` needs the key the token is signed with: the top-level `verdict`.
    func checkVerdict(top: MappingFields, routes: DecodedRoutes?) {
        guard let first = routes?.firstVerdictHeader, top.keyPosition("verdict") == nil else { return }
        report(
            "\(first.path) needs the key the gateway signs the verdict with, but verdict is not configured: "
                + "add verdict: {key: FILE} (an EC P-256 private key, PEM), or remove verdict_header",
            at: first.position)
    }
}
