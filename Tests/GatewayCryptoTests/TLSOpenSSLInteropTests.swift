import Foundation
import GatewayCrypto
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// TLSSession against the real `openssl s_client` / `s_server` on loopback: one connection each,
/// sockets with 10 s timeouts, processes terminated at the end.
@Suite("TLS against the openssl binary", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
struct TLSOpenSSLInteropTests {
    @Test("openssl s_client verifies our server, negotiates h2, exchanges data and closes cleanly")
    func sClient() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let (listener, port) = try LoopbackSocket.listen()
        let tool = try OpenSSLTool([
            "s_client", "-connect", "127.0.0.1:\(port)", "-servername", "gateway.test", "-alpn", "h2,http/1.1",
            "-CAfile", pki.caPath, "-verify_return_error", "-verify_hostname", "gateway.test", "-brief",
        ])
        defer { tool.stop() }
        let socket = try listener.accept()
        let session = server.makeSession()
        try socket.handshake(session)
        let info = try #require(session.connectionInfo)
        #expect(info.alpn == "h2" && info.version == .tls13 && info.serverName == "gateway.test")

        tool.input.fileHandleForWriting.write(Data("hello from s_client\n".utf8))
        #expect(try socket.readPlaintext(session, until: { $0.last == 0x0a }) == Array("hello from s_client\n".utf8))
        #expect(try session.writePlaintext(Array("hello from gateway\n".utf8)) == 19)
        #expect(session.shutdown())
        try socket.flush(session)
        _ = try socket.readPlaintext(session, until: { _ in false })  // until close_notify or end of stream
        tool.waitForExit()
        let out = tool.standardOutput()
        let err = tool.standardError()
        #expect(out.contains("hello from gateway"), "\(out)")
        #expect(err.contains("Verification: OK"), "\(err)")
        #expect(err.contains("Protocol version: TLSv1.3"), "\(err)")
    }

    @Test("client-initiated renegotiation (openssl s_client's R command, TLS 1.2) is refused")
    func renegotiation() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let server = try pki.server([(leaf, [])])
        let (listener, port) = try LoopbackSocket.listen()
        let tool = try OpenSSLTool([
            "s_client", "-connect", "127.0.0.1:\(port)", "-servername", "gateway.test", "-tls1_2", "-CAfile", pki.caPath,
        ])
        defer { tool.stop() }
        let socket = try listener.accept()
        let session = server.makeSession()
        try socket.handshake(session)
        #expect(session.connectionInfo?.version == .tls12)
        tool.input.fileHandleForWriting.write(Data("R\n".utf8))
        var failure: TLSFailure? = nil
        do {
            _ = try socket.readPlaintext(session, until: { _ in false })
        } catch let f as TLSFailure {
            failure = f
        }
        tool.waitForExit()
        let out = tool.standardOutput() + tool.standardError()
        #expect(out.contains("RENEGOTIATING"), "\(out)")
        // Our server answers the new ClientHello with a no_renegotiation alert; s_client gives up with a
        // handshake_failure alert, which ends the session.
        #expect(out.contains("no renegotiation"), "\(out)")
        #expect(failure?.kind == .peerAlert, "\(String(describing: failure))")
    }

    @Test("our client verifies openssl s_server, presents a client certificate and exchanges data")
    func sServer() throws {
        let pki = try TLSTestPKI()
        let leaf = try pki.issue("gateway.test", dnsNames: ["gateway.test"])
        let clientLeaf = try pki.issue("gateway-client")
        let tool = try OpenSSLTool([
            "s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-cert", leaf.certificatePath, "-key", leaf.keyPath,
            "-CAfile", pki.caPath, "-Verify", "1", "-verify_return_error", "-alpn", "http/1.1", "-rev",
        ])
        defer { tool.stop() }
        let port = try #require(tool.acceptPort())
        let socket = try LoopbackSocket.connect(port: port)
        let session = try pki.client(clientLeaf: clientLeaf).makeSession(serverName: "gateway.test")
        try socket.handshake(session)
        let info = try #require(session.connectionInfo)
        #expect(info.alpn == "http/1.1")
        #expect(session.peerCertificate?.subject == "CN=gateway.test")
        #expect(try session.writePlaintext(Array("gateway\n".utf8)) == 8)
        try socket.flush(session)
        let answer = try socket.readPlaintext(session, until: { $0.contains(0x0a) })
        #expect(String(decoding: answer, as: UTF8.self).contains("yawetag"))
        #expect(session.shutdown())
        try socket.flush(session)
    }
}

