import AppAttest
import AppAttestSimulator
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayIO
import GatewayPolicy
import GatewayStore
import GatewayWire
import MetricsTestKit
import Synchronization
import Testing

@testable import Gateway
@testable import GatewayHTTP
@testable import GatewayProxy

/// The composition root carries out the `RouteVerdict` and decides nothing itself: for each kind of
/// verdict (refused before the body, refused after it, would_refuse, fail_open, accepted, under
/// enforce, shadow and a partial rollout) the router's answer, the verdict metric's labels and the
/// explain record are what the verdict says. One loop, the demo upstream (it answers what it would
/// have forwarded), a memory store behind a switch that makes it unreachable.
@Suite("AttestEndpoints carries out the RouteVerdict: answer, metric labels, explain record")
struct AttestEndpointsWiringTests {
    static let shop = "ABCDE12345.com.example.shop"
    static let host = "gw.example"
    static let verifiedHeader = "X-App-Attest-Verified-Key-Id"

    static let routes: [String: RoutePolicy] = [
        "enforced": RoutePolicy(mode: .enforce),
        "shadowed": RoutePolicy(mode: .shadow),
        "quarter": RoutePolicy(mode: .enforce, rolloutBasisPoints: 2_500),
        "open": RoutePolicy(mode: .enforce, onStoreError: .failOpen),
        // DeviceCheck fallbacks (the verdict does not depend on the fallback's own settings).
        "fb-enforced": RoutePolicy(mode: .enforce),
        "fb-shadowed": RoutePolicy(mode: .shadow),
        "fb-tight": RoutePolicy(mode: .enforce),
    ]

    /// The team key the `apple` section names (a fallback needs `apple`), written once.
    static let teamKeyPath: String = {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("wiring-team-\(UUID().uuidString).p8").path
        FileManager.default.createFile(
            atPath: path, contents: Data(ECPrivateKey(curve: .p256).pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600])
        return path
    }()

    static let yaml = """
        listeners:
          - {name: public, address: 127.0.0.1:0}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        routes:
          - {name: enforced, match: {path_prefix: /enforced}, upstream: demo, assertion: {mode: enforce}}
          - {name: shadowed, match: {path_prefix: /shadowed}, upstream: demo, assertion: {mode: shadow}}
          - {name: quarter, match: {path_prefix: /quarter}, upstream: demo, assertion: {mode: enforce, rollout: 25%}}
          - {name: open, match: {path_prefix: /open}, upstream: demo, assertion: {mode: enforce, on_store_error: fail_open}}
          - {name: fb-enforced, match: {path_prefix: /fb-enforced}, upstream: demo, assertion: {mode: enforce, fallback: {devicecheck: true, max_share: 100%}}}
          - {name: fb-shadowed, match: {path_prefix: /fb-shadowed}, upstream: demo, assertion: {mode: shadow, fallback: {devicecheck: true, max_share: 100%}}}
          - {name: fb-tight, match: {path_prefix: /fb-tight}, upstream: demo, assertion: {mode: enforce, fallback: {devicecheck: true, max_share: 10%, min_requests: 1}}}
        apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: \(teamKeyPath), devicecheck_url: https://127.0.0.1:9}
        risk: {refresh: "off"}
        """

    /// The memory store, or (switched) a store that cannot be reached.
    final class SwitchableStore: AttestStore {
        let inner = MemoryAttestStore(shards: 1)
        let down = Atomic<Bool>(false)
        static let error = StoreError(.unavailable, "connection refused (test)")

        func issueChallenge(
            _ request: ChallengeRequest, nowMillis: Int64, completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
        ) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.issueChallenge(request, nowMillis: nowMillis, completion: completion)
        }

