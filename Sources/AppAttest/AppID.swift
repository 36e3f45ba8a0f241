import GatewayCrypto

/// An App Attest app identity: `TEAMID.BUNDLEID`, whose SHA-256 is the authenticator data's rpIdHash.
public struct AppID: Hashable, Sendable, CustomStringConvertible {
    public let teamID: String
    public let bundleID: String
    /// SHA256(UTF-8 of "teamID.bundleID"), computed once.
    public let rpIDHash: [UInt8]

    public var description: String { teamID.isEmpty ? bundleID : "\(teamID).\(bundleID)" }

    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    public init(teamID: String, bundleID: String) throws(ParseError) {
        guard !teamID.isEmpty, teamID.utf8.allSatisfy({ Self.isAlnum($0) }) else {
            throw ParseError(description: "team id \"\(teamID)\" must be letters and digits (e.g. ABCDE12345)")
        }
        guard !bundleID.isEmpty, !bundleID.hasPrefix("."), !bundleID.hasSuffix("."),
            bundleID.utf8.allSatisfy({ Self.isAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
        else {
            throw ParseError(description: "bundle id \"\(bundleID)\" must be letters, digits, '.', '-' or '_' (e.g. com.example.shop)")
        }
        self.teamID = teamID
        self.bundleID = bundleID
        self.rpIDHash = SHA256.hash("\(teamID).\(bundleID)")
    }

    /// Takes an app id as configured. Apple's form is `TEAMID.BUNDLEID` (the team id is everything
    /// before the first dot), but any non-empty string is hashed as given: the rpIdHash comparison is
    /// the check, and a wrong id must fail it with `app_id_mismatch`, not be refused as a usage error.
    /// Use `init(teamID:bundleID:)` where the form must be enforced.
    public init(_ text: String) throws(ParseError) {
        guard !text.isEmpty else { throw ParseError(description: "app id is empty (expected TEAMID.BUNDLEID)") }
        guard !text.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 }) else {
            throw ParseError(description: "app id \"\(text)\" contains white space or control characters")
        }
        if let dot = text.firstIndex(of: ".") {
            teamID = String(text[..<dot])
            bundleID = String(text[text.index(after: dot)...])
        } else {
            teamID = ""
            bundleID = text
        }
        rpIDHash = SHA256.hash(text)
    }

    /// True when the id has Apple's `TEAMID.BUNDLEID` form.
    public var isWellFormed: Bool { (try? AppID(teamID: teamID, bundleID: bundleID)) != nil }

    private static func isAlnum(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)
    }

    public static func == (a: AppID, b: AppID) -> Bool { a.teamID == b.teamID && a.bundleID == b.bundleID }
    public func hash(into h: inout Hasher) { h.combine(teamID); h.combine(bundleID) }
}

/// The App Attest environment a key was made in, told by the aaguid of its attestation.
public enum AttestEnvironment: String, CaseIterable, Sendable, Codable {
    case development
    case production

    /// ASCII "appattestdevelop".
    public static let developmentAAGUID: [UInt8] = Array("appattestdevelop".utf8)
    /// ASCII "appattest" followed by seven zero bytes.
    public static let productionAAGUID: [UInt8] = Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)

    public var aaguid: [UInt8] { self == .development ? Self.developmentAAGUID : Self.productionAAGUID }

    public init?(aaguid: [UInt8]) {
        if aaguid == Self.developmentAAGUID {
            self = .development
        } else if aaguid == Self.productionAAGUID {
            self = .production
        } else {
            return nil
        }
    }
}
