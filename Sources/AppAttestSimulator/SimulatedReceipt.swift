import AppAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// The fields of an App Attest receipt as Apple writes them, to be signed by a `TestCA`'s receipt
/// chain (`TestCA.issueReceipt`). Two shapes, both taken from real receipts
/// (Tests/AppAttestTests/Vectors/receipts-veehaitch-devicecheck-appattest.json):
///
/// - `ATTEST` (inside an attestation): fields 2, 3, 4, 5, 6, 7, 12, 21 in that order; field 4 the
///   clientDataHash; expiration = creation + 90 days.
/// - `RECEIPT` (what Apple's data service returns for a receipt, `refreshed`): fields 17, 6, 2, 3, 4,
///   5, 7, 12, 19, 21; the same app id, certificate, token and environment; field 4 the previous one
///   read as UTF-8 with replacement characters (Apple's garbling, byte for byte); not-before =
///   creation + 1 day, expiration = creation + 90 days; the risk metric as decimal text.
///
/// Times are RFC 3339 in UTC with milliseconds, trailing zeros trimmed (`…40.46Z`), as Apple writes
/// them. Every field has version 1.
///
/// For tests, benchmarks and the simulator only (a later local stand-in for Apple's data service
/// answers with `refreshed` receipts).
public struct ReceiptContents: Sendable, Equatable {
    public struct Field: Sendable, Equatable {
        public var type: Int
        public var value: [UInt8]

        public init(type: Int, value: [UInt8]) {
            self.type = type
            self.value = value
        }
    }

    public var appID: String
    /// Field 3: the credential certificate (DER).
    public var attestedCertificate: [UInt8]
    /// Field 4.
    public var clientHash: [UInt8]
    /// Field 5: opaque text (Apple's is 88 base64 characters); kept across refreshes.
    public var token: String
    /// Field 6: `ATTEST` or `RECEIPT` (any text, for negative tests).
    public var type: String
    /// Field 7: `sandbox` or `production`; nil leaves it out.
    public var environment: String?
    public var creationTime: Date
    /// Field 17 (`RECEIPT`).
    public var riskMetric: Int64?
    /// Field 19 (`RECEIPT`).
    public var notBefore: Date?
    /// Field 21.
    public var expirationTime: Date?
    /// Fields appended after Apple's (unknown types a verifier keeps and ignores, or duplicates).
    public var extraFields: [Field]
    /// Fields left out (by type), for negative tests.
    public var omittedFields: Set<Int>
    /// Raw text for fields 12, 19 or 21 instead of the formatted times (malformed times).
    public var timeTextOverrides: [Int: String]

    public init(
        appID: String, attestedCertificate: [UInt8], clientHash: [UInt8], token: String, type: String, environment: String?,
        creationTime: Date, riskMetric: Int64? = nil, notBefore: Date? = nil, expirationTime: Date?,
        extraFields: [Field] = [], omittedFields: Set<Int> = [], timeTextOverrides: [Int: String] = [:]
    ) {
        self.appID = appID
        self.attestedCertificate = attestedCertificate
        self.clientHash = clientHash
        self.token = token
        self.type = type
        self.environment = environment
        self.creationTime = creationTime
        self.riskMetric = riskMetric
        self.notBefore = notBefore
        self.expirationTime = expirationTime
        self.extraFields = extraFields
        self.omittedFields = omittedFields
        self.timeTextOverrides = timeTextOverrides
    }

    static let day: TimeInterval = 86_400

    /// The contents of a parsed receipt (one a gateway sends to Apple's data service, to be answered
    /// with `refreshed`): the documented fields as they are, any other field kept in `extraFields`.
    /// A time keeps its instant; re-encoding writes it in Apple's form.
    public init(_ receipt: AppAttestReceipt) {
        func date(_ t: ReceiptTime?) -> Date? { t.map { Date(timeIntervalSince1970: Double($0.millis) / 1000) } }
        let documented = AppAttestReceipt.FieldType.documented
        self.init(
            appID: String(decoding: receipt.appID, as: UTF8.self), attestedCertificate: receipt.attestedCertificate,
            clientHash: receipt.clientHash ?? [], token: receipt.token ?? "", type: receipt.type, environment: receipt.environment,
            creationTime: date(receipt.creationTime)!, riskMetric: receipt.riskMetric, notBefore: date(receipt.notBefore),
            expirationTime: date(receipt.expirationTime),
            extraFields: receipt.fields.filter { !documented.contains($0.type) }.map { Field(type: $0.type, value: $0.value) })
        if receipt.clientHash == nil { omittedFields.insert(4) }
        if receipt.token == nil { omittedFields.insert(5) }
    }

