import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// The venv's python with `h2` (scripts/install-deps.sh installs it into .build-tools/venv), or nil:
/// the tests skip outside CI and fail under CI=true.
private let hostilePython: String? = {
    let python = repositoryRoot.appendingPathComponent(".build-tools/venv/bin/python").path
    guard FileManager.default.isExecutableFile(atPath: python),
        let r = try? runProcess(URL(fileURLWithPath: python), ["-c", "import h2"], timeout: 30), r.status == 0
    else { return nil }
    return python
}()

private let hostileScript = repositoryRoot.appendingPathComponent("Tests/h2/hostile.py").path

/// What `Tests/h2/hostile.py` saw the server do.
struct HostileVerdict {
    var rst: [(stream: Int, code: String)] = []
    var goawayCode: String?
    var goawayLastStream: Int?
    var closed = false
    var statuses: [Int: Int] = [:]
    var sameConnStatus: Int?
    var freshStatus: Int?
    var detail: [String: Any] = [:]
    var raw = ""

    func rstCode(_ stream: Int) -> String? { rst.first { $0.stream == stream }?.code }
}

/// A TCP listener on 127.0.0.1 whose accept queue is full (backlog 0, one connection parked): a
/// connect to it stays pending, so a route to it never reads a request body (its DATA stays
/// counted against the client's windows) and never answers.
final class BlackHoleListener {
    let port: Int
    private let listener: Int32
    private let filler: Int32

    init() throws {
        let l = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let f = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(l, $0, len) == 0 && listen(l, 0) == 0 && getsockname(l, $0, &len) == 0
            }
        }
        let connected =
            bound
            && withUnsafeMutablePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(f, $0, len) == 0 }
            }
        guard connected else {
            let e = errno
            close(l)
            close(f)
            throw NSError(domain: "BlackHoleListener", code: 1, userInfo: [NSLocalizedDescriptionKey: "socket setup failed: errno \(e)"])
        }
        listener = l
        filler = f
        port = Int(UInt16(bigEndian: addr.sin_port))
    }

    func stop() {
        close(filler)
        close(listener)
    }
}

