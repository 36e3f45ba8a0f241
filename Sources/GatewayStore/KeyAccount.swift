import GatewayWire

/// Keys per account (issue 27; docs/store.md, "Keys per account"): an upstream names the account a
/// verified key belongs to (`X-App-Attest-Account`), and the store keeps, with the key, the
/// account's SHA-256 (never the id in clear) and how many distinct keys the account had within the
/// window when that association was last recorded. Both stores implement `AccountStore`.
public struct KeyAccount: Sendable, Equatable {
    /// SHA-256 of the account id the upstream sent: 32 bytes.
    public var digest: [UInt8]
    /// Distinct keys associated with the account within the window, this one included, as counted
    /// when this key's association was last recorded (refreshed by every association of the key).
    public var keyCount: Int
    /// When the association was last recorded (Unix ms; the memory store keeps whole seconds). An
    /// association older than the window no longer counts (the gateway ignores it).
    public var associatedMillis: Int64

    public init(digest: [UInt8], keyCount: Int, associatedMillis: Int64) {
        self.digest = digest
        self.keyCount = keyCount
        self.associatedMillis = associatedMillis
    }

    /// Lowercase hex of the digest (explain, logs).
    public var digestHex: String { Hex.encode(digest) }
}

/// What recording an association found (`AccountStore.associate`).
public enum AccountAssociationOutcome: Sendable, Equatable {
    /// Stored: the account now has `keyCount` distinct keys within the window (this one included);
    /// `moved`: the key was associated with another account before (that account no longer counts it).
    case recorded(keyCount: Int, moved: Bool)
    /// The key is not registered (removed meanwhile): nothing stored.
    case keyGone
    /// The memory store holds `maxAssociations` live associations: nothing stored.
    case capacity(maxAssociations: Int)
}

/// The store's side of keys per account.
public protocol AccountStore: AnyObject, Sendable {
    /// Associates the key with the account whose SHA-256 is `digest` (32 bytes) at `nowMillis`,
    /// drops the account's associations older than `windowMillis`, and stores the account's
    /// distinct key count with the key (what the gate reads with the key record). A key associated
    /// with another account before moves (the old account stops counting it). Durable as the
    /// store's other state (journaled with a data directory; Redis).
    func associate(
        _ id: KeyID, account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<AccountAssociationOutcome, StoreError>) -> Void)

    /// The account's distinct keys within the window now (explain: exact, not the count stored
    /// with a key).
    func accountKeyCount(
        account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)
}

/// The account id an upstream may send: 1 to 128 bytes of visible ASCII (0x21…0x7E). Anything else
/// is ignored (and counted by the gateway).
public enum AccountHeader {
    public static let maxLength = 128

    public static func isValid(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy { $0 >= 0x21 && $0 <= 0x7E }
    }
}
