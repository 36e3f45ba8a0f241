import Foundation
import GatewayCrypto
import GatewayWire
import Testing

@_spi(Fuzzing) @testable import AppAttest

// MARK: - Helpers (all file-private: other test files of this target define their own)

private typealias MalformedRNG = SeededRandom

private func hexBytes(_ hex: String) -> [UInt8] {
    guard let b = Hex.decode(hex) else { fatalError("bad hex in test: \(hex)") }
    return b
}

/// The 18 distinct real attestations and 13 real assertions that verify.
private let validAttestations = VectorCase.attestations.filter { $0.expect == "valid" }
private let validAssertions = VectorCase.assertions.filter { $0.expect == "valid" }

/// A real attestation vector's verifier and inputs, decoded once (VectorCase decodes on every access).
private struct AttestationContext {
    let name: String
    let bytes: [UInt8]
    let verifier: AttestationVerifier
    let keyID: [UInt8]
    let clientDataHash: [UInt8]
    let instant: Date

    init(_ v: VectorCase) {
        name = v.name
        bytes = v.bytes("attestation_b64")
        let env = AttestEnvironment(rawValue: v.string("verifier_environment")!)!
        verifier = AttestationVerifier(policy: .init(appIDs: [v.appID], environments: [env]))
        keyID = v.bytes("key_id_b64")
        clientDataHash = v.bytes("client_data_hash_b64")
        instant = v.instant
    }

    func verify(_ bytes: [UInt8]) -> Result<VerifiedAttestation, AppAttestError> {
        Result { () throws(AppAttestError) in
            try verifier.verify(attestation: bytes, keyID: keyID, clientDataHash: clientDataHash, at: instant)
        }
    }
}

private struct AssertionContext {
    let verifier: AssertionVerifier
    let key: P256PublicKey
    let clientDataHash: [UInt8]
    let previous: UInt32?

    init(_ v: VectorCase) throws {
        verifier = AssertionVerifier(appIDs: [v.appID])
        key = try P256PublicKey(x962: v.bytes("public_key_x962_b64"))
        clientDataHash = v.bytes("client_data_hash_b64")
        previous = (v.json["previous_counter"] as? Int).map { UInt32($0) }
    }

    func verify(_ bytes: [UInt8]) -> Result<VerifiedAssertion, AppAttestError> {
        Result { () throws(AppAttestError) in
            try verifier.verify(assertion: bytes, publicKey: key, clientDataHash: clientDataHash, previousCounter: previous)
        }
    }
}

private func code<T>(_ r: Result<T, AppAttestError>) -> AppAttestError.Code? {
    if case .failure(let e) = r { e.code } else { nil }
}

private func parseAttestation(_ bytes: [UInt8]) -> Result<AttestationObject, AppAttestError> {
    Result { () throws(AppAttestError) in try AttestationObject.parse(bytes) }
}

private func parseAssertion(_ bytes: [UInt8]) -> Result<AssertionObject, AppAttestError> {
    Result { () throws(AppAttestError) in try AssertionObject.parse(bytes) }
}

private func parseAuthData(_ bytes: [UInt8], _ kind: AuthenticatorData.Kind) -> Result<AuthenticatorData, AppAttestError> {
    Result { () throws(AppAttestError) in try AuthenticatorData.parse(bytes, kind: kind) }
}

private func parseNonce(_ der: [UInt8]) -> Result<[UInt8], AppAttestError> {
    Result { () throws(AppAttestError) in try AttestationVerifier.parseNonceExtension(der) }
}

/// The top-level map of a real object, decoded with the default limits.
private func topLevelMap(_ bytes: [UInt8]) throws -> CBORMap {
    guard case .map(let m) = try CBORDecoder().decode(bytes) else { throw CBORError(offset: 0, reason: "not a map") }
    return m
}

/// `map` with `key` replaced in place (or removed when `value` is nil, or appended when absent).
private func setting(_ map: CBORMap, _ key: String, _ value: CBORValue?) -> CBORMap {
    var entries: [(key: CBORValue, value: CBORValue)] = []
    var found = false
    for e in map.entries {
        if e.key == .text(key) {
            found = true
            if let value { entries.append((e.key, value)) }
        } else {
            entries.append(e)
        }
    }
    if !found, let value { entries.append((.text(key), value)) }
    return CBORMap(entries)
}

private func encode(_ map: CBORMap) -> [UInt8] { CBOREncoder.encode(.map(map)) }

/// Where `needle` first occurs in `haystack`.
private func firstRange(of needle: [UInt8], in haystack: [UInt8]) -> Range<Int>? {
    guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
    outer: for start in 0...(haystack.count - needle.count) {
        for j in 0..<needle.count where haystack[start + j] != needle[j] { continue outer }
        return start..<start + needle.count
    }
    return nil
}

// Hand-crafted authenticator data.

private let rpIDHash = [UInt8](repeating: 0xab, count: 32)
private let developmentAAGUID = Array("appattestdevelop".utf8)
private let credentialID = [UInt8](repeating: 0xc1, count: 32)
private let pointX = [UInt8](repeating: 0x11, count: 32)
private let pointY = [UInt8](repeating: 0x22, count: 32)

