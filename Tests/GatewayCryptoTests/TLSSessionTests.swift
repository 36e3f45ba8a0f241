import Foundation
@_spi(Testing) import GatewayCrypto
import SimulatorPKI
import Testing

@Suite("TLS sessions in memory")
struct TLSSessionTests {
    /// A client session for "gateway.test" and a server session with a leaf for that name, not yet
    /// handshaken (most tests then `pump` them).
    static func sessions() throws -> (TLSSession, TLSSession) {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        return (try pki.client().makeSession(serverName: "gateway.test"), server.makeSession())
    }

    @Test("TLS 1.3 handshake: ALPN h2, SNI, cipher, fresh session")
    func tls13() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let client = try pki.client().makeSession(serverName: "gateway.test")
        let s = server.makeSession()
        #expect(client.pendingCiphertextCount > 0)  // the ClientHello
        pump(client, s)
        let si = try #require(s.handshakeState.info)
        let ci = try #require(client.handshakeState.info)
        #expect(si.version == .tls13 && ci.version == .tls13)
        #expect(si.alpn == "h2" && ci.alpn == "h2")
        #expect(si.serverName == "gateway.test")
        #expect(si.cipher == ci.cipher && si.cipher.hasPrefix("TLS_"))
        #expect(!si.resumed && !ci.resumed)
        #expect(si.certificateIndex == 0)
        #expect(client.peerCertificate?.der == leaf.certificate.der)
    }

    @Test("TLS 1.2 handshake uses an ECDHE AEAD suite")
    func tls12() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let client = try pki.client(alpn: ["http/1.1"], maximumVersion: .tls12).makeSession(serverName: "gateway.test")
        let s = server.makeSession()
        pump(client, s)
        let si = try #require(s.handshakeState.info)
        #expect(si.version == .tls12)
        #expect(si.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256")
        #expect(si.alpn == "http/1.1")
        #expect(client.handshakeState.info?.version == .tls12)
    }

    @Test("ALPN: server preference, HTTP/1-only listeners, no overlap refused, no ALPN allowed")
    func alpn() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let both = try pki.server([(leaf, [])])
        let http1Only = try pki.server([(leaf, [])], alpn: ["http/1.1"])

        func handshake(_ server: TLSServerContext, clientALPN: [String]) throws -> (TLSSession, TLSSession) {
            let c = try pki.client(alpn: clientALPN).makeSession(serverName: "gateway.test")
            let s = server.makeSession()
            pump(c, s)
            return (c, s)
        }
        // The client prefers http/1.1, the server h2: the server's order wins.
        #expect(try handshake(both, clientALPN: ["http/1.1", "h2"]).1.handshakeState.info?.alpn == "h2")
        #expect(try handshake(http1Only, clientALPN: ["h2", "http/1.1"]).1.handshakeState.info?.alpn == "http/1.1")
        #expect(try handshake(both, clientALPN: []).1.handshakeState.info?.alpn == nil)
        let (c, s) = try handshake(http1Only, clientALPN: ["h2"])
        #expect(s.handshakeState.failure?.kind == .noApplicationProtocol)
        #expect(c.handshakeState.failure?.kind == .noApplicationProtocol)
    }

    @Test("SNI chooses the certificate: exact names, one-label wildcards, default otherwise")
    func sni() throws {
        let pki = try TLSTestPKI()
        let fallback = try pki.issue("default.test", dnsNames: ["default.test"])
        let api = try pki.issue("api.example.com", dnsNames: ["api.example.com"])
        let wild = try pki.issue("wildcard.example.com", dnsNames: ["*.example.com"])
        let server = try pki.server([(fallback, []), (api, ["API.example.com"]), (wild, ["*.example.com"])])
        #expect(server.leafCertificates.map(\.der) == [fallback, api, wild].map(\.certificate.der))

        let expectations: [(String, Int, String)] = [
            ("api.example.com", 1, "CN=api.example.com"),
            ("API.EXAMPLE.COM", 1, "CN=api.example.com"),
            ("www.example.com", 2, "CN=wildcard.example.com"),
            ("a.b.example.com", 0, "CN=default.test"),
            ("example.com", 0, "CN=default.test"),
            ("other.test", 0, "CN=default.test"),
        ]
        for (name, index, subject) in expectations {
            #expect(server.certificateIndex(forServerName: name) == index)
            let c = try pki.client(verify: false).makeSession(serverName: name)
            let s = server.makeSession()
            pump(c, s)
            let info = try #require(s.handshakeState.info, "\(name)")
            #expect(info.certificateIndex == index, "\(name)")
            #expect(info.serverName == name.lowercased())
            #expect(c.peerCertificate?.subject == subject, "\(name)")
        }
        // Verified against the names in the certificate chosen.
        let verified = try pki.client().makeSession(serverName: "www.example.com")
        let s = server.makeSession()
        pump(verified, s)
        #expect(verified.handshakeState.info != nil)
    }

    @Test("resumption with a ticket, TLS 1.3 and 1.2; each resumption brings a fresh ticket; reloads keep the keys")
    func resumption() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        for version in [TLSVersion.tls13, .tls12] {
            let clientContext = try pki.client(maximumVersion: version)
            func connect(_ context: TLSServerContext, resuming ticket: TLSResumableSession?) throws -> (TLSSession, TLSSession) {
                let c = try clientContext.makeSession(serverName: "gateway.test", resuming: ticket)
                let s = context.makeSession()
                pump(c, s)
                #expect(s.handshakeState.info?.version == version)
                #expect(c.handshakeState.info?.resumed == s.handshakeState.info?.resumed)
                return (c, s)
            }
            let (first, s1) = try connect(server, resuming: nil)
            #expect(s1.handshakeState.info?.resumed == false)
            let ticket1 = try #require(first.resumableSession(), "\(version)")

            let (second, s2) = try connect(server, resuming: ticket1)
            #expect(s2.handshakeState.info?.resumed == true, "\(version)")
            let ticket2 = try #require(second.resumableSession(), "\(version)")

            // A reload builds a new context; given the running context's keys, tickets still work.
            let reloaded = try pki.server([(leaf, [])], ticketKeys: server.ticketKeys)
            let (third, s3) = try connect(reloaded, resuming: ticket2)
            #expect(s3.handshakeState.info?.resumed == true, "\(version)")
            let ticket3 = try #require(third.resumableSession(), "\(version)")

            // Other keys: a full handshake, not a failure.
            let (_, s4) = try connect(try pki.server([(leaf, [])]), resuming: ticket3)
            #expect(s4.handshakeState.info?.resumed == false, "\(version)")
        }
    }

    @Test("rotated ticket keys accept the previous key's tickets, not older ones")
    func rotation() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let clientContext = try pki.client()

        /// Connects, offering `ticket`; returns whether the session was resumed and the new ticket.
        func connect(resuming ticket: TLSResumableSession?) throws -> (Bool, TLSResumableSession) {
            let c = try clientContext.makeSession(serverName: "gateway.test", resuming: ticket)
            let s = server.makeSession()
            pump(c, s)
            let info = try #require(s.handshakeState.info)
            #expect(c.handshakeState.info?.resumed == info.resumed)
            return (info.resumed, try #require(c.resumableSession()))
        }
        // Two tickets under the first key.
        let (_, a) = try connect(resuming: nil)
        let (_, b) = try connect(resuming: nil)
        server.rotateTicketKeys()
        #expect(server.ticketKeys.rotations == 1)
        let (resumedA, renewed) = try connect(resuming: a)
        #expect(resumedA)  // the previous key still decrypts
        server.rotateTicketKeys()
        #expect(try !connect(resuming: b).0)  // two rotations old: full handshake
        #expect(try connect(resuming: renewed).0)  // renewed under the key that is now previous
    }

    @Test("a TLS 1.1 ClientHello is refused with protocol_version")
    func tls11Refused() throws {
        let pki = try TLSTestPKI()
        let server = try pki.server([(try pki.issue("gateway.test"), [])])
        let s = server.makeSession()
        // ClientHello, legacy_version 3.2 (TLS 1.1), two TLS 1.1 suites, no extensions.
        var body: [UInt8] = [0x03, 0x02] + [UInt8](repeating: 0x42, count: 32) + [0x00]
        body += [0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f, 0x01, 0x00]
        let handshake: [UInt8] = [0x01, 0x00, UInt8(body.count >> 8), UInt8(body.count & 0xff)] + body
        let record: [UInt8] = [0x16, 0x03, 0x01, UInt8(handshake.count >> 8), UInt8(handshake.count & 0xff)] + handshake
        s.feed(record)
        #expect(s.handshakeState.failure?.kind == .unsupportedVersion)
        let alert = s.takeCiphertext()
        #expect(alert.first == 0x15)  // an alert record for the client
        #expect(alert.last == 70)  // protocol_version
    }

    @Test("a client limited to TLS 1.2 meets a TLS 1.3-only server: unsupported version on both sides")
    func versionMismatch() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: [.init(certificatePath: leaf.certificatePath, privateKeyPath: leaf.keyPath)], minimumVersion: .tls13))
        let c = try pki.client(maximumVersion: .tls12).makeSession(serverName: "gateway.test")
        let s = server.makeSession()
        pump(c, s)
        #expect(s.handshakeState.failure?.kind == .unsupportedVersion)
        #expect(c.handshakeState.failure?.kind == .unsupportedVersion)
    }

    @Test("plain HTTP on the TLS port is recognised, even split in pieces")
    func plainHTTP() throws {
        let pki = try TLSTestPKI()
        let server = try pki.server([(try pki.issue("gateway.test"), [])])
        for request in [
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "POST /api HTTP/1.1\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "OPTIONS * HTTP/1.1\r\n",
        ] {
            let s = server.makeSession()
            for byte in Array(request.utf8).prefix(3) {
                s.feed([byte])
                #expect(s.handshakeState == .inProgress, "\(request)")
            }
            s.feed(Array(Array(request.utf8).dropFirst(3)))
            #expect(s.handshakeState == .plainHTTPOnTLSPort, "\(request)")
            #expect(s.pendingCiphertextCount == 0)
            var buffer = [UInt8](repeating: 0, count: 64)
            #expect(
                buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) }
                    == .failed(TLSFailure(.plainHTTP, "plain HTTP request on a TLS port")))
        }
        #expect(String(decoding: TLSSession.plainHTTPRejection, as: UTF8.self).hasPrefix("HTTP/1.1 400 "))
    }

    @Test("garbage instead of a ClientHello fails cleanly")
    func garbage() throws {
        let pki = try TLSTestPKI()
        let server = try pki.server([(try pki.issue("gateway.test"), [])])
        let inputs: [[UInt8]] = [
            [0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0xff],  // a handshake record with a truncated hello
            [0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0x03, 0x03, 0x00, 0x00],  // too short a hello
            Array("get / HTTP/1.1\r\n".utf8),  // not a method token: not HTTP either
            [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09],
            [UInt8](repeating: 0x41, count: 12),  // eight letters and no space
        ]
        for input in inputs {
            let s = server.makeSession()
            s.feed(input)
            let failure = try #require(s.handshakeState.failure, "\(input)")
            #expect(failure.kind == .protocolError, "\(input): \(failure)")
            // Later input is ignored, nothing is written as plaintext.
            s.feed(input)
            #expect(throws: TLSFailure.self) { try s.writePlaintext([1, 2, 3]) }
        }
    }

    @Test("1 MiB each way through the pair, under the high-water mark")
    func bigTransfers() throws {
        let (c, s) = try Self.sessions()
        #expect(try c.writePlaintext([1, 2, 3]) == 0)  // handshake not done yet: nothing taken
        pump(c, s)
        #expect(c.handshakeState.info != nil)

        let up = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let down = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ 3) }
        var sentUp = 0
        var sentDown = 0
        var receivedUp: [UInt8] = []
        var receivedDown: [UInt8] = []
        var maxPending = 0
        c.ciphertextHighWater = 64 * 1024
        var rounds = 0
        while receivedUp.count < up.count || receivedDown.count < down.count {
            rounds += 1
            try #require(rounds < 10_000)
            if sentUp < up.count {
                sentUp += try up.withUnsafeBytes { try c.writePlaintext(UnsafeRawBufferPointer(rebasing: $0[sentUp...])) }
            }
            if sentDown < down.count {
                sentDown += try down.withUnsafeBytes { try s.writePlaintext(UnsafeRawBufferPointer(rebasing: $0[sentDown...])) }
            }
            maxPending = max(maxPending, c.pendingCiphertextCount)
            // Send in socket-sized pieces, as a non-blocking write would.
            c.sendCiphertext { bytes in
                let n = min(bytes.count, 50_000)
                s.feed(UnsafeRawBufferPointer(rebasing: bytes[0..<n]))
                return n
            }
            var chunk = [UInt8](repeating: 0, count: 40_000)
            while true {
                let n = chunk.withUnsafeMutableBytes { s.readCiphertext(into: $0) }
                if n == 0 { break }
                chunk.withUnsafeBytes { c.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            }
            #expect(s.readPlaintext { receivedUp.append(contentsOf: $0) } == .needMoreInput)
            #expect(c.readPlaintext { receivedDown.append(contentsOf: $0) } == .needMoreInput)
        }
        #expect(receivedUp == up)
        #expect(receivedDown == down)
        // Drained buffers do not keep the memory of the burst.
        #expect(c.pendingCiphertextCount == 0 && s.pendingCiphertextCount == 0)
        #expect(c.bufferCapacity <= 2 * 64 * 1024 && s.bufferCapacity <= 2 * 64 * 1024, "\(c.bufferCapacity) \(s.bufferCapacity)")
        // writePlaintext stops once the high-water mark is reached (one 64 KiB chunk may cross it).
        #expect(maxPending <= 64 * 1024 + 64 * 1024 + 1024)
    }

    @Test(
        "records fed one byte at a time or whole: all plaintext comes out, in several reads when the buffer is small (the session holds the rest); drained reads say needMoreInput"
    )
    func splitRecords() throws {
        let (c, s) = try Self.sessions()
        pump(c, s)
        var buffer = [UInt8](repeating: 0, count: 64)
        // Nothing fed: no plaintext, repeatedly (the session keeps nothing behind).
        for _ in 0..<3 { #expect(buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) } == .needMoreInput) }
        // 180 bytes: more than the 64-byte buffer, so the rest of the record waits inside the session
        // while its input buffer is already empty.
        let message = Array(String(repeating: "one record, split ", count: 10).utf8)
        #expect(try c.writePlaintext(message) == message.count)
        #expect(try c.writePlaintext(Array("second".utf8)) == 6)
        let wire = c.takeCiphertext()
        var got: [UInt8] = []
        var results: [TLSReadResult] = []
        for b in wire {
            s.feed([b])
            while true {
                let r = buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) }
                results.append(r)
                guard case .bytes(let n) = r else { break }
                got.append(contentsOf: buffer[0..<n])
            }
        }
        #expect(got == message + Array("second".utf8))
        // Plaintext came in 64 + 64 + 52 bytes, then 6; every other read asked for more input.
        let sizes = results.compactMap { if case .bytes(let n) = $0 { n } else { nil } }
        #expect(sizes == [64, 64, 52, 6])
        #expect(results.filter { $0 == .needMoreInput }.count == results.count - 4)
        // One whole record fed at once, read 64 bytes at a time: after the first read the input buffer
        // is empty but the session still holds 116 bytes, which the next reads return.
        #expect(try c.writePlaintext(message) == message.count)
        s.feed(c.takeCiphertext())
        var whole: [UInt8] = []
        var last: TLSReadResult
        repeat {
            last = buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) }
            if case .bytes(let n) = last { whole.append(contentsOf: buffer[0..<n]) }
        } while last != .needMoreInput
        #expect(whole == message)
        // A close_notify split in two still arrives.
        #expect(c.shutdown())
        let close = c.takeCiphertext()
        s.feed(Array(close.prefix(2)))
        #expect(buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) } == .needMoreInput)
        s.feed(Array(close.dropFirst(2)))
        #expect(buffer.withUnsafeMutableBytes { s.readPlaintext(into: $0) } == .closed)
    }

    @Test("close_notify both ways; writing after shutdown is refused")
    func closeNotify() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let c = try pki.client().makeSession(serverName: "gateway.test")
        let s = server.makeSession()
        #expect(!s.shutdown())  // nothing to close cleanly before the handshake
        pump(c, s)
        #expect(try c.writePlaintext(Array("last words".utf8)) == 10)
        #expect(c.shutdown())
        #expect(!c.shutdown())
        #expect(throws: TLSFailure(.closed, "write after close_notify")) { try c.writePlaintext([1]) }
        s.feed(c.takeCiphertext())
        var got: [UInt8] = []
        #expect(s.readPlaintext { got.append(contentsOf: $0) } == .closed)
        #expect(String(decoding: got, as: UTF8.self) == "last words")
        #expect(s.receivedCloseNotify)
        // The server answers after the client's close (half-close), then closes too.
        #expect(try s.writePlaintext(Array("bye".utf8)) == 3)
        #expect(s.shutdown())
        c.feed(s.takeCiphertext())
        var back: [UInt8] = []
        #expect(c.readPlaintext { back.append(contentsOf: $0) } == .closed)
        #expect(back == Array("bye".utf8))
        #expect(c.receivedCloseNotify && c.sentCloseNotify)
    }

    @Test("a corrupted record after the handshake fails the session")
    func corruptedRecord() throws {
        let (c, s) = try Self.sessions()
        pump(c, s)
        _ = try c.writePlaintext(Array("hello".utf8))
        var record = c.takeCiphertext()
        record[record.count - 1] ^= 0x01
        s.feed(record)
        let result = s.readPlaintext { _ in }
        guard case .failed(let f) = result else {
            Issue.record("expected a failure, got \(result)")
            return
        }
        #expect(f.kind == .protocolError)
        #expect(s.failure == f)
        #expect(s.pendingCiphertextCount > 0)  // the bad_record_mac alert (encrypted, in TLS 1.3)
        #expect(throws: f) { try s.writePlaintext([1]) }
    }
}

