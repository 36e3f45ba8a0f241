import AppAttest
import ArgumentParser
import Foundation
import GatewayCrypto
import GatewayWire

/// A binary argument: standard or URL base64, padding optional, or `@FILE`: a file holding either
/// the raw bytes (a receipt saved as DER, an attestation as CBOR) or such base64 text, decided by
/// its content (`fileBytes`). Decoding happens in `run`, so that bad base64 is a `malformed` verdict
/// (exit 1), not a usage error.
struct B64Argument: ExpressibleByArgument {
    let text: String

    init?(argument: String) { text = argument }

    func decode(_ what: String) throws(AppAttestError) -> [UInt8] {
        if text.hasPrefix("@") {
            let path = String(text.dropFirst())
            guard let data = FileManager.default.contents(atPath: path) else {
                throw AppAttestError(.malformed, "\(what): cannot read file \(path)")
            }
            return try Self.fileBytes([UInt8](data), what)
        }
        return try Self.base64(text, what)
    }

    /// A file's bytes: base64 text when it holds nothing but base64 characters and whitespace (a
    /// DER or CBOR value never does: its first bytes are outside the alphabet, e.g. 0x30 0x82 or 0xA3),
    /// else the bytes themselves.
    static func fileBytes(_ bytes: [UInt8], _ what: String) throws(AppAttestError) -> [UInt8] {
        let isText = !bytes.isEmpty && bytes.allSatisfy { isBase64Character($0) || $0 == 0x20 || ($0 >= 0x09 && $0 <= 0x0D) }
        guard isText else { return bytes }
        return try base64(String(decoding: bytes.filter(isBase64Character), as: UTF8.self), what)
    }

    private static func isBase64Character(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    private static func base64(_ text: String, _ what: String) throws(AppAttestError) -> [UInt8] {
        do {
            return try Base64.decode(text)
        } catch {
            throw AppAttestError(.malformed, "\(what): \(error)")
        }
    }
}

extension B64Argument {
    /// clientDataHash from one of two mutually exclusive options (`validate` checked that exactly one
    /// is given): SHA256 of the raw bytes, or the hash itself as opaque bytes.
    static func clientDataHash(hashing raw: B64Argument?, _ rawFlag: String, given hash: B64Argument?)
        throws(AppAttestError) -> [UInt8]
    {
        if let raw { return SHA256.hash(try raw.decode(rawFlag)) }
        guard let hash else { throw AppAttestError(.malformed, "no clientDataHash given") }
        return try hash.decode("--client-data-hash")
    }
}

enum EnvironmentChoice: String, ExpressibleByArgument, CaseIterable {
    case development, production, any

    var environments: Set<AttestEnvironment> {
        switch self {
        case .development: [.development]
        case .production: [.production]
        case .any: [.development, .production]
        }
    }
}

/// One JSON object on stdout: `{"valid":true,…}` exit 0, or `{"valid":false,"reason":…,"detail":…}` exit 1.
enum Verdict {
    static func emit(_ result: Result<JSONObject, AppAttestError>) throws -> Never {
        try emit(result.mapError { Refusal(reason: $0.code.rawValue, detail: $0.detail) })
    }

    static func emit(_ result: Result<JSONObject, ReceiptError>) throws -> Never {
        try emit(result.mapError { Refusal(reason: $0.code.rawValue, detail: $0.detail) })
    }

    struct Refusal: Error {
        let reason: String
        let detail: String
    }

    static func emit(_ result: Result<JSONObject, Refusal>) throws -> Never {
        switch result {
        case .success(let body):
            var out = JSONObject()
            out.set("valid", true)
            out.merge(body)
            print(out.description)
            exit(0)
        case .failure(let e):
            var out = JSONObject()
            out.set("valid", false)
            out.set("reason", e.reason)
            out.set("detail", e.detail)
            print(out.description)
            exit(1)
        }
    }

