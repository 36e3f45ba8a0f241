import Foundation
import GatewayConfig
import Testing

@testable import Gateway
@testable import GatewayProxy

/// The two access line formats, byte for byte (docs/logging.md), and the number writers they use.
@Suite("Access line formats")
struct AccessLineTests {
    /// 2026-11-26T09:40:18.007Z.
    static func clock(nanos: Int = 7_000_000) -> LogClock {
        var c = LogClock()
        c.set(seconds: 1_795_686_018, nanos: nanos)
        return c
    }

    static func line(_ r: ExchangeRecord, _ format: AccessLogConfig.Format, clock: LogClock = clock()) -> String {
        let size = AccessLine.bound(r)
        let p = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { p.deallocate() }
        var w = LineBytes(base: p, count: 0)
        AccessLine.write(r, format: format, clock: clock, to: &w)
        #expect(w.count <= size)
        return String(decoding: UnsafeRawBufferPointer(start: p, count: w.count), as: UTF8.self)
    }

    static func record(verdict: AccessVerdict? = nil, userAgent: LoggedValue = .string("curl/8.5.0")) -> ExchangeRecord {
        ExchangeRecord(
            route: "api", method: "GET", target: "/v1/items?q=a\"b", status: 200, requestBytes: 0, responseBytes: 1234,
            durationSeconds: 0.0012345, upstream: "backend", upstreamSeconds: 0.001, peer: "192.0.2.7", error: nil,
            protocolName: "http1", requestID: RequestID("req-1"), httpVersion: "HTTP/1.1",
            fields: LoggedFields(host: .string("api.example.com"), userAgent: userAgent), verdict: verdict)
    }

    @Test("JSON: millisecond UTC time, numbers as numbers, request id, host, user agent; verdict and reason on protected routes")
    func json() throws {
        #expect(
            Self.line(Self.record(), .json) == """
                {"ts":"2026-11-26T09:40:18.007Z","request_id":"req-1","client":"192.0.2.7","method":"GET","target":"/v1/items?q=a\\"b",\
                "host":"api.example.com","protocol":"http1","status":200,"request_bytes":0,"response_bytes":1234,"duration_s":0.001235,\
                "route":"api","upstream":"backend","upstream_duration_s":0.001000,"user_agent":"curl/8.5.0"}

                """)
        let refused = Self.line(Self.record(verdict: AccessVerdict(verdict: "refused", reason: "assertion_invalid")), .json)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(refused.utf8)) as? [String: Any])
        #expect(object["verdict"] as? String == "refused")
        #expect(object["reason"] as? String == "assertion_invalid")
        #expect(object["status"] as? Int == 200)
        #expect(refused.hasSuffix("\"verdict\":\"refused\",\"reason\":\"assertion_invalid\"}\n"))
    }

    @Test("JSON escapes what a client sent (Latin-1 bytes as their characters, controls as \\u00XX)")
    func jsonEscaping() throws {
        let ua: [UInt8] = Array("a\"\\\t".utf8) + [0x01, 0xe9, 0x7f]
        let text = ua.withUnsafeBytes { Self.line(Self.record(userAgent: .bytes($0)), .json) }
        #expect(text.contains(#""user_agent":"a\"\\\t\u0001é\u007f""#), "\(text)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["user_agent"] as? String == "a\"\\\t\u{01}é\u{7f}")
    }

    @Test("combined: nginx's format and escaping")
    func combined() {
        #expect(
            Self.line(Self.record(), .combined)
                == "192.0.2.7 - - [26/Nov/2026:09:40:18 +0000] \"GET /v1/items?q=a\\x22b HTTP/1.1\" 200 1234 \"-\" \"curl/8.5.0\"\n")
        var unread = Self.record(userAgent: .none)
        unread.method = "-"
        unread.status = 400
        #expect(Self.line(unread, .combined) == "192.0.2.7 - - [26/Nov/2026:09:40:18 +0000] \"-\" 400 1234 \"-\" \"-\"\n")
    }

    @Test("the clock: the prefix changes with the second, milliseconds with every line")
    func clock() {
        var c = Self.clock(nanos: 999_999_999)
        #expect(c.rfc3339 == "2026-11-26T09:40:18.999Z")
        c.set(seconds: 1_795_686_019, nanos: 0)
        #expect(c.rfc3339 == "2026-11-26T09:40:19.000Z")
        c.set(seconds: 1_798_761_599, nanos: 50_000_000)  // the last second of 2026
        #expect(c.rfc3339 == "2026-12-31T23:59:59.050Z")
    }

    @Test("decimal and seconds writers agree with Swift's formatting")
    func numbers() {
        var values = [0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 65_535, 99_999, 100_000, 1_234_567, Int(Int32.max), Int.max, -5]
        var g = SystemRandomNumberGenerator()
        for _ in 0..<2000 { values.append(Int.random(in: 0...Int(UInt32.max), using: &g) >> Int.random(in: 0...31, using: &g)) }
        let p = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 16)
        defer { p.deallocate() }
        for v in values {
            var w = LineBytes(base: p, count: 0)
            w.decimal(v)
            #expect(String(decoding: UnsafeRawBufferPointer(start: p, count: w.count), as: UTF8.self) == String(max(0, v)))
        }
        for (s, text) in [
            (0.0, "0.000000"), (0.0000004, "0.000000"), (0.0000005, "0.000001"), (1.5, "1.500000"), (12.3456789, "12.345679"),
            (-1, "0.000000"), (.nan, "0.000000"), (.infinity, "0.000000"),
        ] {
            var w = LineBytes(base: p, count: 0)
            w.seconds(s)
            #expect(String(decoding: UnsafeRawBufferPointer(start: p, count: w.count), as: UTF8.self) == text, "\(s)")
        }
    }
}