/// COSE_Key entries: 1 kty, 3 alg, -1 crv, -2 x, -3 y (a nil argument leaves the entry out).
private func coseKey(
    kty: CBORValue? = .unsigned(2), alg: CBORValue? = .negative(6), crv: CBORValue? = .unsigned(1),
    x: CBORValue? = .bytes(pointX), y: CBORValue? = .bytes(pointY)
) -> [UInt8] {
    var m = CBORMap()
    if let kty { m.append(.unsigned(1), kty) }
    if let alg { m.append(.unsigned(3), alg) }
    if let crv { m.append(.negative(0), crv) }
    if let x { m.append(.negative(1), x) }
    if let y { m.append(.negative(2), y) }
    return CBOREncoder.encode(.map(m))
}

private func header(flags: UInt8, signCount: UInt32 = 0) -> [UInt8] {
    rpIDHash + [flags] + [UInt8(signCount >> 24), UInt8((signCount >> 16) & 0xff), UInt8((signCount >> 8) & 0xff), UInt8(signCount & 0xff)]
}

private func attestationAuthData(
    flags: UInt8 = 0x41, idLength: Int? = nil, id: [UInt8] = credentialID, key: [UInt8] = coseKey(), tail: [UInt8] = []
) -> [UInt8] {
    let n = idLength ?? id.count
    return header(flags: flags) + developmentAAGUID + [UInt8(n >> 8), UInt8(n & 0xff)] + id + key + tail
}

private func extensionsMap(_ entries: [(String, CBORValue)]) -> [UInt8] {
    CBOREncoder.encode(.map(CBORMap(entries.map { (key: CBORValue.text($0.0), value: $0.1) })))
}

private let appleExtensions = extensionsMap([
    (AppleExtensions.validationCategoryKey, .bytes([0x04, 0x00, 0x00, 0x00])),
    (AppleExtensions.bundleVersionKey, .text("4.2.1")),
])

// MARK: - Real vectors: truncation, appended bytes, random changes

@Suite("Malformed input: real vectors cut, extended and mutated")
struct MalformedInputTests {
    @Test("the real vectors used here are present")
    func inventory() {
        // 19 valid cases, 18 distinct objects (one attestation appears in two vector files' cases).
        #expect(validAttestations.count >= 18)
        #expect(Set(validAttestations.map { $0.string("attestation_b64")! }).count == 18)
        #expect(validAssertions.count >= 13)
    }

    @Test("an attestation object truncated at every offset is malformed", arguments: validAttestations)
    func attestationTruncatedAtEveryOffset(_ v: VectorCase) {
        let ctx = AttestationContext(v)
        let bytes = ctx.bytes
        var wrong: [String] = []
        for cut in 0..<bytes.count {
            let r = ctx.verify(Array(bytes[0..<cut]))
            if code(r) != .malformed { wrong.append("cut \(cut): \(r)") }
        }
        #expect(wrong.isEmpty, "\(wrong.count) truncations not malformed, first: \(wrong.prefix(3))")
        // The untruncated object does verify (the cuts fail because of the cut).
        #expect(code(ctx.verify(bytes)) == nil)
    }

    @Test("an assertion truncated at every offset is malformed", arguments: validAssertions)
    func assertionTruncatedAtEveryOffset(_ v: VectorCase) throws {
        let bytes = v.bytes("assertion_b64")
        let ctx = try AssertionContext(v)
        for cut in 0..<bytes.count {
            let r = ctx.verify(Array(bytes[0..<cut]))
            #expect(code(r) == .malformed, "cut \(cut): \(r)")
        }
        #expect(code(ctx.verify(bytes)) == nil)
    }

    @Test("authData cut short inside a re-encoded attestation object is malformed at every length", arguments: validAttestations)
    func attestationAuthDataTruncatedInside(_ v: VectorCase) throws {
        let map = try topLevelMap(v.bytes("attestation_b64"))
        let authData = try #require(map[text: "authData"]?.bytes)
        for cut in 0..<authData.count {
            let r = parseAttestation(encode(setting(map, "authData", .bytes(Array(authData[0..<cut])))))
            #expect(code(r) == .malformed, "authData cut to \(cut) of \(authData.count)")
        }
    }

    @Test("authenticatorData cut short inside a re-encoded assertion is malformed at every length", arguments: validAssertions)
    func assertionAuthDataTruncatedInside(_ v: VectorCase) throws {
        let map = try topLevelMap(v.bytes("assertion_b64"))
        let authData = try #require(map[text: "authenticatorData"]?.bytes)
        #expect(authData.count == 37)
        for cut in 0..<authData.count {
            let r = parseAssertion(encode(setting(map, "authenticatorData", .bytes(Array(authData[0..<cut])))))
            #expect(code(r) == .malformed, "authenticatorData cut to \(cut)")
        }
    }

    static let appendices: [[UInt8]] = [[0x00], [0xff], [0xa0], [0xf6], [0x40], hexBytes("6161"), [0x00, 0x00, 0x00, 0x00]]

    @Test("bytes appended after the attestation CBOR make it malformed", arguments: validAttestations)
    func attestationWithAppendedBytes(_ v: VectorCase) {
        let ctx = AttestationContext(v)
        let bytes = ctx.bytes
        for extra in Self.appendices + [bytes] {
            let r = ctx.verify(bytes + extra)
            #expect(code(r) == .malformed, "appended \(Hex.encode(extra.prefix(8)))")
        }
    }

    @Test("bytes appended after the assertion CBOR make it malformed", arguments: validAssertions)
    func assertionWithAppendedBytes(_ v: VectorCase) throws {
        let bytes = v.bytes("assertion_b64")
        let ctx = try AssertionContext(v)
        for extra in Self.appendices + [bytes] {
            #expect(code(ctx.verify(bytes + extra)) == .malformed, "appended \(Hex.encode(extra.prefix(8)))")
        }
    }

