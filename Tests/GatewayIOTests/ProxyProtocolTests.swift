import Foundation
import Testing

@testable import GatewayIO

/// The PROXY protocol header (HAProxy's specification, v1 and v2) from raw bytes: what each form
/// names, where the header ends, and what is refused. The reader on a live socket (before TLS and
/// HTTP) is tested with the server in `GatewayProxyTests/TrustedProxyServerTests`.
@Suite("PROXY protocol: v1 and v2 headers from raw bytes")
struct ProxyProtocolTests {
    static func parse(_ bytes: [UInt8]) -> ProxyHeader.Parse { bytes.withUnsafeBytes { ProxyHeader.parse($0) } }
    static func parse(_ text: String) -> ProxyHeader.Parse { parse(Array(text.utf8)) }

    static func header(_ p: ProxyHeader.Parse) -> ProxyHeader? {
        if case .header(let h) = p { return h }
        return nil
    }

    /// A v2 header: signature, version/command, family/transport, length, then `body`.
    static func v2(command: UInt8 = 0x1, family: UInt8, _ body: [UInt8]) -> [UInt8] {
        ProxyHeader.v2Signature + [0x20 | command, family, UInt8(body.count >> 8), UInt8(body.count & 0xff)] + body
    }

    @Test("v1 TCP4 and TCP6: source and destination with ports; the header ends after its CRLF")
    func v1() throws {
        let tail = "\u{16}\u{03}\u{01}rest of the stream"
        let h4 = try #require(Self.header(Self.parse("PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n" + tail)))
        #expect(h4.version == 1)
        #expect(h4.length == "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n".utf8.count)
        #expect(h4.source?.description == "203.0.113.7:56324")
        #expect(h4.destination?.description == "192.0.2.1:443")
        let line6 = "PROXY TCP6 2001:db8::7 2001:db8::1 65535 0\r\n"
        let h6 = try #require(Self.header(Self.parse(line6 + "GET / HTTP/1.1\r\n")))
        #expect(h6.source?.description == "[2001:db8::7]:65535")
        #expect(h6.destination?.description == "[2001:db8::1]:0")
        #expect(h6.length == line6.utf8.count)
        // The longest line (107 bytes) is accepted.
        let longest = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
        #expect(longest.utf8.count == 104)
        #expect(Self.header(Self.parse(longest))?.length == 104)
    }

    @Test("v1 UNKNOWN names no client, whatever follows it up to the CRLF")
    func v1Unknown() {
        for line in ["PROXY UNKNOWN\r\n", "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", "PROXY UNKNOWN anything at all\r\n"] {
            let h = Self.header(Self.parse(line + "GET /"))
            #expect(h == ProxyHeader(version: 1, length: line.utf8.count, source: nil, destination: nil), "\(line)")
        }
    }

    @Test("v1 prefixes wait for more; an unterminated line past 107 bytes is too large")
    func v1Partial() {
        let full = "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n"
        for n in 1..<full.utf8.count {
            #expect(Self.parse(Array(full.utf8.prefix(n))) == .needMore, "\(n)")
        }
        #expect(Self.parse("PROXY UNKNOWN " + String(repeating: "x", count: 93)) == .invalid(reason: "too_large"))
        #expect(Self.parse("PROXY UNKNOWN " + String(repeating: "x", count: 92)) == .needMore)
    }

