// libFuzzer target: AuthenticatorData.parse(_:kind:) for both kinds on arbitrary bytes.
//
// Properties checked (a violation traps):
//   1. parse never crashes (only AppAttestError is thrown: typed throws), and every error is .malformed.
//   2. On success: the parsed value keeps the exact input bytes, rpIdHash is bytes 0..<32, flags is
//      byte 32, the counter is bytes 33..<37 big-endian; an attestation has credential data with a
//      16-byte aaguid and a 65-byte uncompressed point; an assertion has none.
//   3. Parsing is deterministic (a second parse gives an equal value).
import AppAttest

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    check(bytes, kind: .attestation)
    check(bytes, kind: .assertion)
    return 0
}

func check(_ bytes: [UInt8], kind: AuthenticatorData.Kind) {
    let parsed: AuthenticatorData
    do {
        parsed = try AuthenticatorData.parse(bytes, kind: kind)
    } catch {
        guard error.code == .malformed else { fatalError("parse(\(kind)) threw \(error.code), not malformed: \(error)") }
        guard !error.detail.isEmpty else { fatalError("parse(\(kind)) threw an error without detail") }
        return
    }
    guard bytes.count >= 37 else { fatalError("parse(\(kind)) accepted \(bytes.count) bytes") }
    guard parsed.bytes == bytes else { fatalError("parse(\(kind)) did not keep the input bytes") }
    guard parsed.rpIDHash == Array(bytes[0..<32]) else { fatalError("rpIdHash is not bytes 0..<32") }
    guard parsed.flags.rawValue == bytes[32] else { fatalError("flags are not byte 32") }
    let counter = UInt32(bytes[33]) << 24 | UInt32(bytes[34]) << 16 | UInt32(bytes[35]) << 8 | UInt32(bytes[36])
    guard parsed.signCount == counter else { fatalError("signCount is not bytes 33..<37 big-endian") }
    switch kind {
    case .attestation:
        guard let cred = parsed.attestedCredentialData else { fatalError("attestation parsed without credential data") }
        guard parsed.flags.contains(.attestedCredentialData) else { fatalError("attestation parsed without the AT flag") }
        guard cred.aaguid.count == 16, cred.aaguid == Array(bytes[37..<53]) else { fatalError("aaguid is not bytes 37..<53") }
        let idLength = Int(bytes[53]) << 8 | Int(bytes[54])
        guard cred.credentialID.count == idLength, cred.credentialID == Array(bytes[55..<55 + idLength]) else {
            fatalError("credential id does not match its length prefix")
        }
        guard cred.credentialPublicKey.count == 65, cred.credentialPublicKey[0] == 0x04 else {
            fatalError("credential public key is not a 65-byte uncompressed point")
        }
    case .assertion:
        guard parsed.attestedCredentialData == nil else { fatalError("assertion parsed with credential data") }
        guard (bytes.count == 37) == (parsed.extensions == nil) else {
            fatalError("assertion: extensions present iff bytes follow the counter (\(bytes.count) bytes)")
        }
    }
    let second: AuthenticatorData
    do {
        second = try AuthenticatorData.parse(bytes, kind: kind)
    } catch {
        fatalError("second parse(\(kind)) failed: \(error)")
    }
    guard second == parsed else { fatalError("parse(\(kind)) is not deterministic") }
}
