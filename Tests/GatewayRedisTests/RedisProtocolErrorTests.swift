import Foundation
import GatewayIO
import GatewayStore
import GatewayTestSupport
import Testing

@testable import GatewayRedis

/// A loopback server (`ScriptedServer`) that speaks Redis for a connection's set-up (`SCRIPT LOAD`,
/// `PING`, `AUTH`, `SELECT`) and answers every other command with `garbage`, bytes that are not RESP.
func malformedRedis(garbage: String) throws -> ScriptedServer {
    try ScriptedServer { c in
        // Each command: `*N`, then N times `$length` and the argument's bytes with CR LF.
        while let count = c.readLine().flatMap({ Int($0.dropFirst()) }) {
            var name = ""
            for k in 0..<count {
                guard let length = c.readLine().flatMap({ Int($0.dropFirst()) }), let arg = c.readBytes(length + 2) else { return }
                if k == 0 { name = String(decoding: arg.dropLast(2), as: UTF8.self).uppercased() }
            }
            let reply =
                switch name {
                case "SCRIPT": "$40\r\n\(String(repeating: "0", count: 40))\r\n"
                case "PING": "+PONG\r\n"
                case "AUTH", "SELECT": "+OK\r\n"
                default: garbage
                }
            guard c.write(reply) else { return }
        }
    }
}

@Suite("Redis store: a server whose replies are not RESP")
struct RedisProtocolErrorTests {
    /// The loop's connection and the threaded ones read a reply that is not RESP2 (a RESP3 type, a
    /// bulk string without its CR LF, an integer that is not one): the request in flight fails
    /// `unavailable` with the reader's reason at once (no timeout), the connection is closed and
    /// made again (its set-up passes), and the next request fails the same way.
    @Test(arguments: [
        ("!5\r\nhello\r\n", "protocol error: unknown reply type \"!\""),
        ("$3\r\nabcXY\r\n", "protocol error: a bulk string of 3 bytes not followed by CR LF"),
        (":1x\r\n", "protocol error: bad integer \"1x\""),
    ])
    func malformedReplies(garbage: String, reason: String) throws {
        let server = try malformedRedis(garbage: garbage)
        defer { server.stop() }
        let onLoop = OnLoopStore(endpoint: RedisEndpoint(host: "127.0.0.1", port: server.port, timeoutMillis: 2_000), loopIndex: 3)
        defer { onLoop.stop() }
        let (store, loop) = (onLoop.inner, onLoop.loop)
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