@Suite("TLS verification and client certificates")
struct TLSVerificationTests {
    @Test("the client refuses a wrong host name")
    func wrongHostname() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let c = try pki.client().makeSession(serverName: "other.test")
        let s = server.makeSession()
        pump(c, s)
        let f = try #require(c.handshakeState.failure)
        #expect(f.kind == .certificateVerification)
        #expect(f.detail.contains("hostname mismatch"))
        #expect(s.handshakeState.failure?.kind == .peerAlert || s.handshakeState.failure?.kind == .certificateVerification)
        // Without verification the same name is accepted.
        let lax = try pki.client(verify: false).makeSession(serverName: "other.test")
        let s2 = server.makeSession()
        pump(lax, s2)
        #expect(lax.handshakeState.info != nil)
    }

    @Test("the client refuses an unknown CA (another CA file, or the system roots)")
    func unknownCA() throws {
        let pki = try TLSTestPKI()
        let other = try TLSTestPKI(caName: "another CA")
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        for clientContext in [try pki.client(caFile: other.caPath), try TLSClientContext(configuration: TLSClientConfiguration())] {
            let c = try clientContext.makeSession(serverName: "gateway.test")
            let s = server.makeSession()
            pump(c, s)
            let f = try #require(c.handshakeState.failure)
            #expect(f.kind == .certificateVerification)
            #expect(
                f.detail.contains("unable to get local issuer certificate")
                    || f.detail.contains("self-signed certificate in certificate chain"),
                "\(f)")
        }
    }

    @Test("an IP address is verified against the certificate's iPAddress names, without SNI")
    func ipAddress() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("loopback", ipAddresses: [[127, 0, 0, 1]])
        let server = try pki.server([(leaf, [])])
        let c = try pki.client().makeSession(serverName: "127.0.0.1")
        let s = server.makeSession()
        pump(c, s)
        #expect(s.handshakeState.info?.serverName == nil)
        #expect(c.handshakeState.info != nil)
        let wrong = try pki.client().makeSession(serverName: "127.0.0.2")
        let s2 = server.makeSession()
        pump(wrong, s2)
        #expect(wrong.handshakeState.failure?.kind == .certificateVerification)
    }

    @Test("a client certificate is presented and verified; a missing one is refused")
    func clientCertificate() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let clientLeaf = try pki.issue("gateway-client")
        let server = try pki.server([(leaf, [])], clientCA: pki.caPath)
        for version in [TLSVersion.tls13, .tls12] {
            let context = try pki.client(maximumVersion: version, clientLeaf: clientLeaf)
            #expect(context.clientCertificate?.der == clientLeaf.certificate.der)
            let c = try context.makeSession(serverName: "gateway.test")
            let s = server.makeSession()
            pump(c, s)
            #expect(s.handshakeState.info != nil, "\(version)")
            #expect(s.peerCertificate?.subject == "CN=gateway-client")

            let anonymous = try pki.client(maximumVersion: version).makeSession(serverName: "gateway.test")
            let s2 = server.makeSession()
            pump(anonymous, s2)
            #expect(s2.handshakeState.failure?.kind == .certificateVerification, "\(version)")
            #expect(anonymous.handshakeState.info == nil || anonymous.readPlaintext { _ in } != .needMoreInput)
        }
    }
}