    static func iso(_ epoch: Int64) -> String { Date(timeIntervalSince1970: TimeInterval(epoch)).formatted(.iso8601) }
}

struct VerifyAttestation: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-attestation",
        abstract: "Verify an App Attest attestation object offline (Apple's algorithm, every step).",
        discussion: """
            B64 values accept the standard and URL alphabets, padding optional, or @FILE: a file of the \
            raw bytes (CBOR, DER) or of such base64 text (line breaks allowed), told apart by its content.
            Prints one JSON object: {"valid":true,…} and exits 0, or {"valid":false,"reason":"<code>","detail":"…"} \
            and exits 1. Usage errors exit 2.
            """
    )

    @Option(name: .customLong("app-id"), help: ArgumentHelp("Allowed app id TEAMID.BUNDLEID (repeatable).", valueName: "TEAMID.BUNDLEID"))
    var appIDs: [String] = []

    @Option(name: .customLong("key-id"), help: ArgumentHelp("Key identifier reported by the app.", valueName: "B64"))
    var keyID: B64Argument

    @Option(help: ArgumentHelp("The attestation object.", valueName: "B64"))
    var attestation: B64Argument

    @Option(help: ArgumentHelp("The raw challenge bytes; clientDataHash = SHA256 of them.", valueName: "B64"))
    var challenge: B64Argument?

    @Option(name: .customLong("client-data-hash"), help: ArgumentHelp("The clientDataHash itself (any length).", valueName: "B64"))
    var clientDataHash: B64Argument?

    @Option(help: ArgumentHelp("Verification instant, ISO 8601 (default: now).", valueName: "ISO8601"))
    var at: String?

    @Option(help: "Allowed environment.")
    var environment: EnvironmentChoice = .any

    @Option(
        name: .customLong("root"),
        help: ArgumentHelp("Extra trusted root, PEM file (repeatable); Apple's root stays trusted.", valueName: "PEM-FILE"))
    var roots: [String] = []

    private var parsedAppIDs: [AppID] = []
    private var instant = Date()
    private var extraRoots: [X509Certificate] = []

    enum CodingKeys: String, CodingKey {
        case appIDs, keyID, attestation, challenge, clientDataHash, at, environment, roots
    }

    mutating func validate() throws {
        parsedAppIDs = try parseAppIDs(appIDs)
        guard (challenge == nil) != (clientDataHash == nil) else {
            throw ValidationError("give exactly one of --challenge and --client-data-hash")
        }
        if let at { instant = try parseInstant(at) }
        extraRoots = try loadRoots(roots)
    }

    func run() throws {
        let result = Result { () throws(AppAttestError) -> JSONObject in
            let attestationBytes = try attestation.decode("--attestation")
            let keyIDBytes = try keyID.decode("--key-id")
            let cdh = try B64Argument.clientDataHash(hashing: challenge, "--challenge", given: clientDataHash)
            let verifier = AttestationVerifier(
                policy: .init(appIDs: parsedAppIDs, environments: environment.environments), extraRoots: extraRoots)
            let v = try verifier.verify(attestation: attestationBytes, keyID: keyIDBytes, clientDataHash: cdh, at: instant)
            var out = JSONObject()
            out.set("keyId", Base64.encode(v.keyID))
            out.set("publicKey", Base64.encode(v.publicKey.x962))
            out.set("appId", v.appID.description)
            out.set("environment", v.environment.rawValue)
            out.set("counter", v.signCount)
            out.set("receipt", Base64.encode(v.receipt))
            out.set("certificateNotAfter", Verdict.iso(v.leafNotAfter))
            out.set("certificateSerial", v.leafSerialHex)
            if let c = v.validationCategory { out.set("validationCategory", c.name) }
            if let b = v.bundleVersion { out.set("bundleVersion", b) }
            return out
        }
        try Verdict.emit(result)
    }
}

