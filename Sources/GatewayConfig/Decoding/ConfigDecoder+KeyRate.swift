extension ConfigDecoder {
    /// `assertion.key_rate: {rate: 5/s, burst: 10}` (issue 27): `rate` required, `burst` 1…1,000,000
    /// (default two seconds' worth of the rate). nil when invalid (reported, with its position).
    func decodeKeyRate(_ node: YAMLNode, path: String) -> KeyRateConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.keyRate) else { return nil }
        var valid = true
        let rate = required("rate", in: fields).flatMap {
            parsed($0, fields.path("rate"), expected: "a rate such as 5/s, 300/m or 1000/h", RateSyntax.parse)
        }
        if fields["rate"] != nil, rate == nil { valid = false }
        let burst = fields.optional("burst", valid: &valid) { int($0, $1, in: KeyRateConfig.burstRange) }
        guard valid, let rate else { return nil }
        return KeyRateConfig(rate: rate, burst: burst)
    }
}
