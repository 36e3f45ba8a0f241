import AppAttest
import AppAttestClient
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The library's client data against docs/client-contract.md's worked examples, and byte for byte
/// against the gateway's own code (AppAttest.ClientData, AppAttest.RequestAuthority).
@Suite("AppAttestClient: client data and authority (contract examples, the gateway's code)")
struct ClientDataTests {
    static let challenge = "AAECAwQFBgcICQoLDA0ODw"  // base64url of the bytes 0x00…0x0f
    static let body = Data("{\"sku\":\"A-1\",\"qty\":2}".utf8)
    static let bodySHA256 = "d3c95de2d66db9a042603637d7c75dcdb810c4f4a5e5530d450ffd344b022636"
    static let v1Text = "AAECAwQFBgcICQoLDA0ODw\nPOST\n/api/purchase?order=7\n\(bodySHA256)"
    static let v1SHA256 = "65b234e45d88e0e0b991645b735e6800a89587e81793b09d395342172bc76ad4"
    static let v2Hex =
        "41414543417751464267634943516f4c4441304f44770a504f53540a2f6170692f70757263686173653f6f726465723d370a643363393564653264363664623961303432363033363337643763373564636462383130633466346135653535333064343530666664333434623032323633360a73686f702e6578616d706c652e636f6d"
    static let v2SHA256 = "b1159f3d9d586de4cf8f7d05f22ccfdf3dcf12a70443c35749ee679a12f7671b"
    static let exampleURL = URL(string: "https://Shop.Example.com:443/api/purchase?order=7")!

    @Test("version 1: the contract's 114 bytes and SHA-256")
    func contractExampleV1() throws {
        #expect(hex(AttestClientData.sha256(Self.body)) == Self.bodySHA256)
        let target = try AttestClientData.requestTarget(of: Self.exampleURL)
        #expect(target == "/api/purchase?order=7")
        let v1 = AttestClientData.request(
            .v1, challenge: Self.challenge, method: "POST", target: target, authority: "ignored", body: Self.body)
        #expect(v1.count == 114)
        #expect(v1 == Data(Self.v1Text.utf8))
        #expect(hex(AttestClientData.sha256(v1)) == Self.v1SHA256)
    }