@Suite("TLS contexts refuse bad files and settings")
struct TLSContextErrorTests {
    func serverError(_ certificates: [TLSServerConfiguration.Certificate], alpn: [String] = ["http/1.1"]) -> TLSContextError? {
        do {
            _ = try TLSServerContext(configuration: TLSServerConfiguration(certificates: certificates, alpnProtocols: alpn))
            return nil
        } catch {
            return error
        }
    }

    @Test("a private key readable by group or others is refused, naming the file and its mode")
    func loosePermissions() throws {
        let pki = try TLSTestPKI()
        for mode in [0o644, 0o640, 0o604, 0o660] {
            let leaf = try pki.issue("gateway.test", keyMode: mode)
            let e = try #require(serverError([.init(certificatePath: leaf.certificatePath, privateKeyPath: leaf.keyPath)]))
            #expect(e.kind == .insecureKeyPermissions)
            #expect(e.message.contains(leaf.keyPath))
            #expect(e.message.contains("mode 0" + String(mode, radix: 8)))
        }
        let strict = try pki.issue("gateway.test", keyMode: 0o400)
        #expect(serverError([.init(certificatePath: strict.certificatePath, privateKeyPath: strict.keyPath)]) == nil)
    }

    @Test("a key that is not the certificate's is refused")
    func mismatch() throws {
        let pki = try TLSTestPKI()
        let a = try pki.issue("a.test")
        let b = try pki.issue("b.test")
        let e = try #require(serverError([.init(certificatePath: a.certificatePath, privateKeyPath: b.keyPath)]))
        #expect(e.kind == .keyMismatch)
        #expect(e.message.contains(b.keyPath) && e.message.contains(a.certificatePath))
        // The second certificate is checked too.
        let e2 = try #require(
            serverError([
                .init(certificatePath: a.certificatePath, privateKeyPath: a.keyPath),
                .init(certificatePath: b.certificatePath, privateKeyPath: a.keyPath, serverNames: ["b.test"]),
            ]))
        #expect(e2.kind == .keyMismatch)
    }

    @Test("missing and unparsable files are refused clearly")
    func badFiles() throws {
        let pki = try TLSTestPKI()
        let good = try pki.issue("gateway.test")
        let missing = pki.directory + "/missing.pem"
        var e = try #require(serverError([.init(certificatePath: missing, privateKeyPath: good.keyPath)]))
        #expect(e.kind == .unreadableFile && e.message.contains(missing) && e.message.contains("No such file"))
        e = try #require(serverError([.init(certificatePath: good.certificatePath, privateKeyPath: missing)]))
        #expect(e.kind == .unreadableFile && e.message.contains(missing))

        let junk = try pki.write("not a certificate\n", named: "junk.pem")
        e = try #require(serverError([.init(certificatePath: junk, privateKeyPath: good.keyPath)]))
        #expect(e.kind == .invalidCertificate && e.message.contains(junk))

        let junkKey = pki.directory + "/junk.key"
        _ = FileManager.default.createFile(
            atPath: junkKey, contents: Data("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8),
            attributes: [.posixPermissions: 0o600])
        e = try #require(serverError([.init(certificatePath: good.certificatePath, privateKeyPath: junkKey)]))
        #expect(e.kind == .invalidPrivateKey && e.message.contains(junkKey))

        // An encrypted key is refused without prompting for a password.
        let encryptedKey = pki.directory + "/encrypted.key"
        let encrypted = """
            -----BEGIN ENCRYPTED PRIVATE KEY-----
            MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAhs2uzQgB0AGAICCAAw
            DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEECU6+Ofs8XZ/LqtSelIBxFQEgZBV
            WVVXQuTWKvDW5OcviJ0EqVP3OrApxusd2aVJskDBffMj5XYyzDFPZeARWz477d87
            GObWcu7iQYas5zyVuYvDpRoGLkRJsxJVJjiUjr3NvC0UGsUDjWbGGLwmXWHGsR6B
            aC2GjiJFrqcwIvTq43P01b3/77jtWoCjPi24+oSX3yQ2/JKu0nwathNNMQ4zEWs=
            -----END ENCRYPTED PRIVATE KEY-----

            """
        _ = FileManager.default.createFile(atPath: encryptedKey, contents: Data(encrypted.utf8), attributes: [.posixPermissions: 0o600])
        e = try #require(serverError([.init(certificatePath: good.certificatePath, privateKeyPath: encryptedKey)]))
        #expect(e.kind == .invalidPrivateKey && e.message.contains("unencrypted"))

        e = try #require(serverError([.init(certificatePath: pki.directory, privateKeyPath: good.keyPath)]))
        #expect(e.kind == .unreadableFile && e.message.contains("not a regular file"))
    }

    @Test("bad names, ALPN lists, versions and client settings are refused")
    func badSettings() throws {
        let pki = try TLSTestPKI()
        let good = try pki.issue("gateway.test")
        for names in [["*"], ["*.*.example.com"], ["bad name"], ["a..b"], ["*example.com"]] {
            let e = try #require(
                serverError([.init(certificatePath: good.certificatePath, privateKeyPath: good.keyPath, serverNames: names)]))
            #expect(e.kind == .invalidConfiguration, "\(names)")
        }
        let e = try #require(serverError([.init(certificatePath: good.certificatePath, privateKeyPath: good.keyPath)], alpn: [""]))
        #expect(e.kind == .invalidConfiguration)
        #expect(serverError([])?.kind == .invalidConfiguration)
        #expect(throws: TLSContextError.self) {
            _ = try TLSServerContext(
                configuration: TLSServerConfiguration(
                    certificates: [.init(certificatePath: good.certificatePath, privateKeyPath: good.keyPath)],
                    minimumVersion: .tls13, maximumVersion: .tls12))
        }
        #expect(throws: TLSContextError.self) {
            _ = try TLSClientContext(configuration: TLSClientConfiguration(clientCertificatePath: good.certificatePath))
        }
        #expect(throws: TLSContextError.self) {
            _ = try TLSClientContext(configuration: TLSClientConfiguration(tls12Ciphers: "NOT-A-CIPHER"))
        }
        #expect(throws: TLSContextError.self) {
            _ = try TLSClientContext(configuration: TLSClientConfiguration(caFile: pki.directory + "/none.pem"))
        }
        #expect(throws: TLSContextError.self) {
            _ = try TLSClientContext(configuration: TLSClientConfiguration()).makeSession(serverName: "bad name")
        }
    }
}