@Suite("Hostile HTTP/2 frame sequences (Python h2 client against a real gatewayd, RFC 9113)", .serialized, .timeLimit(.minutes(5)))
struct HTTP2HostileTests {
    /// Runs one scenario against a fresh gatewayd (h2c listener, demo upstream, a `/stall` route to
    /// a black hole; `http2` is the listener's `http2:` section, if any); the gateway and the black
    /// hole are stopped before returning.
    func run(
        _ scenario: String, http2: String? = nil, extra: ((GatewayProcess, inout HostileVerdict) throws -> Void)? = nil
    ) throws -> HostileVerdict? {
        guard let python = hostilePython else {
            if ProcessInfo.processInfo.environment["CI"] == "true" {
                Issue.record("python with h2 is required under CI=true (scripts/install-deps.sh installs it into .build-tools/venv)")
            } else {
                print("skipped: .build-tools/venv/bin/python with h2 is missing (run scripts/install-deps.sh)")
            }
            return nil
        }
        let hole = try BlackHoleListener()
        defer { hole.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners:
                  - {name: h2, address: 127.0.0.1:0, protocols: [h2c]\(http2.map { ", http2: \($0)" } ?? "")}
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - {name: demo, url: demo}
                  - {name: stall, url: http://127.0.0.1:\(hole.port), connect_timeout: 30s}
                store: {kind: memory, shards: 8}
                routes:
                  - {name: stall, match: {path_prefix: /stall}, upstream: stall}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                """)
        defer { gw.stop() }
        let port = gw.url("h2", "").split(separator: ":").last.map(String.init) ?? "0"
        let r = try runProcess(
            URL(fileURLWithPath: python), [hostileScript, scenario, "--port", port, "--stall-path", "/stall/x"], timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        guard let obj = r.json else {
            Issue.record("no verdict from \(scenario): \(r.stdout) \(r.stderr)")
            return nil
        }
        var v = HostileVerdict()
        v.raw = r.stdout
        v.rst = (obj["rst"] as? [[String: Any]] ?? []).map { ($0["stream"] as? Int ?? -1, $0["code"] as? String ?? "?") }
        if let g = obj["goaway"] as? [String: Any] {
            v.goawayCode = g["code"] as? String
            v.goawayLastStream = g["last_stream_id"] as? Int
        }
        v.closed = obj["closed"] as? Bool ?? false
        for (k, s) in obj["statuses"] as? [String: Int] ?? [:] { v.statuses[Int(k) ?? -1] = s }
        v.sameConnStatus = obj["same_conn_status"] as? Int
        v.freshStatus = obj["fresh_status"] as? Int
        v.detail = obj["detail"] as? [String: Any] ?? [:]
        // Whatever happened, the gateway still serves a well-formed request on a new connection.
        #expect(v.freshStatus == 200, "\(v.raw)")
        #expect(gw.process.isRunning)
        try extra?(gw, &v)
        return v
    }

    /// A stream error (RFC 9113 §5.4.2): RST_STREAM `code` on stream 1, no GOAWAY, and the next
    /// request on the same connection is answered.
    func expectStreamError(_ scenario: String, _ code: String = "PROTOCOL_ERROR") throws {
        guard let v = try run(scenario) else { return }
        #expect(v.rstCode(1) == code, "\(v.raw)")
        #expect(v.goawayCode == nil, "\(v.raw)")
        #expect(!v.closed, "\(v.raw)")
        #expect(v.sameConnStatus == 200, "\(v.raw)")
    }

    /// A connection error (RFC 9113 §5.4.1): GOAWAY `code`, then the server closes.
    func expectConnectionError(_ scenario: String, _ code: String, http2: String? = nil) throws -> HostileVerdict? {
        guard let v = try run(scenario, http2: http2) else { return nil }
        #expect(v.goawayCode == code, "\(v.raw)")
        #expect(v.closed, "\(v.raw)")
        return v
    }

    // MARK: Field validity (§8.2, §8.3) → RST_STREAM PROTOCOL_ERROR, connection usable

    @Test("RFC 9113 §8.2.1: an uppercase field name → RST_STREAM PROTOCOL_ERROR")
    func uppercaseHeader() throws { try expectStreamError("uppercase_header") }

    @Test("RFC 9113 §8.2.2: connection: keep-alive → RST_STREAM PROTOCOL_ERROR")
    func connectionHeader() throws { try expectStreamError("connection_header") }

    @Test("RFC 9113 §8.2.2: transfer-encoding → RST_STREAM PROTOCOL_ERROR")
    func transferEncoding() throws { try expectStreamError("transfer_encoding") }

    @Test("RFC 9113 §8.2.2: te: gzip → RST_STREAM PROTOCOL_ERROR")
    func teGzip() throws { try expectStreamError("te_gzip") }

    @Test("RFC 9113 §8.3.1: missing :path → RST_STREAM PROTOCOL_ERROR")
    func missingPath() throws { try expectStreamError("missing_path") }

    @Test("RFC 9113 §8.3: a pseudo-header after a regular field → RST_STREAM PROTOCOL_ERROR")
    func pseudoAfterRegular() throws { try expectStreamError("pseudo_after_regular") }

    @Test("RFC 9113 §8.3: an unknown pseudo-header → RST_STREAM PROTOCOL_ERROR")
    func unknownPseudo() throws { try expectStreamError("unknown_pseudo") }

    @Test("RFC 9113 §8.3.1: :method twice → RST_STREAM PROTOCOL_ERROR")
    func duplicateMethod() throws { try expectStreamError("duplicate_method") }

    @Test("RFC 9113 §8.1.1: content-length 10 with 5 bytes of DATA → RST_STREAM PROTOCOL_ERROR")
    func contentLengthMismatch() throws { try expectStreamError("content_length_mismatch") }

    // MARK: Stream states (§5.1, §5.1.1)

    @Test("RFC 9113 §5.1: DATA on a half-closed (remote) stream → STREAM_CLOSED (here as a connection error, §5.4.1 allows it)")
    func dataHalfClosed() throws {
        guard let v = try run("data_half_closed") else { return }
        #expect(v.rstCode(1) == "STREAM_CLOSED" || v.goawayCode == "STREAM_CLOSED", "\(v.raw)")
    }

    @Test("RFC 9113 §5.1: DATA on a closed stream (after END_STREAM both ways) → GOAWAY STREAM_CLOSED (a MAY; ignoring it is allowed)")
    func dataClosedStream() throws {
        guard let v = try run("data_closed_stream") else { return }
        #expect(v.statuses[1] == 200, "\(v.raw)")
        #expect(v.goawayCode == "STREAM_CLOSED" || (v.goawayCode == nil && v.sameConnStatus == 200), "\(v.raw)")
    }

    @Test("RFC 9113 §5.1.1: a client-opened even (server) stream id → GOAWAY PROTOCOL_ERROR")
    func evenStreamID() throws { _ = try expectConnectionError("even_stream_id", "PROTOCOL_ERROR") }

    @Test("RFC 9113 §5.1.1: a new stream id lower than a previous one → GOAWAY PROTOCOL_ERROR")
    func decreasingStreamID() throws {
        guard let v = try expectConnectionError("decreasing_stream_id", "PROTOCOL_ERROR") else { return }
        #expect(v.statuses[5] == 200)
    }

    @Test("RFC 9113 §6.2: HEADERS on stream 0 → GOAWAY PROTOCOL_ERROR")
    func headersStreamZero() throws { _ = try expectConnectionError("headers_stream_zero", "PROTOCOL_ERROR") }

    // MARK: Flow control (§6.9)

    @Test("RFC 9113 §6.9.1: 96 KiB of DATA into a 64 KiB stream window → RST_STREAM FLOW_CONTROL_ERROR")
    func dataOverWindow() throws {
        guard let v = try run("data_over_window") else { return }
        #expect(v.rstCode(1) == "FLOW_CONTROL_ERROR" || v.goawayCode == "FLOW_CONTROL_ERROR", "\(v.raw)")
    }

    @Test("RFC 9113 §6.9: WINDOW_UPDATE 0 on a stream → PROTOCOL_ERROR (here GOAWAY: a stream error may be a connection error, §5.4.1)")
    func windowUpdateZeroStream() throws {
        guard let v = try run("window_update_zero_stream") else { return }
        #expect(v.rstCode(1) == "PROTOCOL_ERROR" || v.goawayCode == "PROTOCOL_ERROR", "\(v.raw)")
    }

    @Test("RFC 9113 §6.9: WINDOW_UPDATE 0 on the connection → GOAWAY PROTOCOL_ERROR")
    func windowUpdateZeroConnection() throws { _ = try expectConnectionError("window_update_zero_connection", "PROTOCOL_ERROR") }

    @Test("RFC 9113 §6.9.1: a connection WINDOW_UPDATE past 2^31-1 → GOAWAY FLOW_CONTROL_ERROR")
    func windowUpdateOverflow() throws { _ = try expectConnectionError("window_update_overflow", "FLOW_CONTROL_ERROR") }

    @Test("RFC 9113 §6.9.1: a stream WINDOW_UPDATE past 2^31-1 → RST_STREAM FLOW_CONTROL_ERROR")
    func windowUpdateOverflowStream() throws { try expectStreamError("window_update_overflow_stream", "FLOW_CONTROL_ERROR") }

    // MARK: SETTINGS and frame size (§6.5.2, §4.2)

    @Test("RFC 9113 §6.5.2: SETTINGS_ENABLE_PUSH = 2 → GOAWAY PROTOCOL_ERROR")
    func settingsEnablePush() throws { _ = try expectConnectionError("settings_enable_push_2", "PROTOCOL_ERROR") }

    @Test("RFC 9113 §6.5.2: SETTINGS_INITIAL_WINDOW_SIZE = 2^31 → GOAWAY FLOW_CONTROL_ERROR")
    func settingsInitialWindow() throws { _ = try expectConnectionError("settings_initial_window_too_big", "FLOW_CONTROL_ERROR") }

    @Test("RFC 9113 §6.5.2: SETTINGS_MAX_FRAME_SIZE = 16383 → GOAWAY PROTOCOL_ERROR")
    func settingsMaxFrameSize() throws { _ = try expectConnectionError("settings_max_frame_size_small", "PROTOCOL_ERROR") }

    @Test("RFC 9113 §4.2: a 20 000-byte HEADERS frame (MAX_FRAME_SIZE 16 384) → GOAWAY FRAME_SIZE_ERROR")
    func frameTooLarge() throws { _ = try expectConnectionError("frame_too_large", "FRAME_SIZE_ERROR") }

    // MARK: Denial of service (§10.5, CVEs)

    @Test("CVE-2023-44487 rapid reset: 400 streams opened and reset at once → GOAWAY ENHANCE_YOUR_CALM")
    func rapidReset() throws { _ = try expectConnectionError("rapid_reset", "ENHANCE_YOUR_CALM") }

    @Test("CVE-2024-27316: CONTINUATION flood (64 after one HEADERS) → GOAWAY ENHANCE_YOUR_CALM")
    func continuationFlood() throws { _ = try expectConnectionError("continuation_flood", "ENHANCE_YOUR_CALM") }

    @Test("RFC 7541 §4.1 / RFC 9113 §6.5.2: HPACK bomb (16 MB by reference) → 431, HPACK in sync, RSS bounded")
    func hpackBomb() throws {
        var rssBefore = 0
        var rssAfter = 0
        // Measured around a second run of the script, so start-up allocations are not counted.
        guard
            let v = try run(
                "hpack_bomb",
                extra: { gw, _ in
                    rssBefore = residentKiB(gw.process.processIdentifier)
                    let port = gw.url("h2", "").split(separator: ":").last.map(String.init) ?? "0"
                    for _ in 0..<3 {
                        _ = try runProcess(
                            URL(fileURLWithPath: hostilePython!), [hostileScript, "hpack_bomb", "--port", port], timeout: 60)
                    }
                    rssAfter = residentKiB(gw.process.processIdentifier)
                })
        else { return }
        #expect(v.statuses[1] == 200, "\(v.raw)")
        #expect(v.statuses[3] == 431, "\(v.raw)")
        #expect(v.sameConnStatus == 200, "\(v.raw)")
        #expect(v.goawayCode == nil, "\(v.raw)")
        #expect(rssBefore > 0 && rssAfter - rssBefore < 8 * 1024, "RSS \(rssBefore) KiB → \(rssAfter) KiB after three 16 MB bombs")
    }

    @Test(
        "RFC 9113 §10.5: a PING flood never read (up to 200 000 PINGs, 4 KiB receive buffer) ends the connection (enhance_your_calm), ACKs bounded"
    )
    func pingFlood() throws {
        guard
            let v = try run(
                "ping_flood",
                extra: { gw, v in
                    let metrics = try curl([gw.url("admin", "/metrics")]).1
                    v.detail["calm"] = metrics.contains("attest_gateway_h2_goaway_total{reason=\"enhance_your_calm\"} 1")
                })
        else { return }
        #expect(v.closed, "\(v.raw)")
        #expect((v.detail["ping_acks_read"] as? Int ?? .max) <= 1000, "\(v.raw)")
        #expect(v.detail["calm"] as? Bool == true)
    }

    @Test(
        "RFC 9113 §5.4.1: the PING flood's connection error is announced by GOAWAY ENHANCE_YOUR_CALM, and every PING sent is taken (no reset)"
    )
    func pingFloodGoaway() throws {
        guard let v = try expectConnectionError("ping_flood", "ENHANCE_YOUR_CALM") else { return }
        // The server reads (and discards) what the client still sends after the GOAWAY, so closing
        // does not turn into a TCP reset that could destroy the GOAWAY before the client reads it.
        #expect(v.detail["send_failed"] as? Bool == false, "\(v.raw)")
        #expect(v.detail["reset"] as? Bool == false, "\(v.raw)")
    }

    @Test("RFC 9113 §5.4.1, §10.5: a SETTINGS flood never read → GOAWAY ENHANCE_YOUR_CALM, close")
    func settingsFloodGoaway() throws {
        guard let v = try expectConnectionError("settings_flood", "ENHANCE_YOUR_CALM") else { return }
        #expect(v.detail["send_failed"] as? Bool == false, "\(v.raw)")
    }

    @Test(
        "CVE-2025-8671 (MadeYouReset): requests the server must reset, 10 at a time → GOAWAY ENHANCE_YOUR_CALM after the 200-per-10-s budget"
    )
    func madeYouReset() throws {
        guard let v = try expectConnectionError("reset_flood", "ENHANCE_YOUR_CALM") else { return }
        let sent = v.detail["streams_sent"] as? Int ?? 0
        #expect(sent > 200 && sent <= 210, "\(v.detail)")
        #expect(v.rst.allSatisfy { $0.code == "PROTOCOL_ERROR" } && v.rst.count > 200, "\(v.rst.count) RST_STREAM")
    }

    @Test("CVE-2023-44487: rapid reset, 10 streams at a time, default budget → GOAWAY ENHANCE_YOUR_CALM after 200 resets")
    func rapidResetPacedDefault() throws {
        guard let v = try expectConnectionError("rapid_reset_paced", "ENHANCE_YOUR_CALM") else { return }
        let sent = v.detail["streams_sent"] as? Int ?? 0
        #expect(sent > 200 && sent <= 210, "\(v.detail)")
    }

    @Test("listeners[].http2.max_resets: 20 is enforced by the running gateway: the same rapid reset ends after 20 resets")
    func rapidResetConfiguredLimit() throws {
        guard let v = try expectConnectionError("rapid_reset_paced", "ENHANCE_YOUR_CALM", http2: "{max_resets: 20, reset_window: 1m}")
        else { return }
        let sent = v.detail["streams_sent"] as? Int ?? 0
        #expect(sent > 20 && sent <= 30, "\(v.detail)")
    }

    @Test("listeners[].http2.max_continuations: 2 is enforced: HEADERS + 3 CONTINUATION → GOAWAY ENHANCE_YOUR_CALM")
    func continuationConfiguredLimit() throws {
        _ = try expectConnectionError("continuation_3", "ENHANCE_YOUR_CALM", http2: "{max_continuations: 2}")
        // The default limit (8) accepts the same request.
        guard let v = try run("continuation_3") else { return }
        #expect(v.statuses[1] == 200, "\(v.raw)")
        #expect(v.goawayCode == nil, "\(v.raw)")
    }

    @Test("listeners[].http2.max_settings_entries: 8 is enforced: a SETTINGS frame of 10 entries → GOAWAY ENHANCE_YOUR_CALM")
    func settingsEntriesConfiguredLimit() throws {
        _ = try expectConnectionError("settings_10_entries", "ENHANCE_YOUR_CALM", http2: "{max_settings_entries: 8}")
        // The default limit (32) accepts it, and the connection serves a request.
        guard let v = try run("settings_10_entries") else { return }
        #expect(v.goawayCode == nil, "\(v.raw)")
        #expect(v.sameConnStatus == 200, "\(v.raw)")
    }

    @Test("listeners[].http2.max_outbound_ack: 20 is enforced: 50 PINGs at once → GOAWAY ENHANCE_YOUR_CALM")
    func outboundAckConfiguredLimit() throws {
        guard let limited = try expectConnectionError("ping_burst_50", "ENHANCE_YOUR_CALM", http2: "{max_outbound_ack: 20}")
        else { return }
        #expect((limited.detail["ping_acks_read"] as? Int ?? .max) <= 20, "\(limited.raw)")
        // The default limit (1000) answers all of them.
        guard let v = try run("ping_burst_50") else { return }
        #expect(v.detail["ping_acks_read"] as? Int == 50, "\(v.raw)")
        #expect(v.goawayCode == nil, "\(v.raw)")
    }

    @Test("RFC 9113 §5.4.1: after a connection error the server lingers only a bounded time: a client still sending is closed")
    func lingerBounded() throws {
        guard let v = try expectConnectionError("goaway_then_trickle", "PROTOCOL_ERROR") else { return }
        #expect(v.detail["closed_while_sending"] as? Bool == true, "\(v.raw)")
        #expect((v.detail["pings_after_goaway"] as? Int ?? 0) >= 1, "\(v.raw)")
    }

    @Test("RFC 9113 §5.1.2: 130 open streams before the SETTINGS ACK (limit 128) → RST_STREAM REFUSED_STREAM on streams 257 and 259")
    func tooManyStreams() throws {
        guard let v = try run("too_many_streams") else { return }
        #expect(v.rstCode(257) == "REFUSED_STREAM", "\(v.raw)")
        #expect(v.rstCode(259) == "REFUSED_STREAM", "\(v.raw)")
        #expect(v.rst.count == 2, "\(v.raw)")
        #expect(v.goawayCode == nil, "\(v.raw)")
    }
}

/// VmRSS of a process in KiB (0 when unreadable).
private func residentKiB(_ pid: Int32) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
    return 0
}
