import Testing

@testable import GatewayConfig

@Suite("admin.allow: networks in CIDR notation")
struct AdminAllowConfigTests {
    static func network(_ text: String) throws -> IPNetwork { try NetworkSyntax.network(text) }

    @Test("IPv4 and IPv6 networks and single addresses are read; the default allows everyone")
    func parsed() throws {
        let config = try ConfigFixture.parse(
            minimalPlus: "admin: {address: 0.0.0.0:9090, allow: [10.0.0.0/8, 192.168.1.7, '2001:db8::/32', '::1', '::ffff:10.1.0.0/112']}")
        #expect(config.admin.allow.map(\.description) == ["10.0.0.0/8", "192.168.1.7/32", "2001:db8::/32", "::1/128", "::ffff:a01:0/112"])
        #expect(try ConfigFixture.parse(ConfigFixture.minimal).admin.allow.isEmpty)
        #expect(try Self.network("0.0.0.0/0").prefixLength == 0)
        #expect(try Self.network("::/0").address == [UInt8](repeating: 0, count: 16))
        #expect(try Self.network("1:2:3:4:5:6:7.8.9.10").address == [0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 7, 8, 9, 10])
        #expect(try Self.network("fe80::1:0:0:0/80").description == "fe80::1:0:0:0/80")
    }

    @Test("membership: prefixes, bit boundaries, IPv4-mapped IPv6 peers")
    func membership() throws {
        let ten = try Self.network("10.0.0.0/8")
        #expect(ten.contains([10, 255, 1, 2]))
        #expect(!ten.contains([11, 0, 0, 0]))
        let odd = try Self.network("172.16.0.0/12")
        #expect(odd.contains([172, 31, 255, 255]))
        #expect(!odd.contains([172, 32, 0, 0]))
        // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
        #expect(ten.contains([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 8, 7]))
        #expect(!ten.contains([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 9, 8, 7]))
        let v6 = try Self.network("2001:db8::/32")
        #expect(v6.contains([0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 7, count: 12)))
        #expect(!v6.contains([0x20, 0x01, 0x0d, 0xb9] + [UInt8](repeating: 0, count: 12)))
        #expect(!v6.contains([10, 0, 0, 1]))
        let mapped = try Self.network("::ffff:10.0.0.0/104")
        #expect(mapped.contains([10, 1, 2, 3]))
        let all = try Self.network("0.0.0.0/0")
        #expect(all.contains([1, 2, 3, 4]) && !all.contains([0x20, 0x01] + [UInt8](repeating: 0, count: 14)))
    }

    @Test("bad networks are refused with the path, what is wrong and the network to write")
    func refusals() {
        func errors(_ allow: String) -> [String] { ConfigFixture.errors(ConfigFixture.minimal + "\nadmin: {allow: \(allow)}") }
        #expect(
            errors("[10.0.0.1/8]") == [
                "gateway.yaml:7:17: admin.allow[0] has bits set after the first 8: write the network as 10.0.0.0/8, got \"10.0.0.1/8\""
            ])
        #expect(
            errors("[10.0.0.0/33, '2001:db8::1/129']") == [
                "gateway.yaml:7:17: admin.allow[0] has prefix length 33, more than the 32 bits of an IPv4 address, got \"10.0.0.0/33\"",
                "gateway.yaml:7:30: admin.allow[1] has prefix length 129, more than the 128 bits of an IPv6 address, got \"2001:db8::1/129\"",
            ])
        #expect(
            errors("[10.0.0.0/08, 10.0.0.0/, 10.0.0.0/x]") == [
                "gateway.yaml:7:17: admin.allow[0] has an invalid prefix length \"08\" (a number, no leading zeros), got \"10.0.0.0/08\"",
                "gateway.yaml:7:30: admin.allow[1] has an invalid prefix length \"\" (a number, no leading zeros), got \"10.0.0.0/\"",
                "gateway.yaml:7:41: admin.allow[2] has an invalid prefix length \"x\" (a number, no leading zeros), got \"10.0.0.0/x\"",
            ])
        let expected = "must be an IP address or a network in CIDR notation (e.g. 10.0.0.0/8 or 2001:db8::/32), got"
        #expect(
            errors("[localhost, 010.0.0.1, '[::1]', 'fe80::1%eth0', 10.0.0]") == [
                "gateway.yaml:7:17: admin.allow[0] \(expected) \"localhost\"",
                "gateway.yaml:7:28: admin.allow[1] \(expected) \"010.0.0.1\"",
                "gateway.yaml:7:39: admin.allow[2] \(expected) \"[::1]\"",
                "gateway.yaml:7:48: admin.allow[3] \(expected) \"fe80::1%eth0\"",
                "gateway.yaml:7:64: admin.allow[4] \(expected) \"10.0.0\"",
            ])
        #expect(errors("[]") == ["gateway.yaml:7:16: admin.allow must list at least one entry"])
        #expect(errors("10.0.0.0/8") == ["gateway.yaml:7:16: admin.allow must be a list, got \"10.0.0.0/8\""])
        #expect(
            errors("[10.0.0.0/8, 10.0.0.0/8]") == [
                "gateway.yaml:7:29: admin.allow[1] repeats 10.0.0.0/8 (first at 7:17)"
            ])
    }
}
