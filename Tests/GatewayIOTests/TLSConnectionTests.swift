import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayTestSupport
import Glibc
import Testing

/// A CA and a `localhost`/127.0.0.1 certificate made with the openssl CLI (key 0600), plus a second,
/// untrusted CA; removed by `remove()`.
final class TLSFiles: @unchecked Sendable {
    let dir: URL

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-io-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for ca in ["ca", "other-ca"] {
            try Self.openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(ca).key"),
                "-out", path("\(ca).pem"), "-days", "2", "-subj", "/CN=\(ca)",
            ])
        }
        try Self.openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("server.key"),
            "-out", path("server.csr"), "-subj", "/CN=localhost",
        ])
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(toFile: path("server.ext"), atomically: true, encoding: .utf8)
        try Self.openssl([
            "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
            "-days", "2", "-extfile", path("server.ext"), "-out", path("server.pem"),
        ])
        chmod(path("server.key"), 0o600)
    }

    func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    func serverContext() throws -> TLSServerContext {
        try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: [.init(certificatePath: path("server.pem"), privateKeyPath: path("server.key"))], alpnProtocols: ["http/1.1"])
        )
    }

    func clientContext(ca: String = "ca") throws -> TLSClientContext {
        try TLSClientContext(configuration: TLSClientConfiguration(caFile: path("\(ca).pem")))
    }

    private static func openssl(_ args: [String]) throws {
        let r = try runProcess(URL(fileURLWithPath: "/usr/bin/openssl"), args)
        guard r.status == 0 else { throw HTTPTestError("openssl: \(r.stderr)") }
    }

    func remove() { try? FileManager.default.removeItem(at: dir) }
}

/// A TLS echo server on the loop (pauses reading above 256 KiB of unsent output) that records
/// handshakes, failures and ends.
final class TLSEchoServer: ConnectionDelegate, @unchecked Sendable {
    let loop: EventLoop
    var listener: Listener!
    var connections: [ObjectIdentifier: Connection] = [:]
    var handshakes: [TLSConnectionInfo] = []
    var failures: [TLSFailure.Kind] = []
    var eofs = 0
    var pauses = 0

    init(loop: EventLoop, context: TLSServerContext) throws {
        self.loop = loop
        try loop.queue.sync {
            listener = try Listener(address: try SocketAddress("127.0.0.1:0"), loop: loop, reusePort: false) { [unowned self] fd, peer in
                // Small kernel buffers, so that a client that does not read makes the output queue grow.
                var size: Int32 = 32 * 1024
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
                guard let c = try? Connection(fd: fd, loop: loop, peer: peer, tls: context.makeSession()) else {
                    Socket.close(fd)
                    return
                }
                c.delegate = self
                connections[ObjectIdentifier(c)] = c
            }
        }
    }

    var port: UInt16 { listener.address.port }

    func connectionDidCompleteHandshake(_ c: Connection, info: TLSConnectionInfo) { handshakes.append(info) }
    func connectionDidFailHandshake(_ c: Connection, failure: TLSFailure) { failures.append(failure.kind) }

    func connectionDidRead(_ c: Connection) {
        let bytes = c.inbound.withReadableBytes { Array($0) }
        c.inbound.consume(bytes.count)
        c.write(bytes)
        if c.outboundBytes > 256 * 1024 {
            pauses += 1
            c.pauseReading()
        }
    }

    func connectionDidDrain(_ c: Connection) { c.resumeReading() }

    func connectionDidReadEOF(_ c: Connection) {
        eofs += 1
        c.closeAfterWriting()
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) { connections[ObjectIdentifier(c)] = nil }

    func stop() {
        loop.queue.sync {
            listener.close()
            for c in connections.values { c.close() }
        }
        loop.shutdownAndWait()
    }
}

/// A TLS client connection on its own loop: sends `payload` once connected (after the handshake),
/// collects what comes back, and signals when `expect` bytes arrived, the connection closed, or failed.
final class TLSEchoClient: ConnectionDelegate, @unchecked Sendable {
    let loop = EventLoop(index: 1)
    var connection: Connection?
    let payload: [UInt8]
    let expect: Int
    var received: [UInt8] = []
    var connected = false
    var failure: TLSFailure?
    var closed = false
    let done = DispatchSemaphore(value: 0)

    /// With `holdReading`, the client reads nothing until `resumeReading()` (to build back-pressure).
    let holdReading: Bool

    init(port: UInt16, context: TLSClientContext, payload: [UInt8], expect: Int, holdReading: Bool = false) throws {
        self.payload = payload
        self.holdReading = holdReading
        self.expect = expect
        let address = try SocketAddress("127.0.0.1:\(port)")
        try loop.queue.sync {
            let session = try context.makeSession(serverName: "localhost")
            switch Socket.connect(address) {
            case .failed(let e): throw e
            case .connected(let fd), .inProgress(let fd):
                if holdReading {
                    var size: Int32 = 32 * 1024
                    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
                }
                let c = try Connection(fd: fd, loop: loop, peer: address, connecting: true, tls: session)
                c.delegate = self
                connection = c
            }
        }
    }