    /// The receipt App Attest puts in an attestation made at `instant`.
    public static func attest(
        appID: AppID, certificate: [UInt8], clientDataHash: [UInt8], environment: AttestEnvironment, at instant: Date,
        token: String? = nil
    ) -> ReceiptContents {
        ReceiptContents(
            appID: appID.description, attestedCertificate: certificate, clientHash: clientDataHash,
            token: token ?? Base64.encode(SecureRandom.bytes(66)), type: AppAttestReceipt.Kind.attest.rawValue,
            environment: environmentName(environment), creationTime: instant, expirationTime: instant.addingTimeInterval(90 * day))
    }

    /// What Apple's data service answers for this receipt at `instant`: a `RECEIPT` with `riskMetric`.
    public func refreshed(riskMetric: Int64, at instant: Date) -> ReceiptContents {
        ReceiptContents(
            appID: appID, attestedCertificate: attestedCertificate, clientHash: Self.garbled(clientHash), token: token,
            type: AppAttestReceipt.Kind.receipt.rawValue, environment: environment, creationTime: instant, riskMetric: riskMetric,
            notBefore: instant.addingTimeInterval(Self.day), expirationTime: instant.addingTimeInterval(90 * Self.day))
    }

    /// `sandbox` for development keys, `production` for production ones (field 7).
    public static func environmentName(_ e: AttestEnvironment) -> String { e == .development ? "sandbox" : "production" }

    /// Field 4 as Apple's data service returns it: the bytes read as UTF-8 (each invalid sequence
    /// becoming U+FFFD) and written back.
    public static func garbled(_ bytes: [UInt8]) -> [UInt8] { Array(String(decoding: bytes, as: UTF8.self).utf8) }

    /// Apple's time text: UTC, milliseconds (the nearest) with trailing zeros trimmed, no fraction on
    /// a whole second.
    public static func timeText(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var seconds = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        var text =
            "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))"
        var fraction = pad(Int32(millis % 1000), 3)
        while fraction.hasSuffix("0") { fraction.removeLast() }
        if !fraction.isEmpty { text += "." + fraction }
        return text + "Z"
    }

    /// The signed payload: `SET { SEQUENCE { INTEGER type, INTEGER 1, OCTET STRING value } … }` in
    /// Apple's order for the type.
    public var payload: [UInt8] {
        var values: [Int: [UInt8]] = [
            2: Array(appID.utf8), 3: attestedCertificate, 4: clientHash, 5: Array(token.utf8), 6: Array(type.utf8),
            12: Array((timeTextOverrides[12] ?? Self.timeText(creationTime)).utf8),
        ]
        if let environment { values[7] = Array(environment.utf8) }
        if let riskMetric { values[17] = Array(String(riskMetric).utf8) }
        if let t = timeTextOverrides[19] ?? notBefore.map(Self.timeText) { values[19] = Array(t.utf8) }
        if let t = timeTextOverrides[21] ?? expirationTime.map(Self.timeText) { values[21] = Array(t.utf8) }
        let order =
            type == AppAttestReceipt.Kind.receipt.rawValue ? [17, 6, 2, 3, 4, 5, 7, 12, 19, 21] : [2, 3, 4, 5, 6, 7, 12, 17, 19, 21]
        var fields: [Field] = order.compactMap { t in values[t].map { Field(type: t, value: $0) } }
        fields.removeAll { omittedFields.contains($0.type) }
        fields += extraFields
        typealias DER = CertificateBuilder.DER
        let items = fields.map { DER.sequence([DER.integer(UInt64($0.type)), DER.integer(1), DER.octetString($0.value)]) }
        return DER.element(tag: 0x31, items.flatMap { $0 })
    }
}

extension TestCA {
    /// Signs `contents` into a CMS SignedData with the receipt chain, as Apple signs receipts: the
    /// receipt-signing certificate, the intermediate and the root included, SHA-256, no signed
    /// attributes; a `RECEIPT` in DER (as Apple's data service answers), anything else in BER with
    /// indefinite lengths (as attestations carry `ATTEST` receipts). For tests, benchmarks and the
    /// simulator only.
    public func issueReceipt(_ contents: ReceiptContents) throws(CMSSigner.Error) -> [UInt8] {
        try issueReceipt(payload: contents.payload, encoding: contents.type == AppAttestReceipt.Kind.receipt.rawValue ? .der : .ber)
    }

    /// Any payload signed by the receipt chain (malformed payloads for negative tests).
    public func issueReceipt(payload: [UInt8], encoding: CMSSigner.Encoding = .ber) throws(CMSSigner.Error) -> [UInt8] {
        try CMSSigner.sign(
            payload, certificate: receiptSigner, key: receiptSignerKey, chain: [receiptIntermediate, receiptRoot], encoding: encoding)
    }
}
