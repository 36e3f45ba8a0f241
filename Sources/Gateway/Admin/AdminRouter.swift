import Foundation
import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire
import Synchronization

/// The admin listener (loopback by default): `/` (the operator's page: docs/operations.md, "The
/// operator's page"), `/healthz` (the process answers), `/readyz`
/// (store restored and accepting writes, serving, not draining; a 503 lists its reasons), `/metrics` (Prometheus text format), and
/// `/explain/<request-id>` (why a request was refused) with `/explain` (the latest refusals), and
/// `/explain/key/<key-id>` (what the store keeps of a key: its app, counter, receipt dates and
/// Apple's risk metric).
///
/// With `admin.token_file`, every path but the health endpoints (and `/metrics` unless
/// `admin.protect_metrics`) answers `401 {"error":"unauthorized"}` without
/// `Authorization: Bearer <token>`, before anything else is decided (method, path): so any path
/// added later, mutating ones included, is guarded too.
final class AdminRouter: RequestRouter, @unchecked Sendable {
    unowned let server: GatewayServer
    let exposition: (@Sendable () -> [UInt8])?
    let explain: ExplainLog
    /// Replaced by a reload (the token file is read again).
    private let access: Mutex<AdminAccess>
    /// The operator's page's sampler; nil (no exposition): `/` is 404 like `/metrics`.
    let sampler: OperatorSampler?

    init(
        server: GatewayServer, exposition: (@Sendable () -> [UInt8])?, explain: ExplainLog, access: AdminAccess,
        sampler: OperatorSampler? = nil
    ) {
        self.server = server
        self.exposition = exposition
        self.explain = explain
        self.access = Mutex(access)
        self.sampler = sampler
    }

    func adopt(_ access: AdminAccess) { self.access.withLock { $0 = access } }

    /// The running configuration's signed verdict (`/.well-known/jwks.json`), replaced by a reload.
    private let verdict = Mutex<VerdictSigning?>(nil)

    func adopt(verdict: VerdictSigning?) { self.verdict.withLock { $0 = verdict } }

    /// `admin.allow` of the running configuration (replaced by a reload) for a connection's peer.
    func admits(_ peer: SocketAddress) -> Bool {
        let access = self.access.withLock { $0 }
        return peer.withAddressBytes { access.admits(address: $0) }
    }