    @Test("the real objects re-encode byte for byte (so the hand-edited variants below differ only where edited)")
    func realObjectsReencodeIdentically() throws {
        for v in validAttestations {
            let bytes = v.bytes("attestation_b64")
            #expect(encode(try topLevelMap(bytes)) == bytes, "\(v.name)")
        }
        for v in validAssertions {
            let bytes = v.bytes("assertion_b64")
            #expect(encode(try topLevelMap(bytes)) == bytes, "\(v.name)")
        }
    }

    /// 2,000 mutated attestations (round-robin over the real vectors): 1 to 3 bytes changed at random positions.
    @Test(
        "random byte changes in attestations never crash: some AppAttestError, malformed when the CBOR breaks, success only via the unsigned receipt"
    )
    func attestationRandomByteChanges() throws {
        var rng = MalformedRNG(seed: 0xA77E_57A7)
        let contexts = try validAttestations.map { v in
            let ctx = AttestationContext(v)
            let bytes = ctx.bytes
            let receipt = try #require(try topLevelMap(bytes)[text: "attStmt"]?.map?[text: "receipt"]?.bytes)
            // Some real objects carry an empty receipt: then no change may verify.
            let receiptRange = receipt.isEmpty ? 0..<0 : try #require(firstRange(of: receipt, in: bytes))
            return (ctx, receiptRange)
        }
        var codes: [AppAttestError.Code: Int] = [:]
        var successes = 0
        for i in 0..<2000 {
            let (ctx, receiptRange) = contexts[i % contexts.count]
            var bytes = ctx.bytes
            var positions: [Int] = []
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let p = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[p] ^= UInt8.random(in: 1...255, using: &rng)
                positions.append(p)
            }
            let cborBroken = (try? CBORDecoder().decode(bytes)) == nil
            switch ctx.verify(bytes) {
            case .success:
                successes += 1
                #expect(
                    positions.allSatisfy { receiptRange.contains($0) },
                    "\(ctx.name): changed at \(positions) (receipt is \(receiptRange)) and still verified")
            case .failure(let e):
                codes[e.code, default: 0] += 1
                if cborBroken { #expect(e.code == .malformed, "\(ctx.name) changed at \(positions): \(e)") }
            }
        }
        // The mix is broad: changes land in CBOR heads, certificates, authData and the receipt.
        #expect(codes[.malformed, default: 0] > 0)
        #expect(codes.count >= 3, "\(codes)")
        #expect(successes < 2000)
    }

    /// 2,000 mutated assertions (round-robin over the real vectors): every change is caught; nothing verifies.
    @Test("random byte changes in assertions never crash and never verify; malformed when the CBOR breaks")
    func assertionRandomByteChanges() throws {
        var rng = MalformedRNG(seed: 0xA55E_7710)
        let contexts = try validAssertions.map { v in (v.bytes("assertion_b64"), try AssertionContext(v)) }
        var codes: [AppAttestError.Code: Int] = [:]
        for i in 0..<2000 {
            let (original, ctx) = contexts[i % contexts.count]
            var bytes = original
            var positions: [Int] = []
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let p = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[p] ^= UInt8.random(in: 1...255, using: &rng)
                positions.append(p)
            }
            let cborBroken = (try? CBORDecoder().decode(bytes)) == nil
            switch ctx.verify(bytes) {
            case .success:
                Issue.record("assertion changed at \(positions) still verified: \(Hex.encode(bytes))")
            case .failure(let e):
                codes[e.code, default: 0] += 1
                if cborBroken { #expect(e.code == .malformed, "changed at \(positions): \(e)") }
            }
        }
        #expect(codes[.malformed, default: 0] > 0)
        #expect(codes[.badSignature, default: 0] > 0)
    }
}

// MARK: - Wrong types and missing fields

extension MalformedInputTests {
    @Suite("Malformed input: wrong field types")
    struct FieldTypes {
        private static var vector: VectorCase { validAttestations[0] }
        private static var assertionVector: VectorCase { validAssertions[0] }

        private func attestationMap() throws -> CBORMap { try topLevelMap(Self.vector.bytes("attestation_b64")) }
        private func assertionMap() throws -> CBORMap { try topLevelMap(Self.assertionVector.bytes("assertion_b64")) }

        private func withStatement(_ map: CBORMap, _ key: String, _ value: CBORValue?) throws -> CBORMap {
            let stmt = try #require(map[text: "attStmt"]?.map)
            return setting(map, "attStmt", .map(setting(stmt, key, value)))
        }

        @Test("the unedited object parses (baseline for the edits below)")
        func baseline() throws {
            let parsed = try AttestationObject.parse(encode(try attestationMap()))
            #expect(parsed.format == "apple-appattest")
            #expect(parsed.x5c.count >= 2)
            _ = try AssertionObject.parse(encode(try assertionMap()))
        }

        static let fmtValues: [CBORValue?] = [
            nil, .bytes(Array("apple-appattest".utf8)), .unsigned(1), .array([.text("apple-appattest")]), .null, .bool(true),
            .map(CBORMap([(key: .text("apple-appattest"), value: .null)])),
        ]

