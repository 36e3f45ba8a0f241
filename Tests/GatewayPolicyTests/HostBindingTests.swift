import AppAttest
import AppAttestSimulator
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayIO
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

/// Client data version 2: the authority a request is addressed to is signed, so a request signed
/// for one host is refused on another (issue 19, section 3).
@Suite("Policy: client data versions and the signed authority")
struct HostBindingTests {
    // MARK: The bytes (docs/client-contract.md's worked examples)

    static let exampleChallenge = "AAECAwQFBgcICQoLDA0ODw"  // base64url of the bytes 0x00…0x0f
    static let exampleBody = Array("{\"sku\":\"A-1\",\"qty\":2}".utf8)
    static let bodyHash = "d3c95de2d66db9a042603637d7c75dcdb810c4f4a5e5530d450ffd344b022636"
    static let v1Text = "AAECAwQFBgcICQoLDA0ODw\nPOST\n/api/purchase?order=7\n\(bodyHash)"
    static let v1SHA256 = "65b234e45d88e0e0b991645b735e6800a89587e81793b09d395342172bc76ad4"
    static let v2Text = v1Text + "\nshop.example.com"
    static let v2SHA256 = "b1159f3d9d586de4cf8f7d05f22ccfdf3dcf12a70443c35749ee679a12f7671b"

