import Testing

@testable import GatewayConfig

@Suite("trusted_proxies and proxy_protocol")
struct TrustedProxiesConfigTests {
    static func yaml(top: String? = nil, listener: String = "") -> String {
        """
        \(top.map { "trusted_proxies: \($0)\n" } ?? "")listeners:
          - {name: public, address: 0.0.0.0:8080\(listener)}
          - {name: other, address: 0.0.0.0:8081}
        upstreams: [{name: demo, url: demo}]
        routes: [{name: default, match: {path_prefix: /}, upstream: demo}]
        """
    }

    @Test("none by default; the top-level list is every listener's unless one has its own")
    func inheritance() throws {
        let none = try ConfigFixture.parse(Self.yaml())
        #expect(none.trustedProxies.isEmpty && none.listeners.allSatisfy { $0.trustedProxies.isEmpty && !$0.proxyProtocol })
        let top = try ConfigFixture.parse(Self.yaml(top: "[10.0.0.0/8, 'fd00::/8', 127.0.0.1]"))
        #expect(top.trustedProxies.map(\.description) == ["10.0.0.0/8", "fd00::/8", "127.0.0.1/32"])
        #expect(top.listeners.allSatisfy { $0.trustedProxies == top.trustedProxies })
        let own = try ConfigFixture.parse(Self.yaml(top: "[10.0.0.0/8]", listener: ", trusted_proxies: [192.168.0.0/16]"))
        #expect(own.listeners[0].trustedProxies.map(\.description) == ["192.168.0.0/16"])
        #expect(own.listeners[1].trustedProxies.map(\.description) == ["10.0.0.0/8"])
        // [] opts a listener out of a top-level list.
        let optOut = try ConfigFixture.parse(Self.yaml(top: "[10.0.0.0/8]", listener: ", trusted_proxies: []"))
        #expect(optOut.listeners[0].trustedProxies.isEmpty && optOut.listeners[1].trustedProxies.count == 1)
        let onlyOne = try ConfigFixture.parse(Self.yaml(listener: ", trusted_proxies: [10.1.2.3], proxy_protocol: true"))
        #expect(onlyOne.listeners[0].proxyProtocol && onlyOne.listeners[0].trustedProxies.count == 1)
        #expect(onlyOne.listeners[1].trustedProxies.isEmpty && !onlyOne.listeners[1].proxyProtocol)
        let inherited = try ConfigFixture.parse(Self.yaml(top: "[10.0.0.0/8]", listener: ", proxy_protocol: true"))
        #expect(inherited.listeners[0].proxyProtocol)
        #expect(try !ConfigFixture.parse(Self.yaml(listener: ", proxy_protocol: false")).listeners[0].proxyProtocol)
    }

    @Test("bad networks, repeats, an empty top-level list and wrong types are errors at their value")
    func badValues() {
        #expect(
            ConfigFixture.errors(Self.yaml(top: "[10.0.0.1/8, 10.0.0.0/33, 'fd00::/8', 'fd00::/8', nope]")) == [
                "gateway.yaml:1:19: trusted_proxies[0] has bits set after the first 8: write the network as 10.0.0.0/8, got \"10.0.0.1/8\"",
                "gateway.yaml:1:31: trusted_proxies[1] has prefix length 33, more than the 32 bits of an IPv4 address, got \"10.0.0.0/33\"",
                "gateway.yaml:1:56: trusted_proxies[3] repeats fd00::/8 (first at 1:44)",
                "gateway.yaml:1:68: trusted_proxies[4] must be an IP address or a network in CIDR notation (e.g. 10.0.0.0/8 or "
                    + "2001:db8::/32), got \"nope\"",
            ])
        #expect(ConfigFixture.errors(Self.yaml(top: "[]")) == ["gateway.yaml:1:18: trusted_proxies must list at least one entry"])
        #expect(
            ConfigFixture.errors(Self.yaml(top: "10.0.0.0/8")) == ["gateway.yaml:1:18: trusted_proxies must be a list, got \"10.0.0.0/8\""])
        #expect(
            ConfigFixture.errors(Self.yaml(listener: ", proxy_protocol: yes please")) == [
                "gateway.yaml:2:59: listeners[0].proxy_protocol must be true or false, got \"yes please\""
            ])
    }

    @Test("keys without effect: an empty list with nothing to override, proxy_protocol without trusted proxies")
    func withoutEffect() {
        #expect(
            ConfigFixture.errors(Self.yaml(listener: ", trusted_proxies: []")) == [
                "gateway.yaml:2:43: listeners[0].trusted_proxies is empty and the top-level trusted_proxies lists none: it has no "
                    + "effect (no peer is trusted by default); remove it"
            ])
        let message =
            "listeners[0].proxy_protocol needs trusted proxies: list the load balancers that send the PROXY header in "
            + "listeners[0].trusted_proxies or the top-level trusted_proxies (a header from any other peer would let it choose its "
            + "client address, so it is refused)"
        #expect(ConfigFixture.errors(Self.yaml(listener: ", proxy_protocol: true")) == ["gateway.yaml:2:43: " + message])
        #expect(
            ConfigFixture.errors(Self.yaml(top: "[10.0.0.0/8]", listener: ", trusted_proxies: [], proxy_protocol: true"))
                == ["gateway.yaml:3:64: " + message])
        // An invalid top-level list is reported once, not again as "no trusted proxies".
        #expect(ConfigFixture.errors(Self.yaml(top: "[bad]", listener: ", proxy_protocol: true")).count == 1)
    }
}
