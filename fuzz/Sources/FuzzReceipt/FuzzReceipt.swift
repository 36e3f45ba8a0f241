// libFuzzer target: App Attest receipts. Mode byte, then the bytes:
//   even  a receipt (CMS SignedData, BER as Apple sends it): ReceiptVerifier.verify (OpenSSL's CMS
//         parse, the signer's chain to Apple Root CA - G3, the signature, the payload, the checks),
//         AppAttestReceipt.parseStored, and the payload it holds;
//   odd   a payload (the SET of SEQUENCE {INTEGER, INTEGER, OCTET STRING}): AppAttestReceipt.parse.
//
// Fixed context: FuzzSupport's ReceiptContext (the veehaitch iOS 14.4 RECEIPT, which verifies: its app
// id and key, kind RECEIPT, at most 5 minutes old, as RiskRefresher asks, at 2021-01-23T12:26:42Z).
//
// Properties checked (a violation traps):
//   1. Nothing crashes; every failure is a ReceiptError with a detail; a payload refusal is malformed.
//   2. A parsed payload keeps every field in order, each documented field at most once, and its
//      decoded members are those fields' values; written back as DER it parses to the same fields.
//   3. A receipt that verifies also parses unverified (parseStored) to the same fields, meets the
//      expectation (app id, RECEIPT, creation time within 5 minutes before the instant) and has a
//      chain; one whose CMS does not parse does not verify.
import AppAttest
import Foundation
import FuzzSupport
import GatewayCrypto
import GatewayWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput.bytes(data, size)
    guard let mode = input.first else { return 0 }
    let bytes = Array(input.dropFirst())
    if mode & 1 == 1 {
        payload(bytes)
    } else {
        receipt(bytes)
    }
    return 0
}

func payload(_ bytes: [UInt8]) {
    let r: AppAttestReceipt
    do {
        r = try AppAttestReceipt.parse(payload: bytes)
    } catch {
        guard error.code == .malformed, !error.detail.isEmpty else { fuzzFail("payload refused with \(error.code): \(error)") }
        return
    }
    check(r)
    let again: AppAttestReceipt
    do {
        again = try AppAttestReceipt.parse(payload: der(r.fields))
    } catch {
        fuzzFail("a parsed payload written back as DER does not parse: \(error)")
    }
    guard again.fields == r.fields else { fuzzFail("a parsed payload written back as DER reads other fields") }
}

/// Property 2's first half.
func check(_ r: AppAttestReceipt) {
    var byType: [Int: [UInt8]] = [:]
    for f in r.fields where AppAttestReceipt.FieldType.documented.contains(f.type) {
        guard byType[f.type] == nil else { fuzzFail("documented field \(f.type) twice in a parsed receipt") }
        byType[f.type] = f.value
    }
    guard r.appID == byType[2], r.attestedCertificate == byType[3], r.clientHash == byType[4] else {
        fuzzFail("fields 2, 3 or 4 decoded from other bytes")
    }
    guard Array(r.type.utf8) == byType[6] else { fuzzFail("field 6 decoded from other bytes") }
    guard r.token.map({ Array($0.utf8) }) == byType[5], r.environment.map({ Array($0.utf8) }) == byType[7] else {
        fuzzFail("field 5 or 7 decoded from other bytes")
    }
    if let m = r.riskMetric {
        guard let text = byType[17], String(decoding: text, as: UTF8.self).contains(String(m)) else {
            fuzzFail("risk metric \(m) from \(String(describing: byType[17]))")
        }
    } else if byType[17] != nil {
        fuzzFail("field 17 present, no risk metric")
    }
    guard (r.notBefore != nil) == (byType[19] != nil), (r.expirationTime != nil) == (byType[21] != nil) else {
        fuzzFail("fields 19 or 21 lost")
    }
}

func receipt(_ bytes: [UInt8]) {
    var stored: AppAttestReceipt?
    var cmsParses = true
    do {
        stored = try AppAttestReceipt.parseStored(bytes)
    } catch {
        guard error.code == .malformed, !error.detail.isEmpty else { fuzzFail("parseStored refused with \(error.code): \(error)") }
        if let content = try? CMSSignedDataVerifier.unverifiedContent(bytes) { payload(content) } else { cmsParses = false }
    }
    if let stored { check(stored) }
    let verified: VerifiedReceipt
    do {
        verified = try ReceiptContext.verifier.verify(bytes, expecting: ReceiptContext.expectation, at: ReceiptContext.instant)
    } catch {
        guard !error.detail.isEmpty else { fuzzFail("a receipt refusal (\(error.code)) without detail") }
        return
    }
    guard cmsParses, let stored else { fuzzFail("a receipt verified whose unverified content does not parse") }
    guard verified.receipt.fields == stored.fields else { fuzzFail("verify and parseStored read different fields") }
    guard verified.bytes == bytes, !verified.chain.isEmpty else { fuzzFail("a verified receipt without its bytes or chain") }
    let r = verified.receipt
    guard r.appID == Array(ReceiptContext.appID.description.utf8), r.kind == .receipt else {
        fuzzFail("a verified receipt of another app or kind")
    }
    let created = r.creationTime.millis
    let now = ReceiptContext.nowMillis
    guard created <= now + ReceiptVerifier.allowedClockSkewMillis, now - created <= ReceiptContext.maxAgeMillis else {
        fuzzFail("a verified receipt created at \(created), instant \(now)")
    }
}

/// The payload's DER: SET OF SEQUENCE { INTEGER type, INTEGER version, OCTET STRING value }.
func der(_ fields: [AppAttestReceipt.Field]) -> [UInt8] {
    func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var length: [UInt8] = []
        if content.count < 0x80 {
            length = [UInt8(content.count)]
        } else {
            var n = content.count
            while n > 0 {
                length.insert(UInt8(n & 0xff), at: 0)
                n >>= 8
            }
            length.insert(0x80 | UInt8(length.count), at: 0)
        }
        return [tag] + length + content
    }
    func integer(_ v: Int) -> [UInt8] {
        var bytes = withUnsafeBytes(of: Int64(v).bigEndian) { Array($0) }
        // Minimal two's complement: drop a leading byte that only repeats the sign of the next.
        while bytes.count > 1, (bytes[0] == 0x00 && bytes[1] & 0x80 == 0) || (bytes[0] == 0xff && bytes[1] & 0x80 != 0) {
            bytes.removeFirst()
        }
        return tlv(0x02, bytes)
    }
    return tlv(0x31, fields.flatMap { f in tlv(0x30, integer(f.type) + integer(f.version) + tlv(0x04, f.value)) })
}
