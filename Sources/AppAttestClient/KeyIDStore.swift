import Foundation

/// The key an account uses, as kept across launches: its id and whether the gateway registered it.
public struct StoredAttestKey: Codable, Sendable, Equatable {
    /// The key id `generateKey` returned (base64).
    public var keyID: String
    /// The gateway answered 201 to its registration.
    public var registered: Bool

    public init(keyID: String, registered: Bool) {
        self.keyID = keyID
        self.registered = registered
    }

    enum CodingKeys: String, CodingKey {
        case keyID = "keyId"
        case registered
    }

    /// `{"keyId":"…","registered":true}`.
    public func encoded() throws -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return try e.encode(self)
    }

    public init(encoded data: Data) throws {
        self = try JSONDecoder().decode(StoredAttestKey.self, from: data)
    }
}

/// Where the client keeps each account's key id across launches: the Keychain on Apple platforms
/// (`KeychainKeyIDStore`), a directory in tests and on Linux (`FileKeyIDStore`).
///
/// `account` is the signed-in account's identifier, or nil for an app without accounts: one key per
/// account, never shared across users. Calls come from the client's actor, one at a time per account.
public protocol KeyIDStore: Sendable {
    func load(account: String?) throws -> StoredAttestKey?
    func save(_ key: StoredAttestKey, account: String?) throws
    func remove(account: String?) throws
}

extension KeyIDStore {
    /// The name a store files an account under: `app` without accounts, `account:<id>` otherwise,
    /// so that no account id can collide with the app's own key.
    public static func slotName(_ account: String?) -> String { account.map { "account:" + $0 } ?? "app" }
}

/// One JSON file per account in a directory (mode 0600), written atomically. For tests and for
/// Linux callers; an app uses the Keychain.
public struct FileKeyIDStore: KeyIDStore {
    public let directory: URL

    public init(directory: URL) {
        self.directory = directory
    }

    /// The file of an account: its slot name, hex-encoded (any account id is a valid file name).
    public func fileURL(account: String?) -> URL {
        directory.appendingPathComponent("app-attest-key-" + Digest.hex(Array(Self.slotName(account).utf8)) + ".json")
    }

    public func load(account: String?) throws -> StoredAttestKey? {
        let url = fileURL(account: account)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try StoredAttestKey(encoded: Data(contentsOf: url))
    }

    public func save(_ key: StoredAttestKey, account: String?) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = fileURL(account: account)
        try key.encoded().write(to: url, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
    }

    public func remove(account: String?) throws {
        let url = fileURL(account: account)
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        try FileManager.default.removeItem(at: url)
    }
}

/// Keys in memory only: a new key (and registration) at every launch. For tests and previews.
public final class InMemoryKeyIDStore: KeyIDStore, @unchecked Sendable {
    private let lock = NSLock()
    private var keys: [String: StoredAttestKey] = [:]

    public init() {}

    public func load(account: String?) throws -> StoredAttestKey? {
        lock.lock()
        defer { lock.unlock() }
        return keys[Self.slotName(account)]
    }

    public func save(_ key: StoredAttestKey, account: String?) throws {
        lock.lock()
        defer { lock.unlock() }
        keys[Self.slotName(account)] = key
    }

    public func remove(account: String?) throws {
        lock.lock()
        defer { lock.unlock() }
        keys[Self.slotName(account)] = nil
    }
}
