import CGatewayNGHTTP2
import Dispatch
import Foundation
import GatewayWire
import Synchronization
import Testing

@_spi(Issuing) @testable import GatewayCrypto

@Suite("SHA-256")
struct SHA256Tests {
    // FIPS 180-4 examples.
    @Test("known answers") func knownAnswers() {
        #expect(Hex.encode(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Hex.encode(SHA256.hash("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            Hex.encode(SHA256.hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            Hex.encode(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000)))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("two-part, slice and incremental hashing agree with one-shot") func parts() {
        let a = Array("hello, ".utf8)
        let b = Array("world".utf8)
        #expect(SHA256.hash(a, b) == SHA256.hash(a + b))
        #expect(SHA256.hash((a + b)[2...]) == SHA256.hash(Array((a + b)[2...])))
        let h = SHA256.Hasher()
        h.update(a)
        h.update([])
        h.update(b)
        #expect(h.finalize() == SHA256.hash(a + b))
        // The stack form and SHA-1 (which shares the thread's digest context) in between.
        let stack = a.withUnsafeBytes { ra in b.withUnsafeBytes { rb in SHA256.withDigest(ra, rb) { Array($0) } } }
        #expect(stack == SHA256.hash(a + b))
        #expect(Hex.encode(SHA1.hash("abc")) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Hex.encode(SHA256.hash("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("digests on eight threads at once (each keeps its own context) match one thread's")
    func threads() {
        let inputs = (0..<64).map { i in [UInt8]((0..<(i * 37 % 300)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }) }
        let expected = inputs.map { SHA256.hash($0) }
        let wrong = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for round in 0..<200 {
                let i = (t * 7 + round) % inputs.count
                if SHA256.hash(inputs[i]) != expected[i] { wrong.add(1, ordering: .relaxed) }
                if round % 50 == 0, SHA1.hash("abc") != SHA1.hash("abc") { wrong.add(1, ordering: .relaxed) }
            }
        }
        // Threads that exit free their context (pthread key destructor); new threads make their own.
        for _ in 0..<4 {
            let t = Thread { if SHA256.hash(inputs[5]) != expected[5] { wrong.add(1, ordering: .relaxed) } }
            t.start()
        }
        Thread.sleep(forTimeInterval: 0.2)
        #expect(wrong.load(ordering: .relaxed) == 0)
    }
}

@Suite("Constant-time comparison and randomness")
struct ConstantTimeTests {
    @Test func equality() {
        #expect(ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2, 3] as [UInt8]))
        #expect(!ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2, 4] as [UInt8]))
        #expect(!ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2] as [UInt8]))
        #expect(ConstantTime.equals([UInt8](), [UInt8]()))
        #expect(ConstantTime.equals(([9, 1, 2] as [UInt8])[1...], [1, 2] as [UInt8]))
    }

    @Test func randomBytesDiffer() {
        let a = SecureRandom.bytes(32)
        let b = SecureRandom.bytes(32)
        #expect(a.count == 32 && a != b)
    }
}

@Suite("P-256 public keys")
struct P256PublicKeyTests {
    // A real App Attest key (Apple documentation sample).
    static let point = try! Base64.decode("BIwuDKtvkiOXDn9atukv16TW1iGmDlSGRL8Zdk7x74U2EfbCtrtTsrui00aBl+S+qyw2ysDk4k9B81EyyUdeXCQ=")

    @Test("a real key parses and round-trips") func parses() throws {
        let key = try P256PublicKey(x962: Self.point)
        #expect(key.x962 == Self.point)
    }

    @Test("wrong length, compressed form and off-curve points are refused") func refused() {
        #expect(throws: P256PublicKey.Error.self) { try P256PublicKey(x962: Array(Self.point.prefix(64))) }
        #expect(throws: P256PublicKey.Error.self) { try P256PublicKey(x962: [0x02] + Array(Self.point[1..<33])) }
        var offCurve = Self.point
        offCurve[64] ^= 0x01
        #expect(throws: P256PublicKey.Error.self) { try P256PublicKey(x962: offCurve) }
        #expect(throws: P256PublicKey.Error.self) { try P256PublicKey(x962: [0x04] + [UInt8](repeating: 0, count: 64)) }
    }

    /// Every key is a copy of one shared set of curve parameters given its own point: a key
    /// verifies its own signatures and no other key's, the point OpenSSL holds is the one given,
    /// and keys made and used on several threads at once stay apart.
    @Test("keys made from one shared set of curve parameters stay apart, on several threads at once") func keysStayApart() throws {
        let signers = (0..<4).map { _ in ECPrivateKey(curve: .p256) }
        let message = Array("purchase #1".utf8)
        let signatures = signers.map { $0.signature(for: message) }
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for round in 0..<50 {
                for (i, signer) in signers.enumerated() {
                    guard let key = try? P256PublicKey(x962: signer.publicKeyX962),
                        P256PublicKey.uncompressedPoint(of: key.pkey) == signer.publicKeyX962,
                        key.isValidSignature(signatures[i], for: message),
                        !key.isValidSignature(signatures[(i + 1) % signers.count], for: message),
                        !key.isValidSignature(signatures[i], for: message + [UInt8(truncatingIfNeeded: worker + round)])
                    else {
                        failures.withLock { $0 += 1 }
                        continue
                    }
                }
            }
        }
        #expect(failures.withLock { $0 } == 0)
    }

    @Test("garbage signatures are refused, never a crash") func garbageSignatures() throws {
        let key = try P256PublicKey(x962: Self.point)
        #expect(!key.isValidSignature([], for: [1, 2, 3]))
        #expect(!key.isValidSignature([0x30, 0x00], for: [1, 2, 3]))
        #expect(!key.isValidSignature([UInt8](repeating: 0xff, count: 300), for: []))
    }
}