    static let unauthorized = AdminError.unauthorized.response(
        headers: HTTPFields([("WWW-Authenticate", "Bearer realm=\"attest-gateway admin\""), ("Cache-Control", "no-store")]))

    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        let access = self.access.withLock { $0 }
        if access.guards(path: path), !access.authorizes(head.headers["Authorization"]) {
            return .respond(routeName: "admin", Self.unauthorized)
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            return .respond(routeName: "admin", AdminError.methodNotAllowed.response())
        }
        switch path {
        case "/" where sampler != nil:
            return operatorPage(sampler!)
        case "/healthz":
            return .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ok\"}"))
        case "/readyz":
            if server.isReady { return .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ready\"}")) }
            let reasons = JSONObject.Value.array(server.readinessReasons.map { .string($0) })
            return .respond(routeName: "admin", AdminError.notReady.response(extra: [("ready", .bool(false)), ("reasons", reasons)]))
        case "/metrics" where exposition != nil:
            let body = exposition!()
            return .respond(
                routeName: "admin",
                LocalResponse(status: 200, headers: HTTPFields([("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]), body: body))
        case VerdictConfig.jwksPath:
            guard let v = verdict.withLock({ $0 }) else { return .respond(routeName: "admin", ProxyError.noRoute.response()) }
            return .respond(routeName: "admin", v.jwksResponse(nowMillis: AttestContext.nowMillis()))
        case "/explain":
            var items: [JSONObject.Value] = []
            for e in explain.recent(50) { items.append(.object(ExplainLog.json(e))) }
            var o = JSONObject()
            o.set("refusals", .array(items))
            return .respond(routeName: "admin", LocalResponse.json(200, o.description, headers: Self.noStore))
        case let p where p.hasPrefix(Self.keyPrefix):
            return keyDecision(String(p.dropFirst(Self.keyPrefix.count)))
        case let p where p.hasPrefix("/explain/"):
            let id = String(p.dropFirst("/explain/".count))
            guard let e = explain.entry(id) else {
                return .respond(routeName: "admin", AdminError.unknownRequestID.response())
            }
            return .respond(routeName: "admin", LocalResponse.json(200, ExplainLog.json(e).description, headers: Self.noStore))
        default:
            return .respond(routeName: "admin", ProxyError.noRoute.response())
        }
    }

    static let noStore = HTTPFields([("Cache-Control", "no-store")])

    static let pageFields = HTTPFields(OperatorPage.headers)

    /// `/`: the operator's page, built on the sampler's queue (never on this loop), answered here.
    private func operatorPage(_ sampler: OperatorSampler) -> RouteDecision {
        let executor = EventLoopExecutor(loop: server.loops[0])
        return .buffer(maxBody: 0, routeName: "admin") { [server] _, done in
            let bound = LoopBound(done)
            sampler.page({ server.operatorInputs() }) { html in
                executor.run { bound.value(.respond(LocalResponse(status: 200, headers: Self.pageFields, body: html))) }
            }
        }
    }

    static let keyPrefix = "/explain/key/"

    /// `/explain/key/<key-id>` (base64, base64url or hex): the key as the store has it, read from
    /// the store (its answer comes back to the admin loop).
    private func keyDecision(_ text: String) -> RouteDecision {
        let (bytes, _) = BinaryEncoding.decode(text.removingPercentEncoding ?? text)
        guard let bytes, let id = KeyID(bytes) else {
            return .respond(routeName: "admin", AdminError.badKeyID.response())
        }
        let executor = EventLoopExecutor(loop: server.loops[0])
        return .buffer(maxBody: 0, routeName: "admin") { [server] _, done in
            let bound = LoopBound(done)
            server.deviceKey(id) { result in
                executor.run {
                    switch result {
                    case .failure(let e):
                        bound.value(.respond(AdminError.storeUnavailable.response(extra: [("detail", .string(e.detail))])))
                    case .success(nil):
                        bound.value(.respond(AdminError.unknownKey.response()))
                    case .success(let record?):
                        guard let account = record.account else {
                            return bound.value(.respond(LocalResponse.json(200, Self.json(record).description, headers: Self.noStore)))
                        }
                        // Keys per account: the account's keys in the window now, besides the count stored with the key.
                        server.accountKeyCount(account) { count in
                            executor.run {
                                var o = Self.json(record)
                                o.set("account", .object(Self.json(account, keysNow: try? count.get())))
                                bound.value(.respond(LocalResponse.json(200, o.description, headers: Self.noStore)))
                            }
                        }
                    }
                }
            }
        }
    }

    /// A key as `/explain/key/<id>` shows it (no public key, no receipt bytes).
    static func json(_ r: DeviceKeyRecord) -> JSONObject {
        var o = JSONObject()
        o.set("keyId", r.keyID.description)
        o.set("appId", r.appID)
        o.set("environment", r.environment.name)
        o.set("counter", r.counter)
        o.set("firstSeen", RFC3339.format(millis: r.firstSeenMillis))
        o.set("lastSeen", RFC3339.format(millis: r.lastSeenMillis))
        guard let risk = r.risk else {
            o.set("risk", .null)
            return o
        }
        var k = JSONObject()
        k.set("metric", risk.metric.map { .int(Int64($0)) } ?? .null)
        k.set("stale", risk.stale)
        k.set("receiptCreated", RFC3339.format(millis: risk.receiptCreatedMillis))
        k.set("receiptNotBefore", risk.notBeforeMillis.map { RFC3339.format(millis: $0) })
        k.set("receiptExpires", risk.expiresMillis.map { RFC3339.format(millis: $0) })
        k.set("nextRefresh", risk.nextRefreshMillis.map { RFC3339.format(millis: $0) })
        o.set("risk", .object(k))
        return o
    }

    /// A key's account as `/explain/key/<id>` shows it: the account's SHA-256 (never the id), the
    /// key count stored with the key and when, and the account's keys in the window now.
    static func json(_ a: KeyAccount, keysNow: Int?) -> JSONObject {
        var o = JSONObject()
        o.set("sha256", a.digestHex)
        o.set("keys", a.keyCount)
        o.set("associated", RFC3339.format(millis: a.associatedMillis))
        o.set("keysInWindow", keysNow.map { .int(Int64($0)) } ?? .null)
        return o
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {}
}

/// The admin listener's errors, in one table (code, status); like proxy errors they carry no client
/// action. An unknown path is the proxy's `no_route`. docs/errors.md lists them.
enum AdminError: CaseIterable {
    /// `admin.token_file` is set and the request has no valid `Authorization: Bearer <token>`.
    case unauthorized
    /// Admin paths answer GET and HEAD only.
    case methodNotAllowed
    /// `/explain/<id>`: no refusal with that id is kept (never issued, or pushed out).
    case unknownRequestID
    /// `/readyz`: the store is not restored, the gateway not serving, or draining (`reasons`).
    case notReady
    /// `/explain/key/<id>`: the id is not a key id (32 bytes in base64, base64url or hex).
    case badKeyID
    /// `/explain/key/<id>`: no key with that id is registered.
    case unknownKey
    /// `/explain/key/<id>`: the store could not answer (the same code and status as the gate's).
    case storeUnavailable

    var entry: (code: String, status: Int) {
        switch self {
        case .unauthorized: ("unauthorized", 401)
        case .methodNotAllowed: ("method_not_allowed", 405)
        case .unknownRequestID: ("unknown_request_id", 404)
        case .notReady: ("not_ready", 503)
        case .badKeyID: ("bad_key_id", 400)
        case .unknownKey: ("unknown_key", 404)
        case .storeUnavailable: (GateError.storeUnavailable.code, GateError.storeUnavailable.status)
        }
    }

    var code: String { entry.code }
    var status: Int { entry.status }

    func response(extra: [(String, JSONObject.Value)] = [], headers: HTTPFields = HTTPFields()) -> LocalResponse {
        ErrorResponse.make(status: status, code: code, extra: extra, headers: headers)
    }
}
