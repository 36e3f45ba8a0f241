// Only the two products an app adds for its tests (docs/client-library.md, "Testing on Linux"):
// `TestCA`, `AttestEnvironment` and `AppID` must come with `AppAttestClientSimulator`. This file
// compiles only while they do.
import AppAttestClient
import AppAttestClientSimulator
import Foundation
import GatewayTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("What an app's tests need: two products, one default environment (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct ProductSurfaceTests {
    @Test(
        "the simulator's default environment is the gateway's default (production): a key of each, left at its defaults, registers and is accepted"
    )
    func defaultsAgree() async throws {
        let ca = try TestCA()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("product-surface-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try ca.rootPEM.write(to: dir.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        try ca.receiptRootPEM.write(to: dir.appendingPathComponent("receipt-root.pem"), atomically: true, encoding: .utf8)
        let appID = try AppID("ABCDE12345.com.example.shop")
        let service = try SimulatedAppAttestService(appID: appID.description, ca: ca)
        #expect(service.environment == AttestEnvironment.production)
        // apps[] without `environments`: the gateway's default.
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
                trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
                store: {kind: memory, shards: 4}
                routes:
                  - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                """)
        defer { gw.stop() }
        let client = AppAttestClient(
            configuration: .init(
                gateway: try #require(URL(string: gw.url("public", ""))),
                routes: [.init(pathPrefix: "/api/purchase", binding: .request(.v2))]),
            service: service, keyStore: InMemoryKeyIDStore(), transport: URLSessionTransport(session: URLSession(configuration: .ephemeral))
        )
        var request = URLRequest(url: try #require(URL(string: gw.url("public", "/api/purchase"))))
        request.httpMethod = "POST"
        request.httpBody = Data("{\"sku\":1}".utf8)
        let (data, response) = try await client.send(request)
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")

        // A development key against that gateway: refused at registration, and the refusal names the
        // code the docs explain (environment_mismatch) with an id /explain resolves to the reason.
        let development = try SimulatedAppAttestService(appID: appID.description, environment: .development, ca: ca)
        let devClient = AppAttestClient(
            configuration: .init(
                gateway: try #require(URL(string: gw.url("public", ""))),
                routes: [.init(pathPrefix: "/api/purchase", binding: .request(.v2))]),
            service: development, keyStore: InMemoryKeyIDStore(),
            transport: URLSessionTransport(session: URLSession(configuration: .ephemeral)))
        var refusal: GatewayRefusal?
        do {
            _ = try await devClient.send(request)
        } catch {
            if case AppAttestClientError.refused(let r) = error { refusal = r } else { Issue.record("\(error)") }
        }
        let refused = try #require(refusal, "a development key was accepted by a production-only gateway")
        #expect(refused.code == "environment_mismatch" && refused.endpoint == .register, "\(refused)")
        let id = try #require(refused.requestID)
        let explained = try curl([gw.url("admin", "/explain/\(id)")]).1
        #expect(explained.contains("key is from the development environment; allowed: production"), "\(explained)")
    }
}