@Suite("X.509 chains to Apple's App Attestation root")
struct X509ChainTests {
    /// x5c of a real attestation (Apple's documentation sample) and Apple's root.
    static let x5c: [[UInt8]] = {
        let object = try! Base64.decode(
            String(contentsOfFile: samplePath("attestation.b64"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
        let value = try! CBORDecoder().decode(object)
        let chain = value.map![text: "attStmt"]!.map![text: "x5c"]!.array!
        return chain.map { $0.bytes! }
    }()

    static func samplePath(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("samples/apple-documentation-sample/\(name)").path
    }

    static let appleRoot = try! X509Certificate.parsePEM(
        String(
            contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("AppAttestTests/Vectors/apple-app-attest-root-ca.pem").path, encoding: .utf8))

    @Test("the Apple root parses with its published fingerprint and validity") func root() throws {
        let root = try #require(Self.appleRoot.first)
        #expect(Hex.encode(SHA256.hash(root.der)).uppercased() == "1CB9823BA28BA6AD2D33A006941DE2AE4F513EF1D4E831B9F7E0FA7B6242C932")
        #expect(root.serialHex == "0BF3BE0EF1CDD2E0FB8C6E721F621798")
        #expect(root.notBefore == 1_584_556_373)  // 2020-03-18T18:32:53Z
        #expect(root.subject.contains("Apple App Attestation Root CA"))
    }

    @Test("validity bounds are inclusive at both ends, to the second") func bounds() throws {
        let leaf = try X509Certificate(der: Self.x5c[0])
        let intermediate = try X509Certificate(der: Self.x5c[1])
        let verifier = X509ChainVerifier(roots: Self.appleRoot)
        let nb = Double(leaf.notBefore)
        let na = Double(leaf.notAfter)
        let chain = try verifier.verify(leaf: leaf, intermediates: [intermediate], at: nb)
        #expect(chain.count == 3)
        try verifier.verify(leaf: leaf, intermediates: [intermediate], at: na)
        #expect(throws: X509ChainVerifier.Failure.self) { try verifier.verify(leaf: leaf, intermediates: [intermediate], at: nb - 1) }
        #expect(throws: X509ChainVerifier.Failure.self) { try verifier.verify(leaf: leaf, intermediates: [intermediate], at: na + 0.5) }
        do {
            try verifier.verify(leaf: leaf, intermediates: [intermediate], at: na + 1)
            Issue.record("expired leaf accepted")
        } catch {
            guard case .expired = error else { Issue.record("wrong failure \(error)"); return }
        }
    }

    @Test("without the intermediate, or with a foreign root, the chain is untrusted") func untrusted() throws {
        let leaf = try X509Certificate(der: Self.x5c[0])
        let intermediate = try X509Certificate(der: Self.x5c[1])
        let verifier = X509ChainVerifier(roots: Self.appleRoot)
        let t = Double(leaf.notBefore) + 60
        #expect(throws: X509ChainVerifier.Failure.self) { try verifier.verify(leaf: leaf, intermediates: [], at: t) }
        // The intermediate as its own root does not make the leaf trusted through Apple's root store.
        let foreign = X509ChainVerifier(roots: [leaf])
        #expect(throws: X509ChainVerifier.Failure.self) { try foreign.verify(leaf: leaf, intermediates: [intermediate], at: t) }
    }

    @Test("the nonce extension is found, non-critical, and certificates reject trailing bytes") func extensionLookup() throws {
        let leaf = try X509Certificate(der: Self.x5c[0])
        guard case .present(let value, let critical) = leaf.extension(oid: "1.2.840.113635.100.8.2") else {
            Issue.record("nonce extension not found")
            return
        }
        #expect(!critical)
        #expect(value.count == 38)  // SEQUENCE { [1] { OCTET STRING (32) } }
        #expect(leaf.extension(oid: "1.2.3.4") == .absent)
        #expect(throws: X509Certificate.ParseError.self) { try X509Certificate(der: Self.x5c[0] + [0]) }
        #expect(throws: X509Certificate.ParseError.self) { try X509Certificate(der: Array(Self.x5c[0].dropLast())) }
        #expect(throws: X509Certificate.ParseError.self) { try X509Certificate.parsePEM("not a pem") }
    }
}

@Suite("System libraries")
struct SystemLibraryTests {
    @Test("nghttp2 links through its module map (for the HTTP/2 front)") func nghttp2() throws {
        let info = try #require(nghttp2_version(0))
        let version = String(cString: info.pointee.version_str)
        let parts = version.split(separator: ".").compactMap { Int($0) }
        #expect(parts.count >= 2)
        #expect(parts[0] > 1 || (parts[0] == 1 && parts[1] >= 43), "nghttp2 \(version) is too old")
    }
}