struct InteropError: Error, CustomStringConvertible {
    let description: String
}

/// A blocking loopback TCP socket with 10 s send/receive timeouts.
final class LoopbackSocket {
    let fd: Int32

    init(fd: Int32) throws {
        self.fd = fd
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    static func loopback(port: UInt16) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = port.bigEndian
        a.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return a
    }

    static func listen() throws -> (LoopbackSocket, UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw InteropError(description: "socket: \(errno)") }
        let s = try LoopbackSocket(fd: fd)
        var addr = loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 4) == 0 else { throw InteropError(description: "bind/listen: \(errno)") }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return (s, UInt16(bigEndian: addr.sin_port))
    }

    static func connect(port: UInt16) throws -> LoopbackSocket {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw InteropError(description: "socket: \(errno)") }
        let s = try LoopbackSocket(fd: fd)
        var addr = loopback(port: port)
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard r == 0 else { throw InteropError(description: "connect: \(errno)") }
        return s
    }

    func accept() throws -> LoopbackSocket {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 10_000) == 1 else { throw InteropError(description: "no connection within 10 s") }
        let c = Glibc.accept(fd, nil, nil)
        guard c >= 0 else { throw InteropError(description: "accept: \(errno)") }
        return try LoopbackSocket(fd: c)
    }

    /// Sends all pending ciphertext.
    func flush(_ session: TLSSession) throws {
        while session.pendingCiphertextCount > 0 {
            let sent = session.sendCiphertext { bytes in max(0, send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))) }
            guard sent > 0 else { throw InteropError(description: "send: \(errno)") }
        }
    }

    /// One read from the socket fed to the session; false at end of stream.
    func receive(_ session: TLSSession) throws -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { throw InteropError(description: "recv: errno \(errno) (timeout?)") }
        guard n > 0 else { return false }
        buffer.withUnsafeBytes { session.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        return true
    }

    func handshake(_ session: TLSSession) throws {
        try flush(session)
        for _ in 0..<100 {
            guard case .inProgress = session.handshakeState else { break }
            guard try receive(session) else { throw InteropError(description: "end of stream during the handshake") }
            try flush(session)
        }
        if case .failed(let f) = session.handshakeState { throw f }
    }

    /// Plaintext until `done` holds, close_notify, or end of stream.
    func readPlaintext(_ session: TLSSession, until done: ([UInt8]) -> Bool) throws -> [UInt8] {
        var got: [UInt8] = []
        for _ in 0..<1000 {
            let r = session.readPlaintext { got.append(contentsOf: $0) }
            try flush(session)
            if done(got) { return got }
            switch r {
            case .closed: return got
            case .failed(let f): throw f
            default: break
            }
            guard try receive(session) else { return got }
        }
        return got
    }
}

/// `openssl` run with pipes; stopped (SIGTERM) if still running at the end.
final class OpenSSLTool {
    let process = Process()
    let input = Pipe()
    let output = Pipe()
    let errors = Pipe()
    private var outputSoFar = Data()

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// s_server's `ACCEPT 127.0.0.1:PORT` line.
    func acceptPort() -> UInt16? {
        while !String(decoding: outputSoFar, as: UTF8.self).contains("\n")
            || !String(decoding: outputSoFar, as: UTF8.self).contains("ACCEPT")
        {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            outputSoFar.append(chunk)
        }
        let text = String(decoding: outputSoFar, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT") }),
            let port = line.split(separator: ":").last
        else { return nil }
        return UInt16(port.trimmingCharacters(in: .whitespaces))
    }

    /// Waits up to 20 s for the process to exit by itself.
    func waitForExit() {
        for _ in 0..<200 where process.isRunning { usleep(100_000) }
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    func standardOutput() -> String {
        String(decoding: outputSoFar + output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    func standardError() -> String { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
}
