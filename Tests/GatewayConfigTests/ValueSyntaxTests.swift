import GatewayWire
import Testing

@testable import GatewayConfig

/// The value parsers on their own: what they accept, what they refuse, and how values print back.
@Suite("Value syntax")
struct ValueSyntaxTests {
    static let durations: [(String, Duration)] = [
        ("250ms", .milliseconds(250)), ("0ms", .zero), ("2s", .seconds(2)), ("5m", .seconds(300)),
        ("1h", .seconds(3600)), ("90m", .seconds(5400)), ("999999999ms", .milliseconds(999_999_999)),
    ]

    @Test("durations take one whole number and one unit", arguments: durations)
    func durationParses(_ text: String, _ expected: Duration) throws {
        #expect(try DurationSyntax.parse(text) == expected)
    }

    @Test(
        "durations refuse bare numbers, fractions, combinations, other units, signs and spaces",
        arguments: ["60", "1.5s", "1h30m", "10sec", "2d", "-1s", "+1s", "1 s", "s", "", "1S", "1000000000s"]
    )
    func durationRefused(_ text: String) {
        #expect(throws: ValueProblem.self) { try DurationSyntax.parse(text) }
    }

    @Test("a bare number's problem says the unit is required")
    func durationBareNumberMessage() {
        #expect(throws: ValueProblem.self) { try DurationSyntax.parse("30") }
        do {
            _ = try DurationSyntax.parse("30")
        } catch {
            #expect(error.message == "needs a unit, one of ms, s, m or h (e.g. 30s), got \"30\"")
        }
    }

    @Test("durations print in their shortest exact unit")
    func durationFormat() {
        #expect(DurationSyntax.format(.milliseconds(250)) == "250ms")
        #expect(DurationSyntax.format(.milliseconds(2000)) == "2s")
        #expect(DurationSyntax.format(.seconds(300)) == "5m")
        #expect(DurationSyntax.format(.seconds(7200)) == "2h")
        #expect(DurationSyntax.format(.seconds(90)) == "90s")
        #expect(DurationSyntax.format(.zero) == "0s")
    }

    static let sizes: [(String, Int)] = [
        ("512", 512), ("0", 0), ("1B", 1), ("64KiB", 65_536), ("1MiB", 1_048_576), ("2GiB", 2_147_483_648),
        ("10MB", 10_000_000), ("16KB", 16_000), ("3GB", 3_000_000_000),
    ]

    @Test("sizes are bytes with optional decimal or binary units", arguments: sizes)
    func sizeParses(_ text: String, _ expected: Int) throws {
        #expect(try SizeSyntax.parse(text) == expected)
    }

    @Test(
        "sizes refuse other spellings, signs, fractions and overflow",
        arguments: [
            "64kib", "64 KiB", "1.5MiB", "-1", "KiB", "", "10mb", "1TiB", "9999999999999999999", "99999999999GiB",
        ]
    )
    func sizeRefused(_ text: String) {
        #expect(throws: ValueProblem.self) { try SizeSyntax.parse(text) }
    }

    @Test("sizes print in the largest exact unit")
    func sizeFormat() {
        #expect(SizeSyntax.format(65_536) == "64KiB")
        #expect(SizeSyntax.format(10 << 20) == "10MiB")
        #expect(SizeSyntax.format(10_000_000) == "10MB")
        #expect(SizeSyntax.format(512) == "512")
        #expect(SizeSyntax.format(0) == "0")
    }

    static let percentages: [(String, Int)] = [
        ("0%", 0), ("25%", 2500), ("100%", 10_000), ("12.5%", 1250), ("0.01%", 1), ("99.99%", 9999),
    ]

    @Test("percentages run from 0% to 100% with at most two decimals", arguments: percentages)
    func percentageParses(_ text: String, _ basisPoints: Int) throws {
        let value = try PercentageSyntax.parse(text)
        #expect(value.basisPoints == basisPoints)
        #expect(value.description == text)
    }

    @Test(
        "percentages refuse a missing sign, more than 100%, negatives and extra decimals",
        arguments: [
            "25", "101%", "100.01%", "-1%", "1.234%", "%", "abc%", "1.%", "0.5",
        ]
    )
    func percentageRefused(_ text: String) {
        #expect(throws: ValueProblem.self) { try PercentageSyntax.parse(text) }
    }