/// Test certificates on disk (a private CA and leaves with subjectAltName), in a fresh directory
/// removed at deinit. Keys are written with mode 0600 unless a test asks otherwise.
final class TLSTestPKI {
    let directory: String
    let caKey = ECPrivateKey(curve: .p256)
    let ca: X509Certificate
    let caPath: String
    private let caName: CertificateBuilder.Name

    init(caName: String = "attest-gateway test CA") throws {
        directory = NSTemporaryDirectory() + "tls-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.caName = .init(commonName: caName)
        let now = Int64(Date().timeIntervalSince1970)
        ca = try CertificateBuilder(
            subject: self.caName, issuer: self.caName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: now - 3600, notAfter: now + 30 * 86400, subjectKey: caKey,
            basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: caKey)
        caPath = directory + "/ca.pem"
        try ca.pem.write(toFile: caPath, atomically: true, encoding: .utf8)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    struct Leaf {
        let certificatePath: String
        let keyPath: String
        let certificate: X509Certificate
        let key: ECPrivateKey
    }

    /// A leaf signed by this CA for `dnsNames` and `ipAddresses` (subjectAltName), chain = leaf + CA.
    func issue(
        _ commonName: String, dnsNames: [String] = [], ipAddresses: [[UInt8]] = [], keyMode: Int = 0o600
    ) throws -> Leaf {
        let key = ECPrivateKey(curve: .p256)
        let now = Int64(Date().timeIntervalSince1970)
        let names =
            dnsNames.map { CertificateBuilder.DER.element(tag: 0x82, Array($0.utf8)) }
            + ipAddresses.map { CertificateBuilder.DER.element(tag: 0x87, $0) }
        let san = CertificateBuilder.Extension(oid: "2.5.29.17", critical: false, value: CertificateBuilder.DER.sequence(names))
        let cert = try CertificateBuilder(
            subject: .init(commonName: commonName), issuer: caName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: now - 3600, notAfter: now + 30 * 86400, subjectKey: key, basicConstraints: .endEntity,
            keyUsage: [.digitalSignature], extensions: names.isEmpty ? [] : [san]
        ).sign(with: caKey)
        let base = directory + "/" + commonName.replacingOccurrences(of: "*", with: "star") + "-" + UUID().uuidString.prefix(8)
        let certPath = base + ".crt"
        let keyPath = base + ".key"
        try X509Certificate.pem([cert, ca]).write(toFile: certPath, atomically: true, encoding: .utf8)
        try writeKey(key, to: keyPath, mode: keyMode)
        return Leaf(certificatePath: certPath, keyPath: keyPath, certificate: cert, key: key)
    }

    func writeKey(_ key: ECPrivateKey, to path: String, mode: Int = 0o600) throws {
        _ = FileManager.default.createFile(atPath: path, contents: Data(key.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600])
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    func write(_ text: String, named name: String) throws -> String {
        let path = directory + "/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A server context with one certificate per entry (the first is the default).
    func server(
        _ leaves: [(Leaf, [String])], alpn: [String] = ["h2", "http/1.1"], clientCA: String? = nil,
        ticketKeys: TLSTicketKeys = TLSTicketKeys()
    ) throws -> TLSServerContext {
        try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: leaves.map { .init(certificatePath: $0.0.certificatePath, privateKeyPath: $0.0.keyPath, serverNames: $0.1) },
                alpnProtocols: alpn, clientCertificateCAFile: clientCA),
            ticketKeys: ticketKeys)
    }

    func client(
        alpn: [String] = ["h2", "http/1.1"], maximumVersion: TLSVersion = .tls13, caFile: String? = nil, verify: Bool = true,
        clientLeaf: Leaf? = nil
    ) throws -> TLSClientContext {
        try TLSClientContext(
            configuration: TLSClientConfiguration(
                caFile: caFile ?? caPath, verify: verify, clientCertificatePath: clientLeaf?.certificatePath,
                clientKeyPath: clientLeaf?.keyPath, alpnProtocols: alpn, maximumVersion: maximumVersion))
    }
}

/// Moves ciphertext both ways until neither side has anything to send; reads plaintext on both sides
/// (which also processes TLS 1.3 tickets). Returns the plaintext each side received.
@discardableResult
func pump(_ client: TLSSession, _ server: TLSSession, rounds: Int = 64) -> (client: [UInt8], server: [UInt8]) {
    var toClient: [UInt8] = []
    var toServer: [UInt8] = []
    for _ in 0..<rounds {
        let c = client.takeCiphertext()
        if !c.isEmpty { server.feed(c) }
        _ = server.readPlaintext { toServer.append(contentsOf: $0) }
        let s = server.takeCiphertext()
        if !s.isEmpty { client.feed(s) }
        _ = client.readPlaintext { toClient.append(contentsOf: $0) }
        if c.isEmpty && s.isEmpty && client.pendingCiphertextCount == 0 && server.pendingCiphertextCount == 0 { break }
    }
    return (toClient, toServer)
}

extension TLSHandshakeState {
    var info: TLSConnectionInfo? {
        if case .done(let i) = self { return i }
        return nil
    }

    var failure: TLSFailure? {
        if case .failed(let f) = self { return f }
        return nil
    }
}
