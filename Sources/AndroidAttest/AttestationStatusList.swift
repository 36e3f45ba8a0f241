import Foundation
import GatewayWire

/// Google's attestation status list (https://android.googleapis.com/attestation/status), which
/// verifiers fetch and cache: `{"entries": {"<serial>": {"status": "REVOKED"|"SUSPENDED",
/// "reason": "KEY_COMPROMISE"|…}, …}}`. Fetching and caching it is the caller's job; this is the
/// parsed list and the lookup.
///
/// Serials are keyed in lowercase hex without leading zeros (what Google's verifier compares,
/// `BigInteger.toString(16)`), but the published list also holds older 64-bit serials written in
/// decimal (19–20 digits, every one below 2^64): a certificate is listed when either spelling of
/// its serial is a key. Any listed certificate fails the chain with `revoked`, whatever its status
/// (a suspended batch key is not trusted while suspended).
public struct AttestationStatusList: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public let status: String
        public let reason: String?

        public init(status: String, reason: String?) {
            self.status = status
            self.reason = reason
        }
    }

    /// Keys normalised: lowercase, leading zeros dropped.
    public let entries: [String: Entry]

    /// The real list is 50 KiB (2024); this bounds what a corrupted download can cost.
    public static let maxSize = 16 << 20

    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let reason: String
        public var description: String { "attestation status list: \(reason)" }
    }

    public init(entries: [String: Entry]) {
        var out: [String: Entry] = [:]
        for (k, v) in entries { out[Self.normalise(k)] = v }
        self.entries = out
    }

    /// Parses the JSON Google publishes. An entry without a string `status` is an error (the list
    /// would otherwise be trusted for less than it says); unknown fields are ignored.
    public static func parse(json: [UInt8]) throws(ParseError) -> AttestationStatusList {
        guard json.count <= maxSize else { throw ParseError(reason: "\(json.count) bytes exceeds \(maxSize)") }
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(json))
        } catch {
            throw ParseError(reason: "not JSON (\(error.localizedDescription))")
        }
        guard let root = object as? [String: Any], let raw = root["entries"] as? [String: Any] else {
            throw ParseError(reason: "no \"entries\" object")
        }
        var entries: [String: Entry] = [:]
        for (serial, value) in raw {
            guard !serial.isEmpty, serial.utf8.allSatisfy(Self.isHexDigit) else {
                throw ParseError(reason: "entry \"\(serial.prefix(40))\" is not a serial number")
            }
            guard let fields = value as? [String: Any], let status = fields["status"] as? String else {
                throw ParseError(reason: "entry \(serial) has no \"status\"")
            }
            entries[serial] = Entry(status: status, reason: fields["reason"] as? String)
        }
        return AttestationStatusList(entries: entries)
    }

    /// The entry listing a certificate of this serial, and the key it is listed under.
    public func entry(serial: (isNegative: Bool, magnitude: [UInt8])) -> (key: String, entry: Entry)? {
        guard !serial.isNegative else { return nil }
        for key in [Self.hex(serial.magnitude), Self.decimal(serial.magnitude)] {
            if let e = entries[key] { return (key, e) }
        }
        return nil
    }

    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)
    }

    /// A serial written in hex as the list keys it: lowercase, without leading zeros ("0" for zero).
    public static func normalise(_ key: String) -> String {
        let lower = key.lowercased()
        let trimmed = lower.drop { $0 == "0" }
        return trimmed.isEmpty ? "0" : String(trimmed)
    }

    /// The key a serial (its big-endian magnitude) is listed under: lowercase hex without leading
    /// zeros ("0" for zero).
    public static func hex(_ magnitude: [UInt8]) -> String { normalise(Hex.encode(magnitude)) }

    /// The decimal digits of a big-endian magnitude (schoolbook division by 10).
    static func decimal(_ magnitude: [UInt8]) -> String {
        var n = magnitude.drop { $0 == 0 }.map { UInt32($0) }
        guard !n.isEmpty else { return "0" }
        var digits: [UInt8] = []
        while !n.isEmpty {
            var remainder: UInt32 = 0
            for i in n.indices {
                let v = remainder << 8 | n[i]
                n[i] = v / 10
                remainder = v % 10
            }
            digits.append(UInt8(remainder) + 0x30)
            n = Array(n.drop { $0 == 0 })
        }
        return String(decoding: digits.reversed(), as: UTF8.self)
    }
}
