// Compiled only where the Security framework exists (Apple platforms); not compiled on Linux:
// kept to the three standard SecItem calls.
#if canImport(Security)
    import Foundation
    import Security

    /// Key ids in the Keychain: one generic-password item per account (service `service`, account
    /// `KeyIDStore.slotName(account)`), readable after the first unlock and never migrated to another
    /// device (`…ThisDeviceOnly`): an App Attest key lives in this device's Secure Enclave, so a key id
    /// restored onto a new device would only name a key that is not there.
    public struct KeychainKeyIDStore: KeyIDStore {
        /// `OSStatus` of a failed Keychain call.
        public struct Failure: Error, Sendable, Equatable {
            public let status: OSStatus
        }

        public let service: String

        public init(service: String = "attest-gateway.app-attest-key") {
            self.service = service
        }

        public func load(account: String?) throws -> StoredAttestKey? {
            var query = itemQuery(account)
            query[kSecReturnData as String] = true
            query[kSecMatchLimit as String] = kSecMatchLimitOne
            var result: CFTypeRef?
            let status = SecItemCopyMatching(query as CFDictionary, &result)
            if status == errSecItemNotFound { return nil }
            guard status == errSecSuccess, let data = result as? Data else { throw Failure(status: status) }
            return try StoredAttestKey(encoded: data)
        }

        public func save(_ key: StoredAttestKey, account: String?) throws {
            let data = try key.encoded()
            let update = [kSecValueData as String: data] as [String: Any]
            let status = SecItemUpdate(itemQuery(account) as CFDictionary, update as CFDictionary)
            if status == errSecSuccess { return }
            guard status == errSecItemNotFound else { throw Failure(status: status) }
            var add = itemQuery(account)
            add[kSecValueData as String] = data
            add[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
            let added = SecItemAdd(add as CFDictionary, nil)
            guard added == errSecSuccess else { throw Failure(status: added) }
        }

        public func remove(account: String?) throws {
            let status = SecItemDelete(itemQuery(account) as CFDictionary)
            guard status == errSecSuccess || status == errSecItemNotFound else { throw Failure(status: status) }
        }

        private func itemQuery(_ account: String?) -> [String: Any] {
            [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: service,
                kSecAttrAccount as String: Self.slotName(account),
                // macOS: the iOS-style keychain (ignored on iOS).
                kSecUseDataProtectionKeychain as String: true,
            ]
        }
    }
#endif