    static let addresses: [(String, String, UInt16)] = [
        ("0.0.0.0:8080", "0.0.0.0", 8080), ("127.0.0.1:9090", "127.0.0.1", 9090), ("[::1]:443", "::1", 443),
        ("[::]:80", "::", 80), (":8080", "", 8080), ("localhost:0", "localhost", 0),
        ("gw-1.internal:65535", "gw-1.internal", 65535), ("[2001:db8::10.0.0.1]:1", "2001:db8::10.0.0.1", 1),
    ]

    @Test("listen addresses: HOST:PORT, [IPv6]:PORT, :PORT", arguments: addresses)
    func addressParses(_ text: String, _ host: String, _ port: UInt16) throws {
        let address = try AddressSyntax.socketAddress(text)
        #expect(address == SocketAddressSpec(host: host, port: port))
        #expect(address.description == text)
    }

    @Test(
        "listen addresses refuse missing ports, bad ports, bad hosts, unbracketed IPv6",
        arguments: [
            "0.0.0.0", "8080", ":", ":65536", ":-1", "host:http", "::1:80", "[::1]", "[::1]80", "[nothost]:80",
            "256.0.0.1:80", "01.2.3.4:80", "-bad.example:80", "exa_mple.com:80", "[fe80::1%eth0]:80", "",
        ]
    )
    func addressRefused(_ text: String) {
        #expect(throws: ValueProblem.self) { try AddressSyntax.socketAddress(text) }
    }

