/// `accounts:` (keys per account, issue 27): how long the gateway counts the distinct keys an
/// upstream named one account for (`X-App-Attest-Account`). A top-level section, not a store key:
/// the window is a policy over the associations (the same for the memory store and Redis, read by
/// every route's `max_keys_per_account`), not a property of where they are kept.
public struct AccountsConfig: Sendable, Equatable {
    /// Keys associated with an account within this long count; older associations are dropped.
    /// Default 720h (30 days), from 1m to 8760h (a year).
    public var window: Duration

    public init(window: Duration = .seconds(30 * 86_400)) {
        self.window = window
    }

    public static let minimumWindow = Duration.seconds(60)
    public static let maximumWindow = Duration.seconds(365 * 86_400)
}
