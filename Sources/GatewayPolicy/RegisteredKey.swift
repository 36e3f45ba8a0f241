import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

public struct RegisteredKey: Sendable {
    public let keyID: KeyID
    public let environment: KeyEnvironment
    public let appID: String
    /// The key had been registered before; its counter was kept.
    public let existing: Bool
    /// The attestation's receipt as verified (`apps[].receipts: verify`); nil when the app ignores
    /// receipts. The store keeps the receipt's bytes: its dates and fields can be read again from
    /// there (`AppAttestReceipt.parseStored`).
    public let receipt: AppAttestReceipt?
    /// macOS 27's key access-control property of the credential certificate, when present. Not in
    /// the key record: the stored receipt's field 3 is the credential certificate that carries it.
    public let keyAccessControl: KeyAccessControl?
}