    @Test("version 2: the authority of https://Shop.Example.com:443, the contract's 131 bytes, hex and SHA-256")
    func contractExampleV2() throws {
        let authority = try AttestClientData.authority(of: Self.exampleURL)
        #expect(authority == "shop.example.com")
        let v2 = AttestClientData.request(
            .v2, challenge: Self.challenge, method: "POST", target: try AttestClientData.requestTarget(of: Self.exampleURL),
            authority: authority, body: Self.body)
        #expect(v2.count == 131)
        #expect(hex(v2) == Self.v2Hex)
        #expect(hex(AttestClientData.sha256(v2)) == Self.v2SHA256)
        #expect(hex(AttestClientData.registrationHash(challenge: Self.challenge)) == hex(Data(SHA256.hash(Self.challenge))))
        // The values asserted here are the contract's own.
        let contract = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("docs/client-contract.md"), encoding: .utf8)
        for text in [Self.v1SHA256, Self.v2SHA256, Self.v2Hex, Self.bodySHA256, Self.challenge] {
            #expect(contract.contains(text), "docs/client-contract.md lacks \(text)")
        }
    }

    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    @Test(
        "the authority of a URL: the contract's normal form",
        arguments: [
            ("https://Shop.Example.com:443/p", "shop.example.com"),
            ("http://shop.example.com./p", "shop.example.com"),
            ("http://SHOP.example.com", "shop.example.com"),
            ("https://shop.example.com:8443/p", "shop.example.com:8443"),
            ("http://a.example:80/", "a.example"),
            ("https://a.example:80/", "a.example:80"),
            ("http://a.example:443/", "a.example:443"),
            ("http://a.example:08080/", "a.example:8080"),
            ("http://a.example:/", "a.example"),
            ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
            ("http://[::1]:8080/x", "[::1]:8080"),
            ("https://[2001:DB8::1]:443/x", "[2001:db8::1]"),
            ("http://[0:0::1]/", "[0:0::1]"),
            ("http://my_host~1/", "my_host~1"),
        ])
    func authorityOfURL(_ url: String, _ expected: String) throws {
        #expect(try AttestClientData.authority(of: try #require(URL(string: url))) == expected)
    }

    @Test(
        "URLs whose authority the contract cannot bind are refused before signing",
        arguments: [
            "ftp://a.example/p", "http://a.example../p", "file:///etc/passwd",
        ])
    func authorityRefused(_ url: String) throws {
        #expect(throws: AppAttestClientError.self) { try AttestClientData.authority(of: try #require(URL(string: url))) }
    }

    @Test("the request-target: path and query exactly as the URL encodes them; dot segments refused")
    func requestTargets() throws {
        func target(_ s: String) throws -> String { try AttestClientData.requestTarget(of: try #require(URL(string: s))) }
        #expect(try target("https://a.example") == "/")
        #expect(try target("https://a.example/") == "/")
        #expect(try target("https://a.example/p?q=1#fragment") == "/p?q=1")
        #expect(try target("https://a.example/p?") == "/p")
        #expect(try target("https://a.example/a%2Fb/c%20d?x=%41&y=a+b") == "/a%2Fb/c%20d?x=%41&y=a+b")
        for bad in ["https://a.example/a/../b", "https://a.example/./b", "https://a.example/a/%2E%2E/b", "https://a.example/a/.."] {
            #expect(throws: AppAttestClientError.self, "\(bad)") { try target(bad) }
        }
    }

    /// Random hosts, ports, schemes, methods, targets and bodies: the library's bytes are the
    /// gateway's, with the authority the gateway computes from the `Host` an HTTP client sends
    /// for that URL (`host[:port]` as written in the URL).
    @Test("byte for byte the gateway's ClientData and RequestAuthority (1,000 seeded random requests)")
    func sameBytesAsTheGateway() throws {
        var rng = SeededRandom(seed: 0x16_c1_1e_17)
        let nameBytes = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~".utf8)
        let methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
        for i in 0..<1000 {
            let scheme = Bool.random(using: &rng) ? "https" : "http"
            var host: String
            switch Int.random(in: 0..<10, using: &rng) {
            case 0:
                host =
                    "\(Int.random(in: 1...255, using: &rng)).\(Int.random(in: 0...255, using: &rng)).0.\(Int.random(in: 1...254, using: &rng))"
            case 1: host = ["[::1]", "[2001:DB8::1]", "[2001:db8:0:0::AbC]", "[::ffff:192.0.2.1]"].randomElement(using: &rng)!
            default:
                let labels = (0..<Int.random(in: 1...4, using: &rng)).map { _ in
                    String(
                        decoding: (0..<Int.random(in: 1...12, using: &rng)).map { _ in nameBytes.randomElement(using: &rng)! },
                        as: UTF8.self)
                }
                host = labels.joined(separator: ".")
                if Int.random(in: 0..<5, using: &rng) == 0 { host += "." }
            }
            let port: String
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: port = ""
            case 1: port = ":80"
            case 2: port = ":443"
            case 3: port = ":\(Int.random(in: 1...65535, using: &rng))"
            default: port = ":8080"
            }
            let path =
                "/"
                + (0..<Int.random(in: 0...3, using: &rng)).map { _ in ["api", "purchase", "a%2Fb", "x~y", "7"].randomElement(using: &rng)! }
                .joined(separator: "/")
            let query = Bool.random(using: &rng) ? "?order=\(i)&q=%41b" : ""
            let url = try #require(URL(string: "\(scheme)://\(host)\(port)\(path)\(query)"), "\(scheme)://\(host)\(port)\(path)\(query)")
            let method = methods.randomElement(using: &rng)!
            let body = (0..<Int.random(in: 0...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let challenge = Base64.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }, alphabet: .url, padding: false)

            let mine = try AttestClientData.authority(of: url)
            let theirs = try #require(RequestAuthority.normalize(host + port, scheme: scheme), "\(host + port)")
            #expect(mine == theirs, "\(url)")
            let target = try AttestClientData.requestTarget(of: url)
            #expect(target == path + query)
            for (v, sv) in [(AppAttestClient.ClientDataVersion.v1, AppAttest.ClientDataVersion.v1), (.v2, .v2)] {
                let a = AttestClientData.request(v, challenge: challenge, method: method, target: target, authority: mine, body: Data(body))
                let b = ClientData.forRequest(sv, challenge: challenge, method: method, target: target, authority: theirs, body: body)
                #expect(Array(a) == b, "\(v) \(url)")
            }
        }
    }
}
