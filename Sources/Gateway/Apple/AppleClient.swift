import Foundation
import GatewayIO
import GatewayProxy
import Synchronization

/// The one client of Apple's device services: requests go through the gateway's own upstream
/// machinery (`UpstreamClient` over `UpstreamPool` and `UpstreamExchange`, TLS by `TLSClientContext`),
/// pooled and kept alive per service host, with the connect and response timeouts of `apple`, on
/// one of the gateway's event loops. Nothing here blocks: the caller resolves the host (off the
/// loops) and gets its answer through a completion on its own queue. The risk refresher calls the
/// App Attest data service with it; DeviceCheck's three endpoints will go the same way (with the
/// token as `Bearer`, `AppleServices.TokenStyle`).
final class AppleClient: @unchecked Sendable {
    let loop: EventLoop
    /// Per service endpoint and resolved address: its client (loop-confined, touched on `loop` only).
    private var clients: [AppleServices.Endpoint: (address: SocketAddress, tls: ObjectIdentifier, client: UpstreamClient)] = [:]

    /// Responses of Apple's services are a receipt (about 5 KB, base64) or a few bytes of JSON.
    static let maxResponseBytes = 64 * 1024

    init(loop: EventLoop) {
        self.loop = loop
    }

    enum CallError: Error, CustomStringConvertible {
        case token(String)
        case failed(UpstreamClientError)

        var description: String {
            switch self {
            case .token(let why): "the token could not be made: \(why)"
            case .failed(let e): e.description
            }
        }
    }

    /// POSTs `body` to `endpoint` (reached at `address`) with the team's token; `completion` runs on `queue`.
    func post(
        _ endpoint: AppleServices.Endpoint, at address: SocketAddress, services: AppleServices, token: AppleServices.TokenStyle,
        fields: [(String, String)], body: [UInt8], queue: DispatchQueue,
        completion: @escaping @Sendable (Result<UpstreamResponse, CallError>) -> Void
    ) {
        let authorization: String
        do {
            authorization = try services.authorization(token, nowSeconds: Int64(Date().timeIntervalSince1970))
        } catch {
            return queue.async { completion(.failure(.token("\(error)"))) }
        }
        let request = UpstreamRequest(
            method: "POST", target: endpoint.target, authority: endpoint.authority,
            fields: [("Authorization", authorization)] + fields, body: body)
        loop.queue.async { [self] in
            client(endpoint, address: address, services: services).send(request) { result in
                queue.async { completion(result.mapError { .failed($0) }) }
            }
        }
    }

    /// The endpoint's client for this address and TLS context, made on first use; a client of an
    /// older address or context is retired (its idle connections closed, busy ones after their call).
    private func client(_ endpoint: AppleServices.Endpoint, address: SocketAddress, services: AppleServices) -> UpstreamClient {
        let tls = ObjectIdentifier(services.tls)
        if let c = clients[endpoint], c.address == address, c.tls == tls { return c.client }
        clients[endpoint]?.client.pool.retire()
        let target = UpstreamTarget(
            name: "apple:" + endpoint.host, address: address, maxConnections: 8, connectTimeoutMillis: services.connectTimeoutMillis,
            responseTimeoutMillis: services.responseTimeoutMillis, idleTimeoutMillis: 60_000, maxWaiters: 256, tls: services.tls,
            tlsServerName: endpoint.host)
        let client = UpstreamClient(pool: UpstreamPool(target: target, loop: loop), maxResponseBytes: Self.maxResponseBytes)
        clients[endpoint] = (address, tls, client)
        return client
    }

    /// Closes the idle connections (drain).
    func close() {
        loop.queue.async { [self] in
            for (_, c) in clients { c.client.pool.retire() }
            clients = [:]
        }
    }
}