struct VerifyAssertion: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-assertion",
        abstract: "Verify an App Attest assertion offline with a stored public key.",
        discussion: """
            B64 values accept the standard and URL alphabets, padding optional, or @FILE: a file of the \
            raw bytes (CBOR, DER) or of such base64 text (line breaks allowed), told apart by its content.
            The counter must be strictly greater than --previous-counter (default 0: Apple's rule for a \
            key's first assertion). Output and exit codes as for verify-attestation.
            """
    )

    @Option(name: .customLong("app-id"), help: ArgumentHelp("Allowed app id (repeatable).", valueName: "TEAMID.BUNDLEID"))
    var appIDs: [String] = []

    @Option(
        name: .customLong("public-key"), help: ArgumentHelp("Stored public key, uncompressed X9.62 point (65 bytes).", valueName: "B64"))
    var publicKey: B64Argument

    @Option(help: ArgumentHelp("The assertion.", valueName: "B64"))
    var assertion: B64Argument

    @Option(name: .customLong("client-data"), help: ArgumentHelp("The client data; clientDataHash = SHA256 of it.", valueName: "B64"))
    var clientData: B64Argument?

    @Option(name: .customLong("client-data-hash"), help: ArgumentHelp("The clientDataHash itself.", valueName: "B64"))
    var clientDataHash: B64Argument?

    @Option(name: .customLong("previous-counter"), help: ArgumentHelp("The stored counter.", valueName: "N"))
    var previousCounter: UInt32 = 0

    private var parsedAppIDs: [AppID] = []

    enum CodingKeys: String, CodingKey {
        case appIDs, publicKey, assertion, clientData, clientDataHash, previousCounter
    }

    mutating func validate() throws {
        parsedAppIDs = try parseAppIDs(appIDs)
        guard (clientData == nil) != (clientDataHash == nil) else {
            throw ValidationError("give exactly one of --client-data and --client-data-hash")
        }
    }

    func run() throws {
        let result = Result { () throws(AppAttestError) -> JSONObject in
            let assertionBytes = try assertion.decode("--assertion")
            let point = try publicKey.decode("--public-key")
            let key: P256PublicKey
            do throws(P256PublicKey.Error) {
                key = try P256PublicKey(x962: point)
            } catch {
                switch error {
                case .invalidPoint(let why):
                    throw AppAttestError(point.count == 65 && point.first == 4 ? .invalidPublicKey : .malformed, "--public-key: \(why)")
                }
            }
            let cdh = try B64Argument.clientDataHash(hashing: clientData, "--client-data", given: clientDataHash)
            let v = try AssertionVerifier(appIDs: parsedAppIDs).verify(
                assertion: assertionBytes, publicKey: key, clientDataHash: cdh, previousCounter: previousCounter)
            var out = JSONObject()
            out.set("counter", v.signCount)
            out.set("appId", v.appID.description)
            if let c = v.validationCategory { out.set("validationCategory", c.name) }
            if let b = v.bundleVersion { out.set("bundleVersion", b) }
            return out
        }
        try Verdict.emit(result)
    }
}

