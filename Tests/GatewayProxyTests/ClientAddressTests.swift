import GatewayIO
import Testing

@testable import GatewayHTTP
@_spi(Fuzzing) @testable import GatewayProxy

/// `trusted_proxies` as the proxy applies them: which peers are trusted (`TrustedProxies`), and which
/// client a trusted peer's X-Forwarded-For chain names (`ClientAddress`, nginx's
/// `real_ip_recursive on`).
@Suite("Trusted proxies: who is trusted, and which client a chain names")
struct ClientAddressTests {
    static func networks(_ list: [(String, Int)]) -> TrustedProxies {
        TrustedProxies(
            networks: list.map { text, prefix in
                let a = try! SocketAddress(host: text, port: 0)
                return (a.withAddressBytes { Array($0) }, prefix)
            })
    }

    static func address(_ text: String) -> SocketAddress { try! SocketAddress(host: text, port: 0) }

    /// The client `fields` name for a request from a trusted peer (nil: the peer itself).
    static func client(_ fields: [(String, String)], trusted: TrustedProxies) -> String? {
        let head = HTTPRequestHead(method: "GET", target: "/", minorVersion: 1, headers: HTTPFields(fields), framing: .none)
        let bytes = HeadBytes()
        let lines = bytes.set(head, reusing: [])
        return bytes.with { ClientAddress.resolve(lines, $0, trusted: trusted) }?.host
    }

    @Test("networks match by prefix; IPv4 networks match IPv4-mapped peers and the other way round")
    func matching() {
        let t = Self.networks([("10.0.0.0", 8), ("192.168.1.7", 32), ("2001:db8::", 32), ("fe80::", 10)])
        for yes in [
            "10.0.0.1", "10.255.255.255", "192.168.1.7", "::ffff:10.1.2.3", "2001:db8::1", "2001:db8:ffff::9", "fe80::1", "febf::1",
        ] {
            #expect(t.contains(Self.address(yes)), "\(yes)")
        }
        for no in [
            "11.0.0.1", "9.255.255.255", "192.168.1.8", "::ffff:11.1.2.3", "::10.1.2.3", "2001:db9::1", "fec0::1", "127.0.0.1", "::1",
        ] {
            #expect(!t.contains(Self.address(no)), "\(no)")
        }
        #expect(!TrustedProxies.none.contains(Self.address("127.0.0.1")))
        #expect(TrustedProxies.none.isEmpty && !t.isEmpty)
        // /0 trusts everyone of its family (and IPv4's through its mapped form); ::ffff:0:0/96 is all of IPv4.
        let all4 = Self.networks([("0.0.0.0", 0)])
        #expect(all4.contains(Self.address("203.0.113.9")) && all4.contains(Self.address("::ffff:1.2.3.4")))
        #expect(!all4.contains(Self.address("2001:db8::1")))
        let all6 = Self.networks([("::", 0)])
        #expect(all6.contains(Self.address("2001:db8::1")) && all6.contains(Self.address("203.0.113.9")))
        let mapped = Self.networks([("::ffff:0.0.0.0", 96)])
        #expect(mapped.contains(Self.address("203.0.113.9")) && !mapped.contains(Self.address("2001:db8::1")))
        let one6 = Self.networks([("2001:db8::7", 128)])
        #expect(one6.contains(Self.address("2001:db8::7")) && !one6.contains(Self.address("2001:db8::8")))
        let odd = Self.networks([("172.16.0.0", 12), ("2001:db8:8000::", 33)])
        #expect(odd.contains(Self.address("172.31.255.1")) && !odd.contains(Self.address("172.32.0.1")))
        #expect(odd.contains(Self.address("2001:db8:8000::1")) && !odd.contains(Self.address("2001:db8:7fff::1")))
    }

    @Test("the client is the right-most address that is not trusted; all trusted: the left-most")
    func rightMostUntrusted() {
        let t = Self.networks([("10.0.0.0", 8), ("127.0.0.1", 32)])
        let xff = "X-Forwarded-For"
        #expect(Self.client([(xff, "203.0.113.7")], trusted: t) == "203.0.113.7")
        // A forged left part stays forged: only what trusted hops appended counts.
        #expect(Self.client([(xff, "6.6.6.6, 203.0.113.7, 10.0.0.2, 10.0.0.3")], trusted: t) == "203.0.113.7")
        #expect(Self.client([(xff, "10.0.0.9, 10.0.0.2")], trusted: t) == "10.0.0.9")
        // Several fields are one list, in order.
        #expect(Self.client([(xff, "6.6.6.6, 203.0.113.7"), ("x-forwarded-for", "10.0.0.5")], trusted: t) == "203.0.113.7")
        #expect(Self.client([(xff, "203.0.113.7"), ("X-Other", "1"), (xff, "198.51.100.4, 10.0.0.5")], trusted: t) == "198.51.100.4")
        // No chain (or an empty one): the peer.
        #expect(Self.client([("Host", "h")], trusted: t) == nil)
        #expect(Self.client([(xff, ""), (xff, " , ,")], trusted: t) == nil)
        // IPv6, with or without brackets and ports; IPv4 with a port; spaces and tabs around elements.
        #expect(Self.client([(xff, "2001:db8::7")], trusted: t) == "2001:db8::7")
        #expect(Self.client([(xff, "[2001:db8::7]:4711,\t10.0.0.1 ")], trusted: t) == "2001:db8::7")
        #expect(Self.client([(xff, "[2001:db8::7]")], trusted: t) == "2001:db8::7")
        #expect(Self.client([(xff, "203.0.113.7:4711")], trusted: t) == "203.0.113.7")
        #expect(Self.client([(xff, "198.51.100.1,,203.0.113.7")], trusted: t) == "203.0.113.7")
    }

    @Test("an element that is no address ends the walk at the last trusted address")
    func garbageStops() {
        let t = Self.networks([("10.0.0.0", 8)])
        let xff = "X-Forwarded-For"
        #expect(Self.client([(xff, "unknown")], trusted: t) == nil)
        #expect(Self.client([(xff, "203.0.113.7, unknown")], trusted: t) == nil)
        #expect(Self.client([(xff, "203.0.113.7, _hidden, 10.0.0.4")], trusted: t) == "10.0.0.4")
        #expect(Self.client([(xff, "203.0.113.7, 10.0.0.4"), (xff, "evil.example")], trusted: t) == nil)
        for junk in [
            "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.4:", "1.2.3.4:123456", "[1.2.3.4]", "[::1", "[::1]x", "::1:", "fe80::1%eth0",
            "2001:db8::7:80:", String(repeating: "1", count: 60),
        ] {
            #expect(Self.client([(xff, "203.0.113.7, " + junk)], trusted: t) == nil, "\(junk)")
        }
    }

    @Test("an X-Forwarded-For that a Connection field names is hop-by-hop: not read (nor forwarded)")
    func connectionNamed() {
        let t = Self.networks([("10.0.0.0", 8)])
        #expect(Self.client([("X-Forwarded-For", "203.0.113.7"), ("Connection", "keep-alive, X-Forwarded-For")], trusted: t) == nil)
        #expect(Self.client([("X-Forwarded-For", "203.0.113.7"), ("Connection", "keep-alive")], trusted: t) == "203.0.113.7")
    }
}
