import Dispatch
import Foundation
import GatewayTestSupport
import Glibc
import Testing

@testable import GatewayIO

/// An echo server on the event loop: what it reads it writes back, pausing reads while more than
/// 256 KiB wait to be written (back-pressure).
final class EchoServer: ConnectionDelegate, @unchecked Sendable {
    let loop: EventLoop
    var listener: Listener!
    var connections: [ObjectIdentifier: Connection] = [:]
    var closedCount = 0

    init(loop: EventLoop) throws {
        self.loop = loop
        try loop.queue.sync {
            listener = try Listener(address: try SocketAddress("127.0.0.1:0"), loop: loop, reusePort: false) { [unowned self] fd, peer in
                guard let c = try? Connection(fd: fd, loop: loop, peer: peer) else { Socket.close(fd); return }
                c.delegate = self
                connections[ObjectIdentifier(c)] = c
            }
        }
    }

    var port: UInt16 { listener.address.port }

    func connectionDidRead(_ c: Connection) {
        let bytes = c.inbound.withReadableBytes { Array($0) }
        c.inbound.consume(bytes.count)
        c.write(bytes)
        if c.outboundBytes > 256 * 1024 { c.pauseReading() }
    }

    func connectionDidDrain(_ c: Connection) { c.resumeReading() }

    func connectionDidReadEOF(_ c: Connection) { c.closeAfterWriting() }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        connections[ObjectIdentifier(c)] = nil
        closedCount += 1
    }

    func stop() {
        loop.queue.sync {
            listener.close()
            for c in connections.values { c.close() }
        }
        loop.shutdownAndWait()
    }
}

typealias BlockingClient = LoopbackClient

@Suite("Event loop, connections and timers", .timeLimit(.minutes(3)))
struct EventLoopTests {
    @Test("echo on loopback, several connections at once") func echo() throws {
        Socket.ignoreSIGPIPE()
        let server = try EchoServer(loop: EventLoop(index: 0))
        defer { server.stop() }
        let clients = try (0..<20).map { _ in try BlockingClient(port: server.port) }
        for (i, c) in clients.enumerated() { c.send(Array("hello \(i)\n".utf8)) }
        for (i, c) in clients.enumerated() {
            let expected = Array("hello \(i)\n".utf8)
            #expect(c.receive(exactly: expected.count) == expected)
            c.close()
        }
    }

    @Test("8 MiB through one connection with back-pressure in both directions") func largeTransfer() throws {
        Socket.ignoreSIGPIPE()
        let server = try EchoServer(loop: EventLoop(index: 1))
        defer { server.stop() }
        let client = try BlockingClient(port: server.port)
        defer { client.close() }
        var payload = [UInt8](repeating: 0, count: 8 << 20)
        for i in payload.indices { payload[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 9) }
        let toSend = payload
        let sender = Thread {
            client.send(toSend); client.shutdownWrite()
        }
        sender.start()
        let echoed = client.receive(exactly: payload.count)
        #expect(echoed.count == payload.count)
        #expect(echoed == payload)
    }

    /// Loops run on different threads at once: a read buffer shared between them lets one loop's
    /// bytes land in another loop's connection (seen once as a 414 from the proxy tests' upstream).
    @Test("each loop reads into a buffer of its own") func readBufferPerLoop() {
        let loops = [EventLoop(index: 30), EventLoop(index: 31)]
        defer { for l in loops { l.shutdownAndWait() } }
        #expect(loops[0].readScratch.baseAddress != loops[1].readScratch.baseAddress)
        #expect(loops.allSatisfy { $0.readScratch.count >= 64 * 1024 })
    }

    @Test("a peer that closes is noticed and the connection released") func peerClose() throws {
        let server = try EchoServer(loop: EventLoop(index: 2))
        defer { server.stop() }
        let client = try BlockingClient(port: server.port)
        client.send(Array("x".utf8))
        #expect(client.receive(exactly: 1) == Array("x".utf8))
        client.close()
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline && server.loop.queue.sync(execute: { server.closedCount }) == 0 { usleep(10_000) }
        #expect(server.loop.queue.sync { server.closedCount } == 1)
    }

    @Test("outbound connect to a closed port reports the error to the delegate") func connectRefused() throws {
        final class Probe: ConnectionDelegate, @unchecked Sendable {
            var result: String?
            func connectionDidRead(_ c: Connection) {}
            func connectionDidConnect(_ c: Connection) { result = "connected" }
            func connectionDidClose(_ c: Connection, error: Socket.Error?) { result = error.map { "error \($0.errno)" } ?? "closed" }
        }
        let loop = EventLoop(index: 3)
        defer { loop.shutdownAndWait() }
        // A port that was free a moment ago.
        let fd = try Socket.listen(try SocketAddress("127.0.0.1:0"), reusePort: false)
        let port = Socket.localAddress(fd)!.port
        Socket.close(fd)
        let probe = Probe()
        var keep: Connection?
        try loop.queue.sync {
            switch Socket.connect(try SocketAddress(host: "127.0.0.1", port: port)) {
            case .inProgress(let cfd), .connected(let cfd):
                keep = try Connection(fd: cfd, loop: loop, peer: nil, connecting: true)
                keep?.delegate = probe
            case .failed:
                probe.result = "error \(ECONNREFUSED)"
            }
        }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline && loop.queue.sync(execute: { probe.result }) == nil { usleep(5_000) }
        #expect(loop.queue.sync { probe.result } == "error \(ECONNREFUSED)")
        _ = keep
    }

    @Test("timers fire in order, after their delay, and cancelled ones never") func timers() throws {
        let loop = EventLoop(index: 4)
        defer { loop.shutdownAndWait() }
        final class Log: @unchecked Sendable { var events: [String] = [] }
        let log = Log()
        let start = Date()
        loop.queue.sync {
            loop.timers.schedule(afterMillis: 300) { log.events.append("300") }
            loop.timers.schedule(afterMillis: 100) { log.events.append("100") }
            let h = loop.timers.schedule(afterMillis: 200) { log.events.append("cancelled") }
            loop.timers.cancel(h)
            loop.timers.schedule(afterMillis: 150_000) { log.events.append("far") }  // beyond one wheel turn
        }
        while Date().timeIntervalSince(start) < 3 && loop.queue.sync(execute: { log.events.count }) < 2 { usleep(20_000) }
        #expect(loop.queue.sync { log.events } == ["100", "300"])
        #expect(Date().timeIntervalSince(start) >= 0.3)
        #expect(loop.queue.sync { loop.timers.count } == 1)
    }

    @Test("addresses parse and print; bad ones are refused") func addresses() throws {
        #expect(try SocketAddress("127.0.0.1:8080").description == "127.0.0.1:8080")
        #expect(try SocketAddress("[::1]:443").description == "[::1]:443")
        #expect(try SocketAddress(":9090").description == "0.0.0.0:9090")
        #expect(try SocketAddress("localhost:1").port == 1)
        #expect(throws: SocketAddress.ParseError.self) { try SocketAddress("example.com:80") }
        #expect(throws: SocketAddress.ParseError.self) { try SocketAddress("127.0.0.1:99999") }
        #expect(throws: SocketAddress.ParseError.self) { try SocketAddress("127.0.0.1") }
    }
}