        @Test("fmt missing or not a text string is malformed", arguments: fmtValues)
        func fmtWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAttestation(encode(setting(try attestationMap(), "fmt", value)))) == .malformed)
        }

        @Test(
            "fmt of another format is unsupported_format, even with a broken statement",
            arguments: ["packed", "none", "tpm", "android-key", "fido-u2f", "", "Apple-AppAttest", "apple-appattest "])
        func fmtOtherFormat(_ fmt: String) throws {
            let map = setting(try attestationMap(), "fmt", .text(fmt))
            #expect(code(parseAttestation(encode(map))) == .unsupportedFormat)
            // The format is checked before the statement: a "packed" object with a statement of the wrong
            // shape and no authData still gets unsupported_format.
            let broken = setting(setting(map, "attStmt", .array([])), "authData", nil)
            #expect(code(parseAttestation(encode(broken))) == .unsupportedFormat)
        }

        @Test("fmt = packed through the full verifier is unsupported_format")
        func fmtPackedThroughVerifier() throws {
            let v = Self.vector
            let bytes = encode(setting(try attestationMap(), "fmt", .text("packed")))
            #expect(code(AttestationContext(v).verify(bytes)) == .unsupportedFormat)
        }

        static let notAMap: [CBORValue?] = [nil, .array([]), .bytes([0xa0]), .text("{}"), .null, .unsigned(0)]

        @Test("attStmt missing or not a map is malformed", arguments: notAMap)
        func attStmtWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAttestation(encode(setting(try attestationMap(), "attStmt", value)))) == .malformed)
        }

        @Test("x5c missing or not an array is malformed")
        func x5cWrongType() throws {
            let map = try attestationMap()
            let chain = try #require(map[text: "attStmt"]?.map?[text: "x5c"]?.array)
            for value: CBORValue? in [nil, chain[0], .map(CBORMap()), .text("x5c"), .null] {
                #expect(
                    code(parseAttestation(encode(try withStatement(map, "x5c", value)))) == .malformed, "\(value?.kindName ?? "absent")")
            }
        }

        @Test("x5c with fewer than 2 or more than 4 certificates is malformed")
        func x5cWrongCount() throws {
            let map = try attestationMap()
            let chain = try #require(map[text: "attStmt"]?.map?[text: "x5c"]?.array)
            for certs in [[], [chain[0]], [chain[1]], Array(repeating: chain[0], count: 5)] {
                #expect(code(parseAttestation(encode(try withStatement(map, "x5c", .array(certs))))) == .malformed, "\(certs.count) certs")
            }
            // Three and four are within bounds for parsing (the chain check decides on them).
            for n in [3, 4] {
                let certs = Array((chain + chain).prefix(n))
                #expect(code(parseAttestation(encode(try withStatement(map, "x5c", .array(certs))))) == nil, "\(n) certs")
            }
        }

        @Test("an x5c element that is not a non-empty byte string is malformed")
        func x5cElementWrongType() throws {
            let map = try attestationMap()
            let chain = try #require(map[text: "attStmt"]?.map?[text: "x5c"]?.array)
            for bad: CBORValue in [.text("MIIC"), .bytes([]), .array([chain[0]]), .unsigned(0), .null] {
                for index in 0..<2 {
                    var certs = chain
                    certs[index] = bad
                    #expect(
                        code(parseAttestation(encode(try withStatement(map, "x5c", .array(certs))))) == .malformed,
                        "x5c[\(index)] = \(bad.kindName)")
                }
            }
        }

        @Test("x5c elements that are bytes but not certificates are malformed through the verifier")
        func x5cElementNotDER() throws {
            let v = Self.vector
            let map = try attestationMap()
            let chain = try #require(map[text: "attStmt"]?.map?[text: "x5c"]?.array)
            for index in 0..<2 {
                var certs = chain
                certs[index] = .bytes([0x30, 0x03, 0x02, 0x01, 0x00])
                let bytes = encode(try withStatement(map, "x5c", .array(certs)))
                #expect(code(AttestationContext(v).verify(bytes)) == .malformed, "x5c[\(index)]")
            }
        }

        @Test("receipt missing or not a byte string is malformed", arguments: [nil, .text("receipt"), .array([]), .null] as [CBORValue?])
        func receiptWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAttestation(encode(try withStatement(try attestationMap(), "receipt", value)))) == .malformed)
        }

        @Test(
            "authData missing or not a byte string is malformed",
            arguments: [nil, .text("authData"), .array([]), .map(CBORMap()), .unsigned(37)] as [CBORValue?])
        func authDataWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAttestation(encode(setting(try attestationMap(), "authData", value)))) == .malformed)
        }

        @Test("a top-level value other than a map is malformed")
        func attestationRootNotAMap() throws {
            let map = try attestationMap()
            let asArray = CBORValue.array(map.entries.flatMap { [$0.key, $0.value] })
            for root: CBORValue in [asArray, .bytes(encode(map)), .text("apple-appattest"), .null, .unsigned(0)] {
                #expect(code(parseAttestation(CBOREncoder.encode(root))) == .malformed, "\(root.kindName)")
                #expect(code(parseAssertion(CBOREncoder.encode(root))) == .malformed, "\(root.kindName)")
            }
        }

        @Test("an unknown top-level key is ignored: the edited attestation still verifies")
        func unknownTopLevelKeyIgnored() throws {
            let v = Self.vector
            let bytes = encode(setting(try attestationMap(), "futureField", .map(CBORMap([(key: .text("x"), value: .unsigned(1))]))))
            let r = AttestationContext(v).verify(bytes)
            #expect(code(r) == nil, "\(r)")
        }

        @Test("the attestation object size bound is enforced before decoding")
        func attestationTooLarge() throws {
            let big = encode(setting(try attestationMap(), "padding", .bytes([UInt8](repeating: 0, count: AttestationObject.maxSize))))
            #expect(code(parseAttestation(big)) == .malformed)
            let bigAssertion = encode(setting(try assertionMap(), "padding", .bytes([UInt8](repeating: 0, count: AssertionObject.maxSize))))
            #expect(code(parseAssertion(bigAssertion)) == .malformed)
        }

        static let notNonEmptyBytes: [CBORValue?] = [nil, .bytes([]), .text("MEUCIQ"), .array([]), .null]

        @Test("assertion signature missing, empty or not bytes is malformed", arguments: notNonEmptyBytes)
        func signatureWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAssertion(encode(setting(try assertionMap(), "signature", value)))) == .malformed)
        }

        @Test(
            "assertion authenticatorData missing or not bytes is malformed",
            arguments: [nil, .text("x"), .array([]), .map(CBORMap()), .unsigned(0)] as [CBORValue?])
        func assertionAuthDataWrongType(_ value: CBORValue?) throws {
            #expect(code(parseAssertion(encode(setting(try assertionMap(), "authenticatorData", value)))) == .malformed)
        }

        @Test("a wrong signature of the right type is bad_signature, not malformed")
        func assertionWrongSignatureBytes() throws {
            let v = Self.assertionVector
            let ctx = try AssertionContext(v)
            let bytes = encode(setting(try assertionMap(), "signature", .bytes([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01])))
            #expect(code(ctx.verify(bytes)) == .badSignature)
        }

        @Test("an assertion nested deeper than its limit is malformed")
        func assertionTooDeep() throws {
            let deep = [UInt8](repeating: 0x81, count: 100) + [0x00]
            let map = setting(try assertionMap(), "extra", nil)
            var bytes = encode(map)
            // One more entry whose value is 100 nested arrays.
            bytes[0] += 1
            bytes += CBOREncoder.encode(.text("extra")) + deep
            #expect(code(parseAssertion(bytes)) == .malformed)
        }
    }
}

