import Dispatch
import Foundation
import GatewayIO
import GatewayStore
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayRedis

/// A loopback server that speaks Redis for a connection's set-up (`SCRIPT LOAD`, `PING`) and answers
/// every other command with bytes that are not RESP: what a connection does with a reply it cannot
/// read.
final class MalformedRedis: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    private let clients = Mutex<[Int32]>([])
    private let exited = DispatchSemaphore(value: 0)
    let garbage: [UInt8]

    init(garbage: String) throws {
        self.garbage = Array(garbage.utf8)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, listen(fd, 16) == 0 else {
            close(fd)
            throw NSError(domain: "MalformedRedis", code: Int(errno))
        }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in accepting() }
        thread.start()
    }

    private func accepting() {
        defer { exited.signal() }
        while !stopped.load(ordering: .acquiring) {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            if stopped.load(ordering: .acquiring) {
                close(fd)
                return
            }
            clients.withLock { $0.append(fd) }
            Thread { [self] in serve(fd) }.start()
        }
    }

    /// Reads commands (arrays of bulk strings) and answers each.
    private func serve(_ fd: Int32) {
        var input: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            guard n > 0 else { return }
            input += buffer[0..<n]
            while let (name, used) = Self.command(input) {
                input.removeFirst(used)
                let reply: [UInt8]
                switch name {
                case "SCRIPT": reply = Array("$40\r\n\(String(repeating: "0", count: 40))\r\n".utf8)
                case "PING": reply = Array("+PONG\r\n".utf8)
                case "AUTH", "SELECT": reply = Array("+OK\r\n".utf8)
                default: reply = garbage
                }
                guard reply.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == reply.count else { return }
            }
        }
    }

    /// The first argument (upper-cased) of the complete command at the start of `b`, and its length.
    static func command(_ b: [UInt8]) -> (String, Int)? {
        func line(_ from: Int) -> (Int, Int)? {
            var i = from
            while i + 1 < b.count {
                if b[i] == 0x0d && b[i + 1] == 0x0a { return (Int(String(decoding: b[(from + 1)..<i], as: UTF8.self)) ?? 0, i + 2) }
                i += 1
            }
            return nil
        }
        guard !b.isEmpty, b[0] == UInt8(ascii: "*"), let (count, first) = line(0) else { return nil }
        var i = first
        var name = ""
        for k in 0..<count {
            guard i < b.count, let (length, start) = line(i), start + length + 2 <= b.count else { return nil }
            if k == 0 { name = String(decoding: b[start..<(start + length)], as: UTF8.self).uppercased() }
            i = start + length + 2
        }
        return (name, i)
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
        shutdown(listener, Int32(SHUT_RDWR))
        // Wake the accept in case shutdown did not: a connect of our own.
        let poke = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(poke, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        close(poke)
        _ = exited.wait(timeout: .now() + 5)
        close(listener)
        for fd in clients.withLock({ $0 }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }
}

@Suite("Redis store: a server whose replies are not RESP")
struct RedisProtocolErrorTests {
    /// The loop's connection and the threaded ones read a reply that is not RESP2 (a RESP3 type, a
    /// bulk string without its CR LF): the request in flight fails `unavailable` with the reader's
    /// reason, the connection is closed and made again (and can serve again), nothing hangs.
    @Test(arguments: [
        ("!5\r\nhello\r\n", "protocol error: unknown reply type \"!\""),
        ("$3\r\nabcXY\r\n", "protocol error: a bulk string of 3 bytes not followed by CR LF"),
        (":1x\r\n", "protocol error: bad integer \"1x\""),
    ])
    func malformedReplies(garbage: String, reason: String) throws {
        let server = try MalformedRedis(garbage: garbage)
        defer { server.stop() }
        let store = RedisAttestStore(options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: server.port, timeoutMillis: 2_000)))
        let loop = EventLoop(index: 3)
        let onLoop = OnLoopStore(store, loop: loop)
        store.serve(on: [loop])
        defer {
            store.close()
            loop.shutdownAndWait()
        }
        #expect(store.waitUntilConnected(timeoutMillis: 10_000))
        #expect(onLoop.waitUntilLoopUp())
        let request = ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000)
        let started = Date()
        // On the loop: its own connection.
        let onLoopResult = wait { onLoop.issueChallenge(request, nowMillis: 1_700_000_000_000, completion: $0) }
        #expect(unavailable(onLoopResult))
        if case .failure(let e) = onLoopResult { #expect(e.detail.contains(reason), "\(e.detail)") }
        #expect(loop.queue.sync { store.currentLoopConnection?.lastError ?? "" }.contains(reason))
        // Off the loop: the threaded pool's connection.
        let threaded = wait { store.issueChallenge(request, nowMillis: 1_700_000_000_000, completion: $0) }
        #expect(unavailable(threaded))
        if case .failure(let e) = threaded { #expect(e.detail.contains(reason), "\(e.detail)") }
        #expect(Date().timeIntervalSince(started) < 5, "answered without waiting for a timeout")
        // Both connect again (the set-up still works), and fail the same way again.
        #expect(onLoop.waitUntilLoopUp())
        #expect(onLoop.loopStatus.connects >= 2)
        #expect(unavailable(wait { onLoop.issueChallenge(request, nowMillis: 1_700_000_000_000, completion: $0) }))
    }
}
