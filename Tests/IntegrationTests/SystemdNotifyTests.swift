import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// systemd `Type=notify`: gatewayd says READY=1 once it serves, RELOADING=1 (with MONOTONIC_USEC)
/// then READY=1 around a SIGHUP reload, and STOPPING=1 when SIGTERM starts the drain, on the socket
/// `$NOTIFY_SOCKET` names (a path, or an abstract name).
@Suite("systemd notifications (real gatewayd, a fake NOTIFY_SOCKET)", .serialized, .timeLimit(.minutes(2)))
struct SystemdNotifyTests {
    static let config = """
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 1s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """

    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1_000
    }

    @Test("READY=1 when serving, RELOADING=1 + MONOTONIC_USEC then READY=1 on SIGHUP, STOPPING=1 on SIGTERM", arguments: [false, true])
    func lifecycle(abstract: Bool) throws {
        let notify = try FakeNotifySocket(abstract: abstract)
        let gw = try GatewayProcess(config: Self.config, environment: ["NOTIFY_SOCKET": notify.name])
        defer { gw.stop() }
        let ready = try #require(notify.receive(timeout: 10), "no notification at start")
        #expect(ready.contains("READY=1"), "\(ready)")
        #expect(ready.contains("STATUS=serving"), "\(ready)")
        // Ready means serving: both listeners answer now.
        #expect(try curl([gw.url("admin", "/readyz")]).0 == 200)
        #expect(try curl([gw.url("public", "/")]).0 == 200)

        let before = Self.monotonicMicroseconds()
        gw.signal(SIGHUP)
        let reloading = try #require(notify.receive(timeout: 10), "no notification on SIGHUP")
        #expect(reloading.first == "RELOADING=1", "\(reloading)")
        let usec = try #require(reloading.first { $0.hasPrefix("MONOTONIC_USEC=") }.flatMap { UInt64($0.dropFirst(15)) }, "\(reloading)")
        #expect(usec >= before && usec <= Self.monotonicMicroseconds(), "MONOTONIC_USEC is CLOCK_MONOTONIC at the reload")
        let reloaded = try #require(notify.receive(timeout: 10), "no READY=1 after the reload")
        #expect(reloaded.contains("READY=1"), "\(reloaded)")

        // A refused reload (a bad file) still ends with READY=1: the old configuration serves.
        try "workers: lots\n".write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        #expect(notify.receive(timeout: 10)?.first == "RELOADING=1")
        #expect(notify.receive(timeout: 10)?.contains("READY=1") == true)

        gw.signal(SIGTERM)
        let stopping = try #require(notify.await("STOPPING=1", timeout: 10), "no STOPPING=1 on SIGTERM")
        #expect(stopping.contains("STATUS=draining"))
        #expect(gw.waitForExit(timeout: 15) == 0)
    }

    @Test("without NOTIFY_SOCKET nothing is sent and nothing is logged about systemd; an unusable one is logged, not fatal")
    func withoutSystemd() throws {
        let gw = try GatewayProcess(config: Self.config, environment: ["NOTIFY_SOCKET": ""])
        defer { gw.stop() }
        #expect(try curl([gw.url("admin", "/healthz")]).0 == 200)
        #expect(!gw.stderr.contains("systemd"))
        let odd = try GatewayProcess(config: Self.config, environment: ["NOTIFY_SOCKET": "vsock:2:1234"])
        defer { odd.stop() }
        #expect(try curl([odd.url("admin", "/healthz")]).0 == 200)
        #expect(
            odd.stderr.contains(
                "systemd notifications off: NOTIFY_SOCKET=vsock:2:1234: only Unix socket paths and @abstract names are supported"),
            "\(odd.stderr)")
        // A socket nobody listens on: the start is not held up; the loss is logged.
        let gone = try GatewayProcess(config: Self.config, environment: ["NOTIFY_SOCKET": "/nonexistent/notify.sock"])
        defer { gone.stop() }
        #expect(try curl([gone.url("admin", "/healthz")]).0 == 200)
        var logged = false
        for _ in 0..<50 where !logged {
            logged = gone.stderr.contains("systemd notification not delivered")
            if !logged { usleep(20_000) }
        }
        #expect(logged, "\(gone.stderr)")
    }
}