    func resumeReading() { loop.queue.sync { connection?.resumeReading() } }

    func connectionDidConnect(_ c: Connection) {
        connected = true
        if holdReading { c.pauseReading() }
        var i = 0
        while i < payload.count {  // in pieces, as a producer would
            let end = min(payload.count, i + 100_000)
            c.write(payload[i..<end])
            i = end
        }
    }

    func connectionDidFailHandshake(_ c: Connection, failure: TLSFailure) { self.failure = failure }

    func connectionDidRead(_ c: Connection) {
        c.inbound.withReadableBytes { received += $0 }
        c.inbound.consume(c.inbound.readableBytes)
        if received.count >= expect && expect > 0 { done.signal() }
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        closed = true
        done.signal()
    }

    func on<R>(_ body: () throws -> R) rethrows -> R { try loop.queue.sync(execute: body) }

    func stop() {
        loop.queue.sync { connection?.close() }
        loop.shutdownAndWait()
    }
}

@Suite("TLS under Connection (loopback, both ends on event loops)", .serialized, .timeLimit(.minutes(3)))
struct TLSConnectionTests {
    @Test("4 MiB echoed through TLS both ways, with back-pressure; connect is reported after the handshake")
    func echoLarge() throws {
        Socket.ignoreSIGPIPE()
        let files = try TLSFiles()
        defer { files.remove() }
        let server = try TLSEchoServer(loop: EventLoop(index: 0), context: try files.serverContext())
        defer { server.stop() }
        let payload = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 13) }
        let client = try TLSEchoClient(
            port: server.port, context: try files.clientContext(), payload: payload, expect: payload.count, holdReading: true)
        defer { client.stop() }
        // The client reads nothing: the server's output queue passes its mark and it stops reading.
        var left = 1000
        while server.loop.queue.sync(execute: { server.pauses }) == 0 && left > 0 {
            usleep(20_000)
            left -= 1
        }
        client.resumeReading()
        #expect(client.done.wait(timeout: .now() + 60) == .success)
        let (received, connected, info) = client.on { (client.received, client.connected, client.connection?.tlsInfo) }
        #expect(connected)
        #expect(received.count == payload.count)
        #expect(received == payload)
        #expect(info?.alpn == "http/1.1")
        let (handshakes, pauses) = server.loop.queue.sync { (server.handshakes, server.pauses) }
        #expect(handshakes.count == 1)
        #expect(handshakes.first?.version == .tls13)
        #expect(pauses > 0, "the echo never had to pause: back-pressure untested")
        #expect(server.loop.queue.sync { server.connections.values.allSatisfy { $0.outboundBytes == 0 } })
    }

    @Test("close() sends close_notify: the peer sees an end of stream and closes in turn")
    func closeNotify() throws {
        Socket.ignoreSIGPIPE()
        let files = try TLSFiles()
        defer { files.remove() }
        let server = try TLSEchoServer(loop: EventLoop(index: 0), context: try files.serverContext())
        defer { server.stop() }
        let client = try TLSEchoClient(port: server.port, context: try files.clientContext(), payload: Array("ping".utf8), expect: 4)
        defer { client.stop() }
        #expect(client.done.wait(timeout: .now() + 10) == .success)
        #expect(client.on { client.received } == Array("ping".utf8))
        client.on { client.connection?.close() }
        var left = 200
        while server.loop.queue.sync(execute: { server.connections.count }) > 0 && left > 0 {
            usleep(20_000)
            left -= 1
        }
        #expect(server.loop.queue.sync { server.eofs } == 1)
        #expect(server.loop.queue.sync { server.connections.count } == 0)
    }

    @Test("an untrusted server certificate: the client fails with certificate_verification and never connects")
    func verificationFailure() throws {
        Socket.ignoreSIGPIPE()
        let files = try TLSFiles()
        defer { files.remove() }
        let server = try TLSEchoServer(loop: EventLoop(index: 0), context: try files.serverContext())
        defer { server.stop() }
        let client = try TLSEchoClient(port: server.port, context: try files.clientContext(ca: "other-ca"), payload: [1], expect: 1)
        defer { client.stop() }
        #expect(client.done.wait(timeout: .now() + 10) == .success)
        let (failure, connected, closed) = client.on { (client.failure, client.connected, client.closed) }
        #expect(failure?.kind == .certificateVerification)
        #expect(!connected)
        #expect(closed)
    }

    @Test("plain HTTP to a TLS connection: the clear 400 rejection, then closed; counted as plain_http")
    func plainHTTP() throws {
        Socket.ignoreSIGPIPE()
        let files = try TLSFiles()
        defer { files.remove() }
        let server = try TLSEchoServer(loop: EventLoop(index: 0), context: try files.serverContext())
        defer { server.stop() }
        let c = try LoopbackClient(port: server.port)
        c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        var got: [UInt8] = []
        while true {
            let chunk = c.receiveSome()
            if chunk.isEmpty { break }
            got += chunk
        }
        c.close()
        #expect(got == TLSSession.plainHTTPRejection)
        #expect(server.loop.queue.sync { server.failures } == [.plainHTTP])
    }
}