        func challengeState(
            _ token: ChallengeToken, nowMillis: Int64, completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void
        ) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.challengeState(token, nowMillis: nowMillis, completion: completion)
        }

        func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.deviceKey(id, completion: completion)
        }

        func register(
            _ registration: Registration, nowMillis: Int64,
            completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void
        ) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.register(registration, nowMillis: nowMillis, completion: completion)
        }

        func commitAssertion(
            _ commit: AssertionCommit, nowMillis: Int64, completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
        ) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.commitAssertion(commit, nowMillis: nowMillis, completion: completion)
        }

        func claimToken(
            _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
            completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void
        ) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.claimToken(digest, ttlMillis: ttlMillis, nowMillis: nowMillis, completion: completion)
        }

        func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
            if down.load(ordering: .relaxed) { return completion(.failure(Self.error)) }
            inner.releaseToken(digest, completion: completion)
        }

        var statistics: StoreStatistics { inner.statistics }
    }

    /// What the router did with a request: answered from the head, or after reading the body.
    enum Answer {
        case beforeBody(LocalResponse)
        case afterBody(LocalResponse)

        var response: LocalResponse {
            switch self {
            case .beforeBody(let r), .afterBody(let r): r
            }
        }

        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        }

        /// The fields the demo upstream was sent.
        var forwardedHeaders: [String: String]? { json["route"] == nil ? nil : json["headers"] as? [String: String] }
    }

    final class Harness {
        let loop = EventLoop(index: 0)
        let metrics = TestMetrics()
        let explain = ExplainLog()
        let store = SwitchableStore()
        let router: GatewayRouter
        let device: SimulatedDevice

        init() throws {
            let config = try GatewayConfig.parse(yaml: AttestEndpointsWiringTests.yaml, baseDirectory: "/")
            let runtime = try GatewayRuntime(config, coreCount: 1)
            let attestMetrics = AttestMetrics(factory: metrics, persistent: false)
            let attest = AttestContext(
                store: store, requiresKeyID: false, explain: explain, metrics: attestMetrics, limitEvents: LimitEvents(),
                deviceCheck: DeviceCheckService(client: AppleClient(loop: loop), metrics: attestMetrics))
            let gatewayMetrics = GatewayMetrics(factory: metrics)
            let loop = self.loop
            router = loop.queue.sync {
                GatewayRouter(loop: loop, runtime: runtime, events: GatewayEvents(target: nil), metrics: gatewayMetrics, attest: attest)
            }
            device = SimulatedDevice(appID: try AppID(AttestEndpointsWiringTests.shop), ca: try TestCA())
        }

        deinit { loop.shutdown() }

        /// The device's key, registered in the store (attestation is the registrar's, tested apart).
        func registerDevice() throws {
            let keyID = try #require(KeyID(device.keyID))
            let record = DeviceKeyRecord(
                keyID: keyID, publicKey: device.publicKey.x962, counter: 0, appID: AttestEndpointsWiringTests.shop,
                environment: .development, validationCategory: nil, bundleVersion: nil, firstSeenMillis: 0, lastSeenMillis: 0)
            let registration = Registration(record: record, receipt: [], challenge: try #require(ChallengeText.decode(try challenge())))
            let done = Mutex<Bool>(false)
            store.inner.register(registration, nowMillis: AttestContext.nowMillis()) { r in
                if case .success(.registered) = r { done.withLock { $0 = true } }
            }
            #expect(done.withLock { $0 })
        }

        func challenge() throws -> String {
            let issued = Mutex<IssuedChallenge?>(nil)
            store.inner.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 60_000), nowMillis: AttestContext.nowMillis())
            {
                r in issued.withLock { $0 = try? r.get() }
            }
            return ChallengeText.encode(try #require(issued.withLock { $0 }).token)
        }

        /// The assertion headers of a request the device signs for `target` (client data v2).
        func signedHeaders(target: String, body: [UInt8], keyID: [UInt8]? = nil) throws -> [(String, String)] {
            let challenge = try challenge()
            let clientData = ClientData.forRequest(
                .v2, challenge: challenge, method: "POST", target: target, authority: AttestEndpointsWiringTests.host, body: body)
            let assertion = device.assert(clientDataHash: SHA256.hash(clientData))
            return [
                (AttestHeaders.keyID, Base64.encode(keyID ?? device.keyID)), (AttestHeaders.challenge, challenge),
                (AttestHeaders.assertion, Base64.encode(assertion)),
            ]
        }

        /// `POST target` through the router, on its loop (the memory store answers there, inline).
        func send(_ target: String, headers: [(String, String)], body: [UInt8] = Array("{\"n\":1}".utf8)) throws -> Answer {
            let head = HTTPRequestHead(
                method: "POST", target: target, minorVersion: 1,
                headers: HTTPFields([("Host", AttestEndpointsWiringTests.host)] + headers), framing: .contentLength(UInt64(body.count)))
            let peer = try SocketAddress(host: "192.0.2.7", port: 40_000)
            let router = self.router
            return try loop.queue.sync { () throws -> Answer in
                let id = "wiring-\(UInt32.random(in: 0...UInt32.max))"
                switch router.route(head, path: target, peer: peer, requestID: RequestID(id)) {
                case .respond(_, let response):
                    return .beforeBody(response)
                case .buffer(_, _, let handler):
                    var outcome: BufferedOutcome?
                    handler(BufferedRequest(head: head, path: target, body: body, peer: peer, scheme: "http", requestID: RequestID(id))) {
                        outcome = $0
                    }
                    guard case .respond(let response)? = outcome else { throw WiringError.notAnswered }
                    return .afterBody(response)
                case .forward:
                    throw WiringError.notAnswered
                }
            }
        }

        func verdicts(_ route: String, _ v: RouteVerdict) -> Int64 {
            let dimensions = [("route", route), ("mode", v.mode.rawValue), ("verdict", v.verdict.rawValue), ("reason", v.reason)]
            return (try? metrics.expectCounter(AttestMetrics.verdicts, dimensions))?.totalValue ?? 0
        }
    }

    enum WiringError: Error { case notAnswered }

    /// Sends a request to `route` and checks the router did what `RouteVerdict` decides for its key
    /// and the gate's outcome: refused (before the body exactly when the head decided) with the
    /// verdict's status, or forwarded with or without the verified header; one count under the
    /// verdict's labels; a refusal (or would-be refusal) recorded for explain with the verdict's
    /// mode and status.
    func expectCarriedOut(
        _ h: Harness, route: String, headers: [(String, String)], outcome: RouteVerdict.Outcome, decidedByHead: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let policy = try #require(Self.routes[route])
        let keyID = headers.first { $0.0 == AttestHeaders.keyID }?.1
        let verdict = try #require(RouteVerdict(route: policy, keyID: keyID, outcome: outcome))
        let counted = h.verdicts(route, verdict)
        let recorded = h.explain.count
        let answer = try h.send("/\(route)/x", headers: headers)
        let what = "\(route) \(outcome): \(verdict)"
        #expect(h.verdicts(route, verdict) == counted + 1, "\(what): the verdict metric", sourceLocation: sourceLocation)
        switch verdict.action {
        case .refuse(let status):
            let beforeBody = if case .beforeBody = answer { true } else { false }
            #expect(beforeBody == decidedByHead, "\(what): answered before the body: \(beforeBody)", sourceLocation: sourceLocation)
            #expect(answer.response.status == status, "\(what)", sourceLocation: sourceLocation)
            guard case .refused(let error) = outcome else {
                Issue.record("\(what): refused an accepted request", sourceLocation: sourceLocation)
                return
            }
            #expect(answer.json["error"] as? String == error.code, "\(what)", sourceLocation: sourceLocation)
            let id = try #require(answer.response.headers[AttestHeaders.requestID], sourceLocation: sourceLocation)
            let entry = try #require(h.explain.entry(id), sourceLocation: sourceLocation)
            #expect(
                entry.status == status && entry.mode == verdict.mode.rawValue && entry.route == route, "\(what)",
                sourceLocation: sourceLocation)
            #expect(entry.verdict == .refused, "\(what)", sourceLocation: sourceLocation)
        case .forwardUnverified(let recordedStatus):
            guard case .afterBody = answer else {
                Issue.record("\(what): not forwarded", sourceLocation: sourceLocation)
                return
            }
            let forwarded = try #require(answer.forwardedHeaders, "\(what): not forwarded", sourceLocation: sourceLocation)
            #expect(forwarded[Self.verifiedHeader] == nil, "\(what)", sourceLocation: sourceLocation)
            #expect(
                forwarded[AttestHeaders.assertion] == nil && forwarded[AttestHeaders.keyID] == nil, "\(what)",
                sourceLocation: sourceLocation)
            #expect(h.explain.count == recorded + 1, "\(what): not recorded for explain", sourceLocation: sourceLocation)
            let entry = try #require(h.explain.recent(1).first, sourceLocation: sourceLocation)
            #expect(
                entry.refusalStatus == recordedStatus && entry.mode == verdict.mode.rawValue && entry.route == route, "\(what)",
                sourceLocation: sourceLocation)
            // The entry says the request went on: the status a refusal sends is its own field; `status`
            // is what the client gets, known when the exchange ends (the demo's 200 here, or not yet).
            #expect(entry.status == nil || entry.status == 200, "\(what)", sourceLocation: sourceLocation)
            #expect(entry.verdict == verdict.verdict, "\(what)", sourceLocation: sourceLocation)
            #expect(
                ExplainLog.json(entry).description.contains("\"verdict\":\"\(verdict.verdict.rawValue)\""), "\(what)",
                sourceLocation: sourceLocation)
            if case .refused(let error) = outcome { #expect(entry.explanation.error == error, "\(what)", sourceLocation: sourceLocation) }
        case .forwardVerifiedRecorded(let recordedStatus):
            // A key over the route's max_risk_metric, flagged or shadowed (the routes here have none;
            // tests/IntegrationTests/RiskRefreshTests drives it with a real store and stand-in).
            let forwarded = try #require(answer.forwardedHeaders, "\(what): not forwarded", sourceLocation: sourceLocation)
            #expect(forwarded[Self.verifiedHeader] == Base64.encode(h.device.keyID), "\(what)", sourceLocation: sourceLocation)
            let entry = try #require(h.explain.recent(1).first, sourceLocation: sourceLocation)
            #expect(entry.refusalStatus == recordedStatus && entry.verdict == verdict.verdict, "\(what)", sourceLocation: sourceLocation)
            #expect(entry.status == nil || entry.status == 200, "\(what)", sourceLocation: sourceLocation)
        case .forwardVerified:
            guard case .afterBody = answer else {
                Issue.record("\(what): not forwarded", sourceLocation: sourceLocation)
                return
            }
            let forwarded = try #require(answer.forwardedHeaders, "\(what): not forwarded", sourceLocation: sourceLocation)
            #expect(forwarded[Self.verifiedHeader] == Base64.encode(h.device.keyID), "\(what)", sourceLocation: sourceLocation)
            #expect(answer.response.headers[AttestHeaders.nextChallenge] != nil, "\(what)", sourceLocation: sourceLocation)
            #expect(h.explain.count == recorded, "\(what): an accepted request was recorded for explain", sourceLocation: sourceLocation)
        }
    }

    /// A key at a known rollout position (first four bytes, big-endian).
    static func key(at position: UInt32) -> [UInt8] {
        [UInt8(position >> 24), UInt8((position >> 16) & 0xff), UInt8((position >> 8) & 0xff), UInt8(position & 0xff)]
            + [UInt8](repeating: 0x5a, count: 28)
    }

    @Test("refusals: from the head, after the body, shadowed, and on either side of a partial rollout")
    func refusals() throws {
        let h = try Harness()
        let body = Array("{\"n\":1}".utf8)
        let inside = Self.key(at: 7), outside = Self.key(at: 9_000)
        for route in ["enforced", "shadowed", "quarter", "open"] {
            let target = "/\(route)/x"
            // No assertion headers: decided by the head (refused there when enforced).
            try expectCarriedOut(h, route: route, headers: [], outcome: .refused(.assertionMissing), decidedByHead: true)
            // Well-formed headers of an unknown key: decided by the gate after the body.
            try expectCarriedOut(h, route: route, headers: try h.signedHeaders(target: target, body: body), outcome: .refused(.keyUnknown))
            // A malformed assertion of a key inside and outside the rollout share.
            for key in [inside, outside] {
                let malformed = [
                    (AttestHeaders.keyID, Base64.encode(key)), (AttestHeaders.challenge, try h.challenge()),
                    (AttestHeaders.assertion, "AAAA"),
                ]
                try expectCarriedOut(h, route: route, headers: malformed, outcome: .refused(.malformed), decidedByHead: true)
                try expectCarriedOut(
                    h, route: route, headers: try h.signedHeaders(target: target, body: body, keyID: key), outcome: .refused(.keyUnknown))
            }
        }
    }

    @Test("the store unreachable: fail_closed refuses with 503, fail_open forwards unverified, shadow would refuse")
    func storeUnavailable() throws {
        let h = try Harness()
        try h.registerDevice()
        let body = Array("{\"n\":1}".utf8)
        let headers = try ["enforced", "shadowed", "quarter", "open"].map { try h.signedHeaders(target: "/\($0)/x", body: body) }
        h.store.down.store(true, ordering: .relaxed)
        for (route, signed) in zip(["enforced", "shadowed", "quarter", "open"], headers) {
            try expectCarriedOut(h, route: route, headers: signed, outcome: .refused(.storeUnavailable))
        }
    }

    @Test(
        "the DeviceCheck fallback's gate goes through the same carry-out: a token that is not one, a share over max_share; refused, or shadowed and recorded"
    )
    func fallback() throws {
        let h = try Harness()
        // Not a DeviceCheck token: refused after the body (enforced), forwarded unverified and
        // recorded (shadowed); DeviceCheck is never called.
        let notAToken = [(AttestHeaders.deviceToken, "!!! not base64 !!!")]
        try expectCarriedOut(h, route: "fb-enforced", headers: notAToken, outcome: .refused(.deviceTokenInvalid))
        try expectCarriedOut(h, route: "fb-shadowed", headers: notAToken, outcome: .refused(.deviceTokenInvalid))
        #expect(h.explain.recent(1).first?.explanation.fields.contains { $0 == ("path", "devicecheck") } == true)
        // The route's share of fallback requests above max_share: decided from the head.
        try expectCarriedOut(h, route: "fb-tight", headers: notAToken, outcome: .refused(.fallbackShareExceeded), decidedByHead: true)
        #expect(
            (try? h.metrics.expectCounter(AttestMetrics.fallbackRequests, [("route", "fb-tight"), ("result", "fallback_share_exceeded")]))?
                .totalValue == 1)
    }

    @Test("accepted: forwarded with the verified key id and the next challenge, enforced or shadowed")
    func accepted() throws {
        let h = try Harness()
        try h.registerDevice()
        for route in ["enforced", "shadowed", "quarter", "open"] {
            try expectCarriedOut(
                h, route: route, headers: try h.signedHeaders(target: "/\(route)/x", body: Array("{\"n\":1}".utf8)), outcome: .accepted)
        }
        #expect((try? h.metrics.expectCounter(AttestMetrics.challengesIssued, [("purpose", "next")]))?.totalValue == 4)
    }
}
