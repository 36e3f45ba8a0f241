/// Keys per account (issue 27): the top-level `accounts` section and the routes'
/// `assertion.max_keys_per_account` / `on_keys`.
extension ConfigDecoder {
    /// `accounts: {window}`.
    func decodeAccounts(_ node: YAMLNode, path: String) -> AccountsConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.accounts) else { return nil }
        var accounts = AccountsConfig()
        var valid = true
        fields.read("window", into: &accounts, \.window, valid: &valid) {
            duration($0, $1, minimum: AccountsConfig.minimumWindow, maximum: AccountsConfig.maximumWindow)
        }
        return valid ? accounts : nil
    }

    /// A route's `max_keys_per_account` (1…1,000,000) and `on_keys` (flag | refuse; needs the maximum).
    func decodeAccountLimit(_ fields: MappingFields, into policy: inout AssertionPolicy, valid: inout Bool) {
        policy.maxKeysPerAccount = fields.optional("max_keys_per_account", valid: &valid) {
            int($0, $1, in: AssertionPolicy.maxKeysPerAccountRange)
        }
        fields.read("on_keys", into: &policy, \.onKeys, valid: &valid) { choice($0, $1, as: AssertionPolicy.RiskAction.self) }
        if fields["max_keys_per_account"] == nil, let at = fields.keyPosition("on_keys") {
            report(
                "\(fields.path("on_keys")) has no effect without \(fields.path("max_keys_per_account")) (the number of keys "
                    + "per account above which a key is flagged or refused); set it, or remove on_keys",
                at: at)
            valid = false
        }
    }
}