// MARK: - Authenticator data

extension MalformedInputTests {
    @Suite("Malformed input: authenticator data")
    struct AuthenticatorDataParsing {
        @Test("the hand-crafted attestation authData parses (baseline)")
        func baseline() throws {
            let a = try AuthenticatorData.parse(attestationAuthData(), kind: .attestation)
            #expect(a.rpIDHash == rpIDHash)
            #expect(a.signCount == 0)
            #expect(a.attestedCredentialData?.aaguid == developmentAAGUID)
            #expect(a.attestedCredentialData?.credentialID == credentialID)
            #expect(a.attestedCredentialData?.credentialPublicKey == [0x04] + pointX + pointY)
            #expect(a.extensions == nil)
            // alg is optional.
            _ = try AuthenticatorData.parse(attestationAuthData(key: coseKey(alg: nil)), kind: .attestation)
        }

        @Test("authData shorter than 37 bytes is malformed", arguments: 0..<37)
        func shorterThan37(_ n: Int) {
            let bytes = Array(header(flags: 0x41, signCount: 7).prefix(n))
            #expect(code(parseAuthData(bytes, .assertion)) == .malformed)
            #expect(code(parseAuthData(bytes, .attestation)) == .malformed)
        }

        @Test("attestation authData without the AT flag is malformed")
        func attestationWithoutAT() {
            for flags: UInt8 in [0x00, 0x01, 0x05, 0x81, 0xbf] {
                #expect(code(parseAuthData(attestationAuthData(flags: flags), .attestation)) == .malformed, "flags \(flags)")
            }
        }

        @Test("attestation authData cut at every offset is malformed")
        func attestationAuthDataEveryCut() {
            let bytes = attestationAuthData()
            for cut in 0..<bytes.count {
                #expect(code(parseAuthData(Array(bytes[0..<cut]), .attestation)) == .malformed, "cut \(cut)")
            }
        }

        @Test("a credential id length past the end is malformed")
        func credentialIDLengthPastTheEnd() {
            // Declared length larger than everything that follows.
            #expect(code(parseAuthData(attestationAuthData(idLength: 0xffff), .attestation)) == .malformed)
            let total = credentialID.count + coseKey().count
            #expect(code(parseAuthData(attestationAuthData(idLength: total + 1), .attestation)) == .malformed)
            // Exactly everything that follows: nothing is left for the key.
            #expect(code(parseAuthData(attestationAuthData(idLength: total), .attestation)) == .malformed)
            // The header alone with a non-zero length.
            #expect(code(parseAuthData(header(flags: 0x41) + developmentAAGUID + [0x00, 0x20], .attestation)) == .malformed)
        }

        static let badKeys: [(key: [UInt8], why: String)] = [
            (coseKey(kty: .unsigned(3)), "kty 3 (RSA)"), (coseKey(kty: .unsigned(1)), "kty 1 (OKP)"), (coseKey(kty: nil), "no kty"),
            (coseKey(kty: .text("EC2")), "kty as text"), (coseKey(crv: .unsigned(2)), "crv 2 (P-384)"), (coseKey(crv: nil), "no crv"),
            (coseKey(crv: .negative(0)), "crv -1"), (coseKey(alg: .negative(7)), "alg -8 (EdDSA)"),
            (coseKey(alg: .text("ES256")), "alg as text"),
            (coseKey(x: .bytes(Array(pointX.prefix(31)))), "x of 31 bytes"), (coseKey(x: .bytes(pointX + [0])), "x of 33 bytes"),
            (coseKey(x: nil), "no x"), (coseKey(x: .text(String(repeating: "a", count: 32))), "x as text"),
            (coseKey(y: .bytes(Array(pointY.prefix(31)))), "y of 31 bytes"), (coseKey(y: nil), "no y"),
            (coseKey(y: .unsigned(0)), "y as integer"),
            (CBOREncoder.encode(.array([.unsigned(2)])), "an array, not a map"),
            (CBOREncoder.encode(.bytes([0x04] + pointX + pointY)), "a raw point"),
            ([0xa5, 0x01, 0x02], "a truncated map"), ([0xbf, 0x01, 0x02, 0xff], "an indefinite map"), ([0xff], "a break code"),
            (hexBytes("a2010201") + [0x03], "a duplicate kty key"),
        ]