struct VerifyReceipt: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-receipt",
        abstract: "Verify an App Attest receipt offline (CMS signature, chain to Apple Root CA - G3, fields).",
        discussion: """
            The receipt is the DER bytes of attStmt.receipt, or a RECEIPT returned by Apple's App Attest \
            data service. B64 values accept the standard and URL alphabets, padding optional, or @FILE: \
            a file of the raw bytes (DER, CBOR) or of such base64 text (line breaks allowed), told apart \
            by its content. With --attestation the receipt must belong to that attestation's credential certificate \
            (field 3, byte for byte); with --client-data-hash an ATTEST receipt's field 4 must be it. \
            Prints one JSON object: {"valid":true,"type",…,"riskMetric",…} and exits 0, or \
            {"valid":false,"reason":"<code>","detail":"…"} and exits 1. Usage errors exit 2.
            """
    )

    @Option(help: ArgumentHelp("The receipt (CMS SignedData, DER or BER).", valueName: "B64"))
    var receipt: B64Argument

    @Option(name: .customLong("app-id"), help: ArgumentHelp("The app id field 2 must hold.", valueName: "TEAMID.BUNDLEID"))
    var appID: String?

    @Option(help: ArgumentHelp("The attestation object the receipt must belong to.", valueName: "B64"))
    var attestation: B64Argument?

    @Option(
        name: .customLong("client-data-hash"), help: ArgumentHelp("The attestation's clientDataHash (ATTEST receipts).", valueName: "B64"))
    var clientDataHash: B64Argument?

    @Option(help: ArgumentHelp("Verification instant, ISO 8601 (default: now).", valueName: "ISO8601"))
    var at: String?

    @Option(
        name: .customLong("root"),
        help: ArgumentHelp("Extra trusted receipt root, PEM file (repeatable); Apple Root CA - G3 stays trusted.", valueName: "PEM-FILE"))
    var roots: [String] = []

    private var parsedAppID: AppID?
    private var instant = Date()
    private var extraRoots: [X509Certificate] = []

    enum CodingKeys: String, CodingKey {
        case receipt, appID, attestation, clientDataHash, at, roots
    }

    mutating func validate() throws {
        if let appID { parsedAppID = try parseAppIDs([appID])[0] }
        if let at { instant = try parseInstant(at) }
        extraRoots = try loadRoots(roots)
    }

    func run() throws {
        let result = Result { () throws(ReceiptError) -> JSONObject in
            let bytes: [UInt8]
            do throws(AppAttestError) {
                bytes = try receipt.decode("--receipt")
            } catch {
                throw ReceiptError(.malformed, error.detail)
            }
            var expect = ReceiptVerifier.Expectation(appID: parsedAppID)
            if let attestation {
                do throws(AppAttestError) {
                    let object = try AttestationObject.parse(try attestation.decode("--attestation"))
                    expect.attestedKey = .certificate(object.x5c[0])
                } catch {
                    throw ReceiptError(.malformed, "--attestation: \(error.detail)")
                }
            }
            if let clientDataHash {
                do throws(AppAttestError) {
                    expect.clientDataHash = try clientDataHash.decode("--client-data-hash")
                } catch {
                    throw ReceiptError(.malformed, error.detail)
                }
            }
            let v = try ReceiptVerifier(extraRoots: extraRoots).verify(bytes, expecting: expect, at: instant)
            return Self.describe(v)
        }
        try Verdict.emit(result)
    }

    /// The decoded fields: Apple's documented ones by name, any other under `otherFields`.
    static func describe(_ v: VerifiedReceipt) -> JSONObject {
        let r = v.receipt
        var out = JSONObject()
        out.set("type", r.type)
        out.set("appId", String(decoding: r.appID, as: UTF8.self))
        out.set("environment", r.environment)
        out.set("creationTime", r.creationTime.text)
        out.set("notBefore", r.notBefore?.text)
        out.set("expirationTime", r.expirationTime?.text)
        out.set("riskMetric", r.riskMetric.map { JSONObject.Value.int($0) } ?? .null)
        out.set("clientHash", r.clientHash.map { Base64.encode($0) })
        out.set("token", r.token)
        if let cert = try? X509Certificate(der: r.attestedCertificate), let key = cert.p256PublicKey() {
            out.set("keyId", Base64.encode(SHA256.hash(key.x962)))
        }
        out.set("attestedCertificate", Base64.encode(r.attestedCertificate))
        out.set("signer", v.chain.first?.subject)
        out.set("chain", .array(v.chain.map { .string($0.subject) }))
        out.set(
            "otherFields",
            .array(
                r.fields.filter { !AppAttestReceipt.FieldType.documented.contains($0.type) }.map { f in
                    var o = JSONObject()
                    o.set("type", f.type)
                    o.set("version", f.version)
                    o.set("value", Base64.encode(f.value))
                    return .object(o)
                }))
        return out
    }
}

/// `--app-id` values: at least one, each a non-empty id without white space.
func parseAppIDs(_ values: [String]) throws -> [AppID] {
    guard !values.isEmpty else { throw ValidationError("at least one --app-id is required") }
    return try values.map { (s: String) throws -> AppID in
        do { return try AppID(s) } catch { throw ValidationError("--app-id: \(error)") }
    }
}

func parseInstant(_ text: String) throws -> Date {
    let plain = ISO8601DateFormatter()
    let fractional = ISO8601DateFormatter()
    fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    guard let d = plain.date(from: text) ?? fractional.date(from: text) else {
        throw ValidationError("--at \"\(text)\" is not an ISO 8601 instant such as 2024-04-18T00:00:00Z")
    }
    return d
}

func loadRoots(_ paths: [String]) throws -> [X509Certificate] {
    do {
        return try X509Certificate.loadPEMFiles(paths)
    } catch {
        throw ValidationError("--root \(error)")
    }
}
