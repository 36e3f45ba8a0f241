import Foundation
import GatewayCrypto
import GatewayWire

/// A device without App Attest (`DCAppAttestService.isSupported` false) that still has DeviceCheck:
/// it hands out `DCDevice`-style tokens (ephemeral, a new one per request) that the Apple stand-in
/// (`attest-sim apple`) accepts and maps back to the device, so that its two bits belong to the
/// device across tokens, as Apple's do.
///
/// A token is `SDC1` ‖ device id (16 bytes) ‖ issued at (ms, 8 bytes, big-endian) ‖ nonce (16
/// bytes) ‖ an ECDSA signature (DER) of all of that by the `TestCA`'s receipt signer key. Real
/// tokens are opaque to everyone but Apple; these are opaque to everyone but the stand-in. For
/// tests and the simulator only.
public struct SimulatedDeviceCheck: Sendable {
    public let ca: TestCA
    /// Who the device is to the stand-in (its bits are kept under it).
    public let deviceID: [UInt8]

    public init(ca: TestCA, deviceID: [UInt8]? = nil) {
        self.ca = ca
        self.deviceID = deviceID ?? (0..<16).map { _ in UInt8.random(in: 0...255) }
    }

    public static let magic: [UInt8] = Array("SDC1".utf8)
    static let signedLength = 4 + 16 + 8 + 16

    /// A new token, as `DCDevice.current.generateToken` gives one.
    public func token(at instant: Date = Date()) -> [UInt8] {
        var bytes = Self.magic + deviceID
        let millis = UInt64(max(0, instant.timeIntervalSince1970 * 1000))
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: millis >> UInt64(shift))) }
        bytes += (0..<16).map { _ in UInt8.random(in: 0...255) }
        return bytes + ca.receiptSignerKey.signature(for: bytes)
    }

    /// The token as `X-Apple-Device-Token` carries it (standard base64).
    public func tokenHeader(at instant: Date = Date()) -> String { Base64.encode(token(at: instant)) }

    /// What a token says, when `ca` signed it: the device and when it was issued.
    public static func read(_ token: [UInt8], ca: TestCA) -> (deviceID: [UInt8], issuedAtMillis: Int64)? {
        guard token.count > signedLength, Array(token.prefix(4)) == magic, let key = ca.receiptSignerKey.p256PublicKey else { return nil }
        let signed = Array(token[0..<signedLength])
        guard key.isValidSignature(Array(token[signedLength...]), for: signed) else { return nil }
        let millis = token[20..<28].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return (Array(token[4..<20]), Int64(clamping: millis))
    }
}