        @Test("a COSE key of the wrong shape is malformed", arguments: badKeys)
        func badCOSEKey(_ c: (key: [UInt8], why: String)) {
            #expect(code(parseAuthData(attestationAuthData(key: c.key), .attestation)) == .malformed, "\(c.why)")
        }

        static let badTails: [(tail: [UInt8], why: String)] = [
            ([0x00], "an integer"), ([0x40], "an empty byte string"), ([0x80], "an empty array"), ([0xf6], "null"),
            ([0xa1], "a truncated map"), ([0xff], "a break code"), ([0x00, 0x00], "two integers"),
            (appleExtensions + [0x00], "a map followed by a byte"), (appleExtensions + [0xa0], "two maps"),
            (extensionsMap([]) + appleExtensions, "two maps, the first empty"),
            (CBOREncoder.encode(.map(CBORMap([(key: .unsigned(1), value: .text("x"))]))), "a map with an integer key"),
            (extensionsMap([(AppleExtensions.validationCategoryKey, .bytes([4, 0, 0]))]), "a 3-byte validation category"),
            (extensionsMap([(AppleExtensions.validationCategoryKey, .text("app_store"))]), "a text validation category"),
            (extensionsMap([(AppleExtensions.validationCategoryKey, .unsigned(1 << 32))]), "a validation category beyond UInt32"),
            (extensionsMap([(AppleExtensions.bundleVersionKey, .bytes(Array("4.2.1".utf8)))]), "bundle version as bytes"),
            (hexBytes("a2") + CBOREncoder.encode(.text("k")) + [0x00] + CBOREncoder.encode(.text("k")) + [0x01], "a duplicate key"),
        ]

        @Test("trailing bytes that are not exactly one valid extensions map are malformed (attestation)", arguments: badTails)
        func badTailAfterCredential(_ c: (tail: [UInt8], why: String)) {
            #expect(code(parseAuthData(attestationAuthData(tail: c.tail), .attestation)) == .malformed, "\(c.why)")
        }

        @Test("trailing bytes that are not exactly one valid extensions map are malformed (assertion)", arguments: badTails)
        func badTailAfterCounter(_ c: (tail: [UInt8], why: String)) {
            #expect(code(parseAuthData(header(flags: 0x41, signCount: 3) + c.tail, .assertion)) == .malformed, "\(c.why)")
        }

        @Test("an assertion authData of exactly 37 bytes with the AT flag set is accepted")
        func assertion37BytesWithAT() throws {
            for flags: UInt8 in [0x40, 0x41, 0x45] {
                let a = try AuthenticatorData.parse(header(flags: flags, signCount: 9), kind: .assertion)
                #expect(a.flags.contains(.attestedCredentialData))
                #expect(a.attestedCredentialData == nil)
                #expect(a.extensions == nil)
                #expect(a.signCount == 9)
                #expect(a.bytes.count == 37)
            }
        }

        @Test("an assertion authData carrying credential data is malformed (the data is not an extensions map)")
        func assertionWithCredentialData() {
            #expect(code(parseAuthData(attestationAuthData(), .assertion)) == .malformed)
        }

        @Test(
            "the iOS 27 extensions map after an assertion's counter is parsed, with and without ED",
            arguments: [UInt8(0x41), 0xc1, 0x01, 0x81])
        func assertionExtensions(_ flags: UInt8) throws {
            let a = try AuthenticatorData.parse(header(flags: flags, signCount: 42) + appleExtensions, kind: .assertion)
            #expect(a.extensions?.validationCategory == .appStore)
            #expect(a.extensions?.bundleVersion == "4.2.1")
            #expect(a.extensions?.unknownKeys == [])
            #expect(a.signCount == 42)
            #expect(a.flags.contains(.extensionData) == (flags & 0x80 != 0))
        }

        @Test("the extensions map after an attestation's credential key is parsed, with and without ED", arguments: [UInt8(0x41), 0xc1])
        func attestationExtensions(_ flags: UInt8) throws {
            let a = try AuthenticatorData.parse(attestationAuthData(flags: flags, tail: appleExtensions), kind: .attestation)
            #expect(a.extensions?.validationCategory == .appStore)
            #expect(a.extensions?.bundleVersion == "4.2.1")
            #expect(a.attestedCredentialData?.credentialPublicKey == [0x04] + pointX + pointY)
        }

        @Test("a validation category given as an unsigned integer is accepted too")
        func validationCategoryAsInteger() throws {
            let tail = extensionsMap([(AppleExtensions.validationCategoryKey, .unsigned(2))])
            let a = try AuthenticatorData.parse(header(flags: 0x41) + tail, kind: .assertion)
            #expect(a.extensions?.validationCategory == .testFlight)
            #expect(a.extensions?.bundleVersion == nil)
        }

