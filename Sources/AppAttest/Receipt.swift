import GatewayCrypto
import GatewayWire

/// The payload of an App Attest receipt ("Assessing fraud risk"): a SET of
/// `SEQUENCE { INTEGER type, INTEGER version, OCTET STRING value }`, signed by Apple in a CMS
/// SignedData. Parsed is not verified: `ReceiptVerifier` checks the signature and the fields.
///
/// Every field is kept, in order, unknown types included (`fields`); the ones Apple documents are
/// decoded. A documented field given twice, a time that is not RFC 3339, or a risk metric that is
/// not a decimal number is `malformed`.
public struct AppAttestReceipt: Sendable {
    /// Field types Apple documents.
    public enum FieldType {
        public static let appID = 2
        public static let attestedCertificate = 3
        public static let clientHash = 4
        public static let token = 5
        public static let receiptType = 6
        public static let environment = 7
        public static let creationTime = 12
        public static let riskMetric = 17
        public static let notBefore = 19
        public static let expirationTime = 21

        /// Every type above.
        public static let documented: Set<Int> = [2, 3, 4, 5, 6, 7, 12, 17, 19, 21]
    }

    /// Receipt types: `ATTEST` inside an attestation, `RECEIPT` from Apple's data service.
    public enum Kind: String, Sendable {
        case attest = "ATTEST"
        case receipt = "RECEIPT"
    }

    public struct Field: Sendable, Equatable {
        public let type: Int
        public let version: Int
        public let value: [UInt8]
    }

    /// Every field as found, in order.
    public let fields: [Field]
    /// 2: `TEAMID.bundle.id` (bytes as sent; compared byte for byte).
    public let appID: [UInt8]
    /// 3: the attested credential certificate, DER.
    public let attestedCertificate: [UInt8]
    /// 4: the client hash. In an `ATTEST` receipt the attestation's clientDataHash; in `RECEIPT`s
    /// Apple returns it garbled (decoded as UTF-8 with replacement characters), so it is never compared there.
    public let clientHash: [UInt8]?
    /// 5: an opaque token (text).
    public let token: String?
    /// 6: `ATTEST` or `RECEIPT` (kept as sent; `kind` is nil for any other text).
    public let type: String
    /// 7: `sandbox` (development keys) or `production`, when present.
    public let environment: String?
    /// 12.
    public let creationTime: ReceiptTime
    /// 17: roughly how many keys this device attested for the app in the last 30 days (`RECEIPT` only).
    public let riskMetric: Int64?
    /// 19: the earliest instant Apple's data service refreshes this receipt (`RECEIPT` only).
    public let notBefore: ReceiptTime?
    /// 21: after this instant the receipt can no longer be refreshed.
    public let expirationTime: ReceiptTime?

    public var kind: Kind? { Kind(rawValue: type) }

    /// Fields larger than this are refused (the largest real one, the certificate, is under 1.5 KiB).
    public static let maxFieldBytes = 16 * 1024
    /// More fields than this are refused (real receipts carry 8 to 10).
    public static let maxFields = 256

    /// Parses the signed payload (the CMS eContent).
    public static func parse(payload: [UInt8]) throws(ReceiptError) -> AppAttestReceipt {
        var fields: [Field] = []
        do {
            var outer = DERReader(payload)
            let set = try outer.read(tag: 0x31)
            try outer.finish()
            var items = DERReader(set.contents)
            while !items.isAtEnd {
                guard fields.count < maxFields else { throw ReceiptError(.malformed, "more than \(maxFields) fields") }
                let seq = try items.read(tag: DERReader.Tag.sequence)
                var parts = DERReader(seq.contents)
                let type = try Self.integer(try parts.read(tag: 0x02), what: "field type")
                let version = try Self.integer(try parts.read(tag: 0x02), what: "field version")
                let value = try parts.read(tag: DERReader.Tag.octetString)
                try parts.finish()
                guard value.contents.count <= maxFieldBytes else {
                    throw ReceiptError(.malformed, "field \(type) holds \(value.contents.count) bytes, more than \(maxFieldBytes)")
                }
                fields.append(Field(type: type, version: version, value: Array(value.contents)))
            }
        } catch let e as ReceiptError {
            throw e
        } catch {
            throw ReceiptError(.malformed, "payload is not a SET of SEQUENCE {INTEGER, INTEGER, OCTET STRING}: \(error)")
        }
        return try AppAttestReceipt(fields: fields)
    }

    /// Parses a receipt's payload without verifying its signature: for a receipt that was verified
    /// when it was stored (its dates and metric are read again later), never to accept a new one.
    public static func parseStored(_ receipt: [UInt8]) throws(ReceiptError) -> AppAttestReceipt {
        let content: [UInt8]
        do {
            content = try CMSSignedDataVerifier.unverifiedContent(receipt)
        } catch {
            throw ReceiptError(.malformed, "receipt: \(error)")
        }
        return try parse(payload: content)
    }