    @Test("v1 refusals: every field held to the specification")
    func v1Malformed() {
        let bad = [
            "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\n",  // LF without CR
            "PROXY TCP4 203.0.113.7 192.0.2.1 56324\r\n",  // a field missing
            "PROXY TCP4 203.0.113.7 192.0.2.1 56324 443 x\r\n",  // one too many
            "PROXY TCP4  203.0.113.7 192.0.2.1 56324 443\r\n",  // double space
            "PROXY TCP4 2001:db8::7 192.0.2.1 1 2\r\n",  // family mismatch
            "PROXY TCP6 203.0.113.7 2001:db8::1 1 2\r\n",
            "PROXY TCP4 203.0.113.7 192.0.2.1 65536 443\r\n",  // port range
            "PROXY TCP4 203.0.113.7 192.0.2.1 0443 443\r\n",  // leading zero
            "PROXY TCP4 203.0.113.7 192.0.2.1 -1 443\r\n",
            "PROXY TCP4 203.0.113.07 192.0.2.1 1 2\r\n",  // not a canonical address
            "PROXY TCP4 host.example 192.0.2.1 1 2\r\n",
            "PROXY UDP4 203.0.113.7 192.0.2.1 1 2\r\n",  // no such protocol
            "PROXY tcp4 203.0.113.7 192.0.2.1 1 2\r\n",
            "PROXY UNKNOWNX\r\n",
            "PROXY \r\n",
        ]
        for line in bad { #expect(Self.parse(line) == .invalid(reason: "malformed"), "\(line)") }
    }

    @Test("anything but a PROXY header is refused from its first differing byte")
    func notProxy() {
        for text in ["GET / HTTP/1.1\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "proxy TCP4", "PROXX", "\u{16}\u{03}\u{01}\u{02}\u{00}"] {
            #expect(Self.parse(text) == .invalid(reason: "not_proxy_protocol"), "\(text)")
        }
        // A v2 signature that goes wrong, and one still arriving.
        #expect(Self.parse(Array(ProxyHeader.v2Signature.prefix(5)) + [0x00]) == .invalid(reason: "not_proxy_protocol"))
        for n in 1..<16 { #expect(Self.parse(Array(Self.v2(family: 0x11, [UInt8](repeating: 0, count: 12)).prefix(n))) == .needMore) }
    }

    @Test("v2 PROXY over TCP4 and TCP6: addresses and ports in network order; TLVs skipped; what follows stays")
    func v2() throws {
        let body4: [UInt8] = [203, 0, 113, 7, 192, 0, 2, 1, 0xDC, 0x04, 0x01, 0xBB]
        let h4 = try #require(Self.header(Self.parse(Self.v2(family: 0x11, body4) + Array("GET / HTTP/1.1\r\n".utf8))))
        #expect(h4.version == 2 && h4.length == 28)
        #expect(h4.source?.description == "203.0.113.7:56324")
        #expect(h4.destination?.description == "192.0.2.1:443")
        var body6: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [7]
        body6 += [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1]
        body6 += [0x12, 0x34, 0x00, 0x50]
        // TLVs: an ALPN (0x01) and AWS's VPC endpoint id (0xEA), then a NOOP (0x04) with no value.
        let tlvs: [UInt8] = [0x01, 0x00, 0x02] + Array("h2".utf8) + [0xEA, 0x00, 0x05, 0x01] + Array("vpce".utf8) + [0x04, 0x00, 0x00]
        let h6 = try #require(Self.header(Self.parse(Self.v2(family: 0x21, body6 + tlvs) + [0x16, 0x03, 0x01])))
        #expect(h6.length == 16 + 36 + tlvs.count)
        #expect(h6.source?.description == "[2001:db8::7]:4660")
        #expect(h6.destination?.description == "[2001:db8::1]:80")
        // A UDP source over STREAM's sibling byte is a specified combination too.
        #expect(Self.header(Self.parse(Self.v2(family: 0x12, body4)))?.source?.description == "203.0.113.7:56324")
    }

    @Test("v2 LOCAL, UNSPEC and UNIX name no client; the header's length is still taken")
    func v2NoClient() {
        let local = Self.v2(command: 0x0, family: 0x00, [])
        #expect(Self.header(Self.parse(local)) == ProxyHeader(version: 2, length: 16, source: nil, destination: nil))
        // LOCAL with addresses (HAProxy's health checks may send them): ignored.
        let localWithAddresses = Self.v2(command: 0x0, family: 0x11, [10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2])
        #expect(Self.header(Self.parse(localWithAddresses)) == ProxyHeader(version: 2, length: 28, source: nil, destination: nil))
        let unspec = Self.v2(family: 0x00, [0x04, 0x00, 0x00])  // no address block: a NOOP TLV
        #expect(Self.header(Self.parse(unspec)) == ProxyHeader(version: 2, length: 19, source: nil, destination: nil))
        let unix = Self.v2(family: 0x31, [UInt8](repeating: 0x2f, count: 216))
        #expect(Self.header(Self.parse(unix)) == ProxyHeader(version: 2, length: 232, source: nil, destination: nil))
    }

    @Test("v2 refusals: version, command, family, short address block, TLV framing, size")
    func v2Malformed() {
        let body4: [UInt8] = [203, 0, 113, 7, 192, 0, 2, 1, 0xDC, 0x04, 0x01, 0xBB]
        var v1Version = Self.v2(family: 0x11, body4)
        v1Version[12] = 0x11
        #expect(Self.parse(v1Version) == .invalid(reason: "malformed"))
        #expect(Self.parse(Self.v2(command: 0x2, family: 0x11, body4)) == .invalid(reason: "malformed"))
        for family: UInt8 in [0x13, 0x41, 0x10, 0x01, 0xff] {
            #expect(Self.parse(Self.v2(family: family, body4)) == .invalid(reason: "malformed"), "\(family)")
        }
        #expect(Self.parse(Self.v2(family: 0x11, Array(body4.prefix(11)))) == .invalid(reason: "malformed"))
        #expect(Self.parse(Self.v2(family: 0x21, body4)) == .invalid(reason: "malformed"))
        #expect(Self.parse(Self.v2(family: 0x11, body4 + [0x01, 0x00])) == .invalid(reason: "malformed"))  // a torn TLV
        #expect(Self.parse(Self.v2(family: 0x11, body4 + [0x01, 0x00, 0x09, 0x61])) == .invalid(reason: "malformed"))  // past the end
        // Declared longer than 4 KiB: refused before the rest arrives.
        let huge = ProxyHeader.v2Signature + [0x21, 0x11, 0x10, 0x00] + body4
        #expect(Self.parse(huge) == .invalid(reason: "too_large"))
        // Declared, not yet arrived.
        let whole = Self.v2(family: 0x11, body4)
        #expect(Self.parse(Array(whole.prefix(20))) == .needMore)
    }
}