        @Test("an unknown extension key is kept in unknownKeys and does not fail")
        func unknownExtensionKey() throws {
            let tail = extensionsMap([
                ("apple_future_thing_02", .array([.unsigned(1), .text("x")])),
                (AppleExtensions.validationCategoryKey, .bytes([0x04, 0x00, 0x00, 0x00])),
                ("another", .map(CBORMap())),
            ])
            let a = try AuthenticatorData.parse(header(flags: 0xc1) + tail, kind: .assertion)
            #expect(a.extensions?.unknownKeys == ["apple_future_thing_02", "another"])
            #expect(a.extensions?.validationCategory == .appStore)
            // An unknown 4-byte category value is kept by number.
            let odd = extensionsMap([(AppleExtensions.validationCategoryKey, .bytes([0x63, 0x00, 0x00, 0x00]))])
            let b = try AuthenticatorData.parse(header(flags: 0x41) + odd, kind: .assertion)
            #expect(b.extensions?.validationCategory?.rawValue == 99)
            #expect(b.extensions?.validationCategory?.name == "unknown_99")
        }

        @Test("an empty extensions map is accepted and yields no values")
        func emptyExtensionsMap() throws {
            let a = try AuthenticatorData.parse(header(flags: 0x41) + [0xa0], kind: .assertion)
            #expect(try a.extensions == AppleExtensions(CBORMap()))
            #expect(a.extensions?.validationCategory == nil)
        }

        @Test("extensions nested deeper than the authData CBOR limit are malformed")
        func extensionsTooDeep() {
            let deep = [0xa1] + CBOREncoder.encode(.text("k")) + [UInt8](repeating: 0x81, count: 50) + [0x00]
            #expect(code(parseAuthData(header(flags: 0x41) + deep, .assertion)) == .malformed)
        }
    }
}

// MARK: - Nonce extension DER

extension MalformedInputTests {
    @Suite("Malformed input: nonce extension DER")
    struct NonceExtensionParsing {
        private static let nonce = [UInt8](repeating: 0x5e, count: 32)
        /// `OCTET STRING nonce`
        private static let octets = [0x04, 0x20] + nonce
        /// `[1] { OCTET STRING nonce }`
        private static let tagged = [0xa1, 0x22] + octets

        private static func sequence(_ contents: [UInt8]) -> [UInt8] {
            precondition(contents.count < 0x80)
            return [0x30, UInt8(contents.count)] + contents
        }

        @Test("SEQUENCE { [1] { OCTET STRING } } yields the octets")
        func valid() throws {
            #expect(try AttestationVerifier.parseNonceExtension(Self.sequence(Self.tagged)) == Self.nonce)
            // Any length of octets is returned as is; the comparison with the nonce happens later.
            #expect(try AttestationVerifier.parseNonceExtension(hexBytes("3004a1020400")) == [])
        }

        @Test("other context-tagged elements around [1] are tolerated")
        func otherContextTagsTolerated() throws {
            let der = Self.sequence(hexBytes("a0030201") + [0x05] + Self.tagged + hexBytes("820100"))
            #expect(try AttestationVerifier.parseNonceExtension(der) == Self.nonce)
        }

        @Test("the nonce of every real credential certificate parses and equals SHA256(authData ‖ clientDataHash)")
        func realCertificates() throws {
            for v in validAttestations {
                let object = try AttestationObject.parse(v.bytes("attestation_b64"))
                let leaf = try X509Certificate(der: object.x5c[0])
                guard case .present(let value, _) = leaf.extension(oid: AttestationVerifier.nonceExtensionOID) else {
                    Issue.record("\(v.name): no nonce extension")
                    continue
                }
                let embedded = try AttestationVerifier.parseNonceExtension(value)
                #expect(embedded == SHA256.hash(object.authenticatorData.bytes, v.bytes("client_data_hash_b64")), "\(v.name)")
            }
        }

        static let malformed: [(der: [UInt8], why: String)] = [
            ([], "empty input"),
            (sequence([]), "empty SEQUENCE: no [1]"),
            (sequence(hexBytes("a2") + [0x22] + octets), "only [2]"),
            (sequence(hexBytes("a0") + [0x22] + octets), "only [0]"),
            (sequence([0x81, 0x20] + nonce), "primitive (IMPLICIT) [1] only"),
            (sequence(tagged + tagged), "[1] twice"),
            (sequence(tagged + hexBytes("a1020400")), "[1] twice, the second empty"),
            (sequence(hexBytes("a103020105")), "[1] holding an INTEGER"),
            (sequence(hexBytes("a1033001") + [0x00]), "[1] holding a SEQUENCE"),
            (sequence(hexBytes("a1030c0161")), "[1] holding a UTF8String"),
            (sequence(hexBytes("a100")), "[1] empty"),
            (sequence([0xa1, 0x24] + octets + [0x05, 0x00]), "[1] with a second element after the OCTET STRING"),
            (sequence([0xa1, 0x24] + [0x24, 0x22] + octets), "[1] holding a constructed OCTET STRING"),
            (sequence(tagged) + [0x00], "one trailing byte after the SEQUENCE"),
            (sequence(tagged) + sequence(tagged), "two SEQUENCEs"),
            ([0x31, 0x24] + tagged, "a SET instead of a SEQUENCE"),
            (tagged, "[1] without the SEQUENCE"),
            (octets, "a bare OCTET STRING"),
            (sequence(octets), "SEQUENCE { OCTET STRING } without the [1]"),
            (sequence(octets + tagged), "a universal element before [1]"),
            (sequence(tagged + hexBytes("0500")), "a universal element after [1]"),
            ([0x30, 0x81, 0x24] + tagged, "non-minimal SEQUENCE length"),
            ([0x30, 0x25, 0xa1, 0x81, 0x22] + octets, "non-minimal [1] length"),
            ([0x30, 0x80] + tagged + [0x00, 0x00], "indefinite SEQUENCE length"),
            ([0x30, 0x30] + tagged, "SEQUENCE length past the end"),
            ([0x30, 0x24, 0xa1, 0x30] + octets, "[1] length past the SEQUENCE"),
            ([0x3f, 0x24] + tagged, "high tag number"),
        ]