    @Test func workedExamplesOfEachVersion() throws {
        let authority = try #require(RequestAuthority.normalize("Shop.Example.com:443", scheme: "https"))
        #expect(authority == "shop.example.com")
        let v1 = ClientData.forRequest(
            .v1, challenge: Self.exampleChallenge, method: "POST", target: "/api/purchase?order=7", authority: authority,
            body: Self.exampleBody)
        let v2 = ClientData.forRequest(
            .v2, challenge: Self.exampleChallenge, method: "POST", target: "/api/purchase?order=7", authority: authority,
            body: Self.exampleBody)
        #expect(v1 == Array(Self.v1Text.utf8) && v1.count == 114)
        #expect(v2 == Array(Self.v2Text.utf8) && v2.count == 131)
        #expect(Hex.encode(SHA256.hash(v1)) == Self.v1SHA256)
        #expect(Hex.encode(SHA256.hash(v2)) == Self.v2SHA256)
        // The version-1 entry point is unchanged.
        #expect(
            ClientData.forRequest(challenge: Self.exampleChallenge, method: "POST", target: "/api/purchase?order=7", body: Self.exampleBody)
                == v1)
        // The contract shows these very values (a client library is written from it).
        let contract = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("docs/client-contract.md"), encoding: .utf8)
        for text in [Self.v1SHA256, Self.v2SHA256, Self.bodyHash, Self.exampleChallenge, "Shop.Example.com:443"] {
            #expect(contract.contains(text), "docs/client-contract.md lacks \(text)")
        }
        #expect(contract.contains(Hex.encode(v2)), "docs/client-contract.md lacks the hex of the v2 example")
    }

    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    @Test(
        arguments: [
            // (authority, scheme, normal form or nil)
            ("a.example", "http", "a.example"),
            ("A.EXAMPLE", "http", "a.example"),
            ("a.example.", "http", "a.example"),
            ("A.Example.:80", "http", "a.example"),
            ("a.example:80", "https", "a.example:80"),
            ("a.example:443", "https", "a.example"),
            ("a.example:443", "http", "a.example:443"),
            ("a.example:0443", "https", "a.example"),
            ("a.example:08080", "http", "a.example:8080"),
            ("a.example:", "http", "a.example"),
            ("a.example:8080", "HTTP", "a.example:8080"),
            ("a.example:80", "HTTP", "a.example"),
            ("127.0.0.1:8080", "http", "127.0.0.1:8080"),
            ("[::1]", "http", "[::1]"),
            ("[2001:DB8::1]:443", "https", "[2001:db8::1]"),
            ("[2001:db8::1]:8443", "https", "[2001:db8::1]:8443"),
            ("[::ffff:192.0.2.1]", "http", "[::ffff:192.0.2.1]"),
            ("xn--bcher-kva.example", "http", "xn--bcher-kva.example"),
            ("my_host~1", "http", "my_host~1"),
            ("a.example:7", "ftp", "a.example:7"),
            ("", "http", nil),
            (".", "http", nil),
            ("a.example..", "http", nil),
            (":80", "http", nil),
            ("a.example:65536", "http", nil),
            ("a.example:8o", "http", nil),
            ("a.example:80:80", "http", nil),
            ("user@a.example", "http", nil),
            ("a%2eexample", "http", nil),
            ("a example", "http", nil),
            ("bücher.example", "http", nil),
            ("[::1", "http", nil),
            ("[]", "http", nil),
            ("[::1]x", "http", nil),
            ("[fe80::1%25eth0]", "http", nil),
            ("[a.b]", "http", nil),
        ] as [(String, String, String?)])
    func normalForm(_ authority: String, _ scheme: String, _ expected: String?) {
        #expect(RequestAuthority.normalize(authority, scheme: scheme) == expected, "\(authority) \(scheme)")
    }

    @Test func authorityOfARequest() {
        func of(_ target: String, _ host: String?, _ scheme: String = "http") -> String? {
            try? RequestAuthority.of(target: target, host: host, scheme: scheme).get()
        }
        // Origin-form: the Host (HTTP/2: :authority, mapped to Host by the HTTP/2 layer).
        #expect(of("/api", "A.Example:80") == "a.example")
        #expect(of("/api", "a.example:443", "https") == "a.example")
        #expect(of("*", "a.example") == "a.example")
        #expect(of("/api", nil) == nil)
        #expect(of("/api", "") == nil)
        #expect(of("/api", "a b") == nil)
        // Absolute-form: the target's authority, with the target's scheme; a Host naming another is refused.
        #expect(of("http://A.Example/api?x=1", "a.example") == "a.example")
        #expect(of("https://a.example:443/api", "a.example") == "a.example")
        #expect(of("http://a.example:8080/api", nil) == "a.example:8080")
        #expect(of("http://a.example", nil) == "a.example")
        #expect(of("http://a.example?x", nil) == "a.example")
        #expect(of("http://a.example/api", "b.example") == nil)
        #expect(of("http://a.example/api", "a.example:8080") == nil)
        #expect(of("http:///api", "a.example") == nil)
        #expect(of("api", "a.example") == nil)
        #expect(of("://a.example/", "a.example") == nil)
        if case .failure(let p) = RequestAuthority.of(target: "http://a.example/", host: "b.example", scheme: "http") {
            #expect(p.description == "the Host differs from the absolute-form target's authority")
        } else {
            Issue.record("an absolute-form target naming another host than Host was accepted")
        }
    }

    // MARK: The gate

    static let appID = "ABCDE12345.com.example.shop"

    struct Inline: LoopExecutor {
        func run(_ work: @escaping @Sendable () -> Void) { work() }
    }

    /// A memory store holding one registered simulated device, and a gate over it.
    final class Harness: @unchecked Sendable {
        let store = MemoryAttestStore(shards: 1)
        let gate: AssertionGate
        let policy: AttestPolicy
        let device: SimulatedDevice

        init() throws {
            gate = AssertionGate(store: store, executor: Inline())
            policy = try AttestPolicy(
                apps: [AppPolicy(teamID: "ABCDE12345", bundleIDs: ["com.example.shop"], environments: [.development])],
                extraRoots: [], challengeTTLMillis: 300_000)
            device = SimulatedDevice(appID: try AppID(HostBindingTests.appID), ca: try TestCA())
            let keyID = try #require(KeyID(device.keyID))
            let token = try challenge()
            let record = DeviceKeyRecord(
                keyID: keyID, publicKey: device.publicKey.x962, counter: 0, appID: HostBindingTests.appID, environment: .development,
                validationCategory: nil, bundleVersion: nil, firstSeenMillis: 0, lastSeenMillis: 0)
            let box = Box<Result<RegistrationOutcome, StoreError>>()
            store.register(Registration(record: record, receipt: [], challenge: token), nowMillis: Self.now) { box.set($0) }
            guard case .registered? = try? box.wait().get() else { throw HarnessError.setup }
        }

        static let now: Int64 = 1_800_000_000_000

        func challenge() throws -> ChallengeToken {
            let box = Box<Result<IssuedChallenge, StoreError>>()
            store.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 300_000), nowMillis: Self.now) { box.set($0) }
            return try box.wait().get().token
        }

        /// A request signed in `version` for `signedFor`, sent with `host` over `scheme`, through a route
        /// verifying `route`: accepted, or the refusal.
        func send(
            version: ClientDataVersion, signedFor: String, host: String?, scheme: String = "http", target: String = "/api/purchase?x=1",
            route: RoutePolicy.ClientData
        ) throws -> GateOutcome {
            let challenge = ChallengeText.encode(try self.challenge())
            let body = Array("{\"sku\":1}".utf8)
            let cd = ClientData.forRequest(version, challenge: challenge, method: "POST", target: target, authority: signedFor, body: body)
            let assertion = device.assert(clientDataHash: SHA256.hash(cd))
            let request = GateRequest(
                method: "POST", target: target, body: body, keyID: Base64.encode(device.keyID), challenge: challenge,
                assertion: Base64.encode(assertion), host: host, scheme: scheme)
            let box = Box<GateOutcome>()
            gate.evaluate(request, route: RoutePolicy(mode: .enforce, clientData: route), policy: policy, nowMillis: Self.now) {
                box.set($0)
            }
            return try box.wait()
        }
    }

    enum HarnessError: Error { case setup, timeout }

    /// The memory store answers on the calling thread; the box also waits in case it does not.
    final class Box<T>: @unchecked Sendable {
        private var value: T?
        private let done = DispatchSemaphore(value: 0)
        func set(_ v: T) {
            value = v
            done.signal()
        }
        func wait() throws -> T {
            guard done.wait(timeout: .now() + 5) == .success, let value else { throw HarnessError.timeout }
            return value
        }
    }

    static func refusal(_ o: GateOutcome) -> Explanation? {
        if case .refused(let e) = o { return e }
        return nil
    }

    @Test func aRequestSignedForOneHostIsRefusedOnAnother() throws {
        let h = try Harness()
        let elsewhere = try #require(Self.refusal(try h.send(version: .v2, signedFor: "a.example", host: "b.example", route: .v2)))
        #expect(elsewhere.error == .verification(.badSignature))
        #expect(elsewhere.step == "verify")
        let fields = Dictionary(elsewhere.fields, uniquingKeysWith: { a, _ in a })
        #expect(fields["authority"] == "b.example")
        #expect(fields["client_data"] == "v2")
        #expect(fields["bound"] == "challenge, method, target, sha256(body), authority")
        #expect(fields["target"] == nil, "the target is the explain entry's own field, query redacted there")
        // Its own host, in any spelling of the same authority.
        for host in ["a.example", "A.Example", "a.example.", "a.example:80"] {
            guard case .accepted = try h.send(version: .v2, signedFor: "a.example", host: host, route: .v2) else {
                Issue.record("signed for a.example, refused with Host \(host)")
                continue
            }
        }
        // The default port depends on the scheme the request arrived with.
        guard case .accepted = try h.send(version: .v2, signedFor: "a.example", host: "a.example:443", scheme: "https", route: .v2) else {
            Issue.record("https with :443 refused")
            return
        }
        #expect(
            Self.refusal(try h.send(version: .v2, signedFor: "a.example", host: "a.example:443", scheme: "http", route: .v2))?.error
                == .verification(.badSignature))
        #expect(
            Self.refusal(try h.send(version: .v2, signedFor: "a.example", host: "a.example:8080", route: .v2))?.error
                == .verification(.badSignature))
    }

    @Test func theRouteNotTheClientChoosesTheVersion() throws {
        let h = try Harness()
        // A v1 route takes v1 client data whatever the Host, and nothing else.
        guard case .accepted = try h.send(version: .v1, signedFor: "", host: "b.example", route: .v1) else {
            Issue.record("a v1 route refused v1 client data")
            return
        }
        #expect(
            Self.refusal(try h.send(version: .v2, signedFor: "b.example", host: "b.example", route: .v1))?.error
                == .verification(.badSignature))
        // A v2 route refuses v1 client data: a client cannot downgrade it by signing the older form.
        let downgraded = try #require(Self.refusal(try h.send(version: .v1, signedFor: "", host: "b.example", route: .v2)))
        #expect(downgraded.error == .verification(.badSignature))
        // A v1 route does not even need a Host.
        guard case .accepted = try h.send(version: .v1, signedFor: "", host: nil, route: .v1) else {
            Issue.record("a v1 route refused a request without Host")
            return
        }
    }

    @Test func absoluteFormAndMissingHost() throws {
        let h = try Harness()
        // Absolute-form: the target's authority is signed (and the target itself, as sent).
        guard
            case .accepted = try h.send(
                version: .v2, signedFor: "a.example", host: "a.example", target: "http://a.example/api/purchase", route: .v2)
        else {
            Issue.record("an absolute-form request signed for its own authority was refused")
            return
        }
        // Routed by a Host that names another authority: refused before any signature check.
        let split = try #require(
            Self.refusal(
                try h.send(version: .v2, signedFor: "a.example", host: "b.example", target: "http://a.example/api/purchase", route: .v2)))
        #expect(split.error == .malformed)
        #expect(split.step == "headers")
        #expect(split.error.status(on: .route) == 401)
        let noHost = try #require(Self.refusal(try h.send(version: .v2, signedFor: "a.example", host: nil, route: .v2)))
        #expect(noHost.error == .malformed)
        #expect(noHost.fields.contains { $0 == ("detail", "the request has no Host") })
        #expect(Self.refusal(try h.send(version: .v2, signedFor: "a.example", host: "a example", route: .v2))?.error == .malformed)
        // None of the refusals consumed anything: the device still passes.
        guard case .accepted = try h.send(version: .v2, signedFor: "a.example", host: "a.example", route: .v2) else {
            Issue.record("the device was refused after the refusals")
            return
        }
    }
}