    @Test("wildcard hosts overlap every host on the same port; port 0 never collides")
    func addressConflicts() {
        let any = SocketAddressSpec(host: "0.0.0.0", port: 8080)
        let loopback = SocketAddressSpec(host: "127.0.0.1", port: 8080)
        #expect(any.conflicts(with: loopback))
        #expect(SocketAddressSpec(host: "", port: 8080).conflicts(with: SocketAddressSpec(host: "::1", port: 8080)))
        #expect(SocketAddressSpec(host: "::", port: 1).isWildcard)
        #expect(SocketAddressSpec(host: "0:0::0", port: 1).isWildcard)
        #expect(!loopback.conflicts(with: SocketAddressSpec(host: "127.0.0.2", port: 8080)))
        #expect(!loopback.conflicts(with: SocketAddressSpec(host: "127.0.0.1", port: 8081)))
        #expect(
            SocketAddressSpec(host: "LOCALHOST", port: 1).conflicts(with: SocketAddressSpec(host: "localhost", port: 1))
        )
        #expect(
            !SocketAddressSpec(host: "0.0.0.0", port: 0).conflicts(with: SocketAddressSpec(host: "0.0.0.0", port: 0))
        )
    }

    static let upstreamURLs: [(String, String)] = [
        ("demo", "demo"), ("http://127.0.0.1:8081", "http://127.0.0.1:8081"),
        ("http://example.com", "http://example.com:80"),
        ("https://api.example.com", "https://api.example.com:443"),
        ("HTTPS://API.Example.com/v1/", "https://api.example.com:443/v1/"),
        ("http://[::1]:8080/base", "http://[::1]:8080/base"),
    ]

    @Test("upstream urls: demo, http and https with default ports", arguments: upstreamURLs)
    func upstreamURLParses(_ text: String, _ printed: String) throws {
        #expect(try AddressSyntax.upstreamTarget(text).description == printed)
    }

    @Test(
        "upstream urls refuse other schemes, credentials, queries, fragments, bad ports and hosts",
        arguments: [
            "Demo", "ftp://x.example", "127.0.0.1:8081", "http://", "http://u:p@x.example", "http://x.example/?a",
            "http://x.example#f",
            "http://x.example:0", "http://x.example:70000", "http://x.example:port", "http://::1:80",
            "http://x.example/a b",
        ]
    )
    func upstreamURLRefused(_ text: String) {
        #expect(throws: ValueProblem.self) { try AddressSyntax.upstreamTarget(text) }
    }

    @Test("redis urls default to port 6379 and database 0")
    func redisURLs() throws {
        #expect(try AddressSyntax.redisURL("redis://cache") == RedisURL(host: "cache", port: 6379, database: 0))
        #expect(
            try AddressSyntax.redisURL("redis://10.0.0.5:6380/3") == RedisURL(host: "10.0.0.5", port: 6380, database: 3)
        )
        #expect(try AddressSyntax.redisURL("redis://[::1]/") == RedisURL(host: "::1", port: 6379, database: 0))
        #expect(try AddressSyntax.redisURL("redis://cache:7000/2").description == "redis://cache:7000/2")
        for bad in [
            "http://cache", "redis://", "redis://cache/x", "redis://:@cache", "redis://cache:0", "cache:6379", "redis://@cache",
        ] {
            #expect(throws: ValueProblem.self, "\(bad)") { try AddressSyntax.redisURL(bad) }
        }
    }

    @Test("IPv4, IPv6 and host name checks")
    func hosts() {
        for good in ["0.0.0.0", "255.255.255.255", "10.0.0.1"] { #expect(HostSyntax.isIPv4(good), "\(good)") }
        for bad in ["256.0.0.0", "1.2.3", "1.2.3.4.5", "01.0.0.0", "a.b.c.d", ""] {
            #expect(!HostSyntax.isIPv4(bad), "\(bad)")
        }
        for good in ["::", "::1", "1::", "2001:db8::1", "1:2:3:4:5:6:7:8", "::ffff:1.2.3.4", "fe80::1:2"] {
            #expect(HostSyntax.isIPv6(good), "\(good)")
        }
        for bad in [
            "", ":", ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "g::1", "1:2:3:4:5:6:7", "::1%lo",
            "1::2:3:4:5:6:7:8",
        ] {
            #expect(!HostSyntax.isIPv6(bad), "\(bad)")
        }
        for good in ["localhost", "a.example.com", "xn--bcher-kva.example", "a-b.c"] {
            #expect(HostSyntax.isHostname(good), "\(good)")
        }
        for bad in ["", "-a.com", "a-.com", "a..com", "a_b.com", "1.2.3.4", "é.com", String(repeating: "a", count: 64)] {
            #expect(!HostSyntax.isHostname(bad), "\(bad)")
        }
        #expect(HostSyntax.isHostname("*.example.com", allowWildcard: true))
        #expect(!HostSyntax.isHostname("*.example.com"))
        #expect(!HostSyntax.isHostname("a.*.example.com", allowWildcard: true))
    }

    @Test("relative file paths resolve against the base directory, lexically")
    func filePaths() {
        #expect(FilePathSyntax.resolve("certs/a.pem", against: "/etc/gw") == "/etc/gw/certs/a.pem")
        #expect(FilePathSyntax.resolve("./data", against: "/etc/gw/") == "/etc/gw/data")
        #expect(FilePathSyntax.resolve("../roots/r.pem", against: "/etc/gw") == "/etc/roots/r.pem")
        #expect(FilePathSyntax.resolve("/abs/k.pem", against: "/etc/gw") == "/abs/k.pem")
        #expect(FilePathSyntax.resolve("../../../x", against: "/a") == "/x")
        #expect(FilePathSyntax.resolve("data", against: ".") == "data")
        #expect(FilePathSyntax.resolve("../data", against: "conf") == "data")
        #expect(FilePathSyntax.resolve("../../data", against: "conf") == "../data")
    }

    @Test("suggestions: typos within two edits, swaps count once, nothing for strangers")
    func suggestions() {
        #expect(Suggestion.closest(to: "upstrem", in: ConfigKeys.route) == "upstream")
        #expect(Suggestion.closest(to: "enfroce", in: ["enforce", "shadow", "off"]) == "enforce")
        #expect(Suggestion.closest(to: "Name", in: ConfigKeys.listener) == "name")
        #expect(Suggestion.closest(to: "path_prefx", in: ConfigKeys.routeMatch) == "path_prefix")
        #expect(Suggestion.closest(to: "colour", in: ConfigKeys.limits) == nil)
        #expect(Suggestion.closest(to: "x", in: ["tls"]) == nil)
        #expect(Suggestion.editDistance("ab", "ba") == 1)
        #expect(Suggestion.editDistance("kitten", "sitting") == 3)
        #expect(Suggestion.editDistance("", "abc") == 3)
    }

    @Test("bundle versions compare number by number, trailing zeros ignored")
    func bundleVersions() throws {
        let v4_10 = try #require(BundleVersion("4.10"))
        let v4_9 = try #require(BundleVersion("4.9"))
        #expect(v4_9 < v4_10)
        #expect(BundleVersion("4.2") == BundleVersion("4.2.0"))
        #expect(Set([BundleVersion("4.2"), BundleVersion("4.2.0")]).count == 1)
        #expect(BundleVersion("10")! > BundleVersion("9.9.9")!)
        #expect(v4_10.description == "4.10")
        for bad in ["", "4.", ".4", "4..2", "v4", "4.2-beta", "1.2.3.4.5.6.7.8.9", "1234567890"] {
            #expect(BundleVersion(bad) == nil, "\(bad)")
        }
    }
}