        @Test("a malformed nonce extension is malformed", arguments: malformed)
        func malformedNonceExtension(_ c: (der: [UInt8], why: String)) {
            #expect(code(parseNonce(c.der)) == .malformed, "\(c.why)")
        }

        @Test("the nonce extension truncated at every offset is malformed")
        func truncatedEveryOffset() {
            let der = Self.sequence(Self.tagged)
            for cut in 0..<der.count {
                #expect(code(parseNonce(Array(der[0..<cut]))) == .malformed, "cut \(cut)")
            }
        }
    }

    /// The assertion's direct reader (the shape of every real assertion) against the general CBOR
    /// decoder: on every real assertion, its re-encodings with the keys swapped, long length heads
    /// and extra keys, and 20,000 random mutations, the direct reader answers only where the decoder
    /// gives exactly the same two byte strings, and `parse` answers the same either way.
    @Test("the assertion's direct reader agrees with the CBOR decoder on real and mutated assertions")
    func assertionDirectReaderAgreesWithDecoder() throws {
        func general(_ b: [UInt8]) -> ([UInt8], [UInt8])? {
            guard case .map(let m)? = try? CBORDecoder(limits: AssertionObject.cborLimits).decode(b),
                case .bytes(let s)? = m[text: "signature"], case .bytes(let a)? = m[text: "authenticatorData"], m.entries.count == 2
            else { return nil }
            return (s, a)
        }
        func agree(_ b: [UInt8], _ note: String) {
            if let (s, a) = AssertionObject.twoByteStrings(b) {
                let g = general(b)
                #expect(g?.0 == s && g?.1 == a, "\(note): the direct reader read what the decoder does not")
            }
        }
        var rng = MalformedRNG(seed: 0xA55E_2701)
        var direct = 0
        for v in validAssertions {
            let bytes = v.bytes("assertion_b64")
            #expect(AssertionObject.twoByteStrings(bytes) != nil, "\(v.name): a real assertion takes the direct path")
            agree(bytes, v.name)
            let (s, a) = try #require(general(bytes))
            // Keys swapped, a two-byte length head, an extra key: the same or the decoder's answer.
            let swapped =
                [0xA2] + CBOREncoder.encode(.text("authenticatorData")) + CBOREncoder.encode(.bytes(a))
                + CBOREncoder.encode(.text("signature")) + CBOREncoder.encode(.bytes(s))
            #expect(AssertionObject.twoByteStrings(swapped) != nil)
            agree(swapped, "\(v.name) swapped")
            let longHead =
                [0xA2, 0x69] + Array("signature".utf8) + [0x59, 0x00, UInt8(s.count)] + s
                + CBOREncoder.encode(.text("authenticatorData")) + CBOREncoder.encode(.bytes(a))
            agree(longHead, "\(v.name) long head")
            let extra = [0xA3] + Array(swapped.dropFirst()) + CBOREncoder.encode(.text("x")) + CBOREncoder.encode(.bytes([1]))
            #expect(AssertionObject.twoByteStrings(extra) == nil)
            let twice =
                [0xA2] + CBOREncoder.encode(.text("signature")) + CBOREncoder.encode(.bytes(s))
                + CBOREncoder.encode(.text("signature")) + CBOREncoder.encode(.bytes(s))
            #expect(AssertionObject.twoByteStrings(twice) == nil)
            #expect(code(parseAssertion(twice)) == .malformed)
            for n in 0..<1_540 {
                var m = bytes
                switch rng.next() % 4 {
                case 0: m[Int(rng.next() % UInt64(m.count))] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
                case 1: m[Int(rng.next() % UInt64(min(m.count, 40)))] = UInt8(truncatingIfNeeded: rng.next())
                case 2: m.removeSubrange(Int(rng.next() % UInt64(m.count))...)
                default: m.insert(UInt8(truncatingIfNeeded: rng.next()), at: Int(rng.next() % UInt64(m.count + 1)))
                }
                agree(m, "\(v.name) mutation \(n)")
                if AssertionObject.twoByteStrings(m) != nil { direct += 1 }
                // parse gives the same answer as the decoder's path: same bytes or same refusal.
                let viaParse = parseAssertion(m)
                if let (gs, ga) = general(m), !gs.isEmpty, let authData = try? AuthenticatorData.parse(ga, kind: .assertion) {
                    let parsed = try? viaParse.get()
                    #expect(parsed?.signature == gs && parsed?.authenticatorData.bytes == authData.bytes, "\(v.name) mutation \(n)")
                } else {
                    #expect((try? viaParse.get()) == nil, "\(v.name) mutation \(n): parsed where the decoder's path refuses")
                }
            }
        }
        // The mutations exercised the direct path, not only the fallback.
        #expect(direct > 1_000)
    }
}