    init(fields: [Field]) throws(ReceiptError) {
        var byType: [Int: [UInt8]] = [:]
        for f in fields where FieldType.documented.contains(f.type) {
            guard byType[f.type] == nil else { throw ReceiptError(.malformed, "field \(f.type) appears twice") }
            byType[f.type] = f.value
        }
        func required(_ type: Int, _ name: String) throws(ReceiptError) -> [UInt8] {
            guard let v = byType[type] else { throw ReceiptError(.malformed, "field \(type) (\(name)) is missing") }
            return v
        }
        func text(_ type: Int, _ name: String) throws(ReceiptError) -> String? {
            guard let v = byType[type] else { return nil }
            let s = String(decoding: v, as: UTF8.self)
            guard Array(s.utf8) == v else {
                throw ReceiptError(.malformed, "field \(type) (\(name)) is not UTF-8 text")
            }
            return s
        }
        func time(_ type: Int, _ name: String) throws(ReceiptError) -> ReceiptTime? {
            guard let s = try text(type, name) else { return nil }
            guard let t = ReceiptTime(s) else {
                throw ReceiptError(.malformed, "field \(type) (\(name)) \"\(s.prefix(64))\" is not an RFC 3339 time")
            }
            return t
        }
        self.fields = fields
        appID = try required(FieldType.appID, "app id")
        attestedCertificate = try required(FieldType.attestedCertificate, "attested certificate")
        clientHash = byType[FieldType.clientHash]
        token = try text(FieldType.token, "token")
        guard let type = try text(FieldType.receiptType, "receipt type") else {
            throw ReceiptError(.malformed, "field 6 (receipt type) is missing")
        }
        self.type = type
        environment = try text(FieldType.environment, "environment")
        guard let created = try time(FieldType.creationTime, "creation time") else {
            throw ReceiptError(.malformed, "field 12 (creation time) is missing")
        }
        creationTime = created
        notBefore = try time(FieldType.notBefore, "not before")
        expirationTime = try time(FieldType.expirationTime, "expiration time")
        if let metric = try text(FieldType.riskMetric, "risk metric") {
            guard (1...19).contains(metric.utf8.count), metric.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let n = Int64(metric)
            else {
                throw ReceiptError(.malformed, "field 17 (risk metric) \"\(metric.prefix(32))\" is not a decimal number")
            }
            riskMetric = n
        } else {
            riskMetric = nil
        }
        if kind == .receipt, riskMetric == nil {
            throw ReceiptError(.malformed, "a RECEIPT-type receipt carries no risk metric (field 17)")
        }
    }

    /// A small non-negative INTEGER (field types and versions), in its minimal encoding.
    static func integer(_ el: DERReader.Element, what: String) throws(ReceiptError) -> Int {
        let b = el.contents
        guard !b.isEmpty, b.count <= 4 else { throw ReceiptError(.malformed, "\(what): INTEGER of \(b.count) bytes") }
        guard b.first! & 0x80 == 0 else { throw ReceiptError(.malformed, "\(what): negative INTEGER") }
        if b.count > 1 && b.first! == 0 && b[b.startIndex + 1] & 0x80 == 0 {
            throw ReceiptError(.malformed, "\(what): INTEGER not in its minimal encoding")
        }
        return b.reduce(0) { $0 << 8 | Int($1) }
    }
}

/// An RFC 3339 instant as App Attest receipts write it (`2020-11-27T22:41:40.46Z`: Apple trims the
/// milliseconds, so 0 to 3 fraction digits appear; up to 9 are accepted, an offset instead of `Z` too).
public struct ReceiptTime: Sendable, Equatable, Comparable, CustomStringConvertible {
    /// Unix milliseconds (a finer fraction is truncated).
    public let millis: Int64
    /// The text as the receipt holds it.
    public let text: String

    public var description: String { text }

    public init?(_ text: String) {
        let b = Array(text.utf8)
        func digits(_ at: Int, _ n: Int) -> Int? {
            guard at + n <= b.count else { return nil }
            var v = 0
            for i in at..<at + n {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        guard b.count >= 20, let year = digits(0, 4), b[4] == UInt8(ascii: "-"), let month = digits(5, 2),
            b[7] == UInt8(ascii: "-"), let day = digits(8, 2), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t"),
            let hour = digits(11, 2), b[13] == UInt8(ascii: ":"), let minute = digits(14, 2), b[16] == UInt8(ascii: ":"),
            let second = digits(17, 2)
        else { return nil }
        guard (1...12).contains(month), (1...Self.daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60,
            second < 61
        else { return nil }
        var i = 19
        var fractionMillis = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var n = 0
            while i < b.count, b[i] >= 0x30 && b[i] <= 0x39 {
                if n < 3 { fractionMillis = fractionMillis * 10 + Int(b[i] - 0x30) }
                n += 1
                i += 1
            }
            guard (1...9).contains(n) else { return nil }
            if n < 3 { for _ in n..<3 { fractionMillis *= 10 } }
        }
        var offsetSeconds = 0
        guard i < b.count else { return nil }
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            guard let oh = digits(i + 1, 2), i + 3 < b.count, b[i + 3] == UInt8(ascii: ":"), let om = digits(i + 4, 2),
                oh < 24, om < 60
            else { return nil }
            offsetSeconds = (oh * 3600 + om * 60) * (b[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = Self.daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetSeconds)
        millis = seconds * 1000 + Int64(fractionMillis)
        self.text = text
    }

    public static func < (a: ReceiptTime, b: ReceiptTime) -> Bool { a.millis < b.millis }
    public static func == (a: ReceiptTime, b: ReceiptTime) -> Bool { a.millis == b.millis }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
