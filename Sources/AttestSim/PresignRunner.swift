import AppAttest
import AppAttestSimulator
import Dispatch
import Foundation
import GatewayCrypto
import GatewayWire
import Synchronization

/// `attest-sim presign`: registers devices with a gateway, then signs protected requests ahead of
/// time and writes them out, so that a replay client (bench/enforce-vs-openssl: wrk with a Lua
/// script) sends valid assertions without signing anything while it is measured.
///
/// Each key's requests carry counters 1, 2, … in order; the file lists them round-robin over the keys
/// (request j of every key, then request j + 1 of every key), so a client that sends the lines in
/// order with fewer connections than keys never has two requests of one key in flight.
/// With `binding: .request` every request carries its own challenge, fetched bound to its key
/// (`purpose: assert`) before signing: at most the gateway's `store.max_challenges_per_key` per key.
public struct PresignOptions: Sendable {
    public var endpoint: HTTPEndpoint
    public var paths: GatewayPaths
    public var appID: AppID
    public var environment: AttestEnvironment
    public var keys: Int
    public var perKey: Int
    public var method: String
    public var path: String
    public var bodyBytes: Int
    public var binding: Binding
    public var clientData: ClientDataVersion
    public var host: RequestHost
    public var threads: Int
    public var timeout: Double
    /// Key `k` is of `platforms[k % count]` (`--platform`); Android keys run `androidApp`.
    public var platforms: [Platform] = [.ios]
    public var androidApp: AndroidApp? = nil

    public init(
        endpoint: HTTPEndpoint, paths: GatewayPaths, appID: AppID, environment: AttestEnvironment, keys: Int, perKey: Int,
        method: String, path: String, bodyBytes: Int, binding: Binding, clientData: ClientDataVersion, host: RequestHost?,
        threads: Int, timeout: Double
    ) {
        self.endpoint = endpoint
        self.paths = paths
        self.appID = appID
        self.environment = environment
        self.keys = keys
        self.perKey = perKey
        self.method = method
        self.path = path
        self.bodyBytes = bodyBytes
        self.binding = binding
        self.clientData = clientData
        self.host = host ?? RequestHost(endpoint: endpoint)
        self.threads = threads
        self.timeout = timeout
    }
}

public struct PresignRunner: Sendable {
    public let options: PresignOptions
    public let ca: TestCA
    /// Issues the Android keys' chains (required when `options.platforms` has `.android`).
    public let androidCA: TestAndroidCA?

    public init(options: PresignOptions, ca: TestCA, androidCA: TestAndroidCA? = nil) {
        self.options = options
        self.ca = ca
        self.androidCA = androidCA
    }

    func device(_ k: Int) throws(AttestSimError) -> SimDevice {
        let o = options
        switch o.platforms[k % o.platforms.count] {
        case .ios: return .ios(SimulatedDevice(appID: o.appID, environment: o.environment, ca: ca))
        case .android:
            guard let androidCA, let app = o.androidApp else { throw .usage("Android keys need the CA's Android CA and the app") }
            return .android(try AndroidSimDevice(ca: androidCA, app: app))
        }
    }

    /// One line per request, tab-separated: method, target, key id, challenge ("-" none),
    /// assertion, body (printable ASCII, no tabs).
    public func run() throws(AttestSimError) -> [String] {
        let o = options
        let threads = max(1, min(o.threads, o.keys))
        let lines = Mutex<[[String]]>(Array(repeating: [], count: o.keys))
        let failure = Mutex<String?>(nil)
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            let client = HTTPClient(endpoint: o.endpoint, timeout: o.timeout)
            defer { client.close() }
            let session = GatewaySession(client: client, paths: o.paths)
            for k in stride(from: t, to: o.keys, by: threads) {
                if failure.withLock({ $0 != nil }) { return }
                do throws(AttestSimError) {
                    let device = try device(k)
                    try register(device, session)
                    var mine: [String] = []
                    mine.reserveCapacity(o.perKey)
                    for j in 0..<o.perKey {
                        var challenge: String?
                        if o.binding == .request {
                            challenge = try fetch(session, purpose: .assert, keyID: device.keyID)
                        }
                        let body = Self.body(key: k, request: j, bytes: o.bodyBytes)
                        let request = device.protected(
                            challenge: challenge, method: o.method, target: o.path, body: body, binding: o.binding,
                            version: o.clientData, host: o.host)
                        let assertion = request.headers.first { $0.0 == AttestHeaders.assertion }!.1
                        mine.append(
                            [
                                o.method, o.path, Base64.encode(device.keyID), challenge ?? "-", assertion,
                                String(decoding: body, as: UTF8.self),
                            ].joined(separator: "\t"))
                    }
                    lines.withLock { $0[k] = mine }
                } catch {
                    failure.withLock { $0 = $0 ?? "key \(k): \(error)" }
                    return
                }
            }
        }
        if let f = failure.withLock({ $0 }) { throw .gateway(f) }
        let perKey = lines.withLock { $0 }
        var out: [String] = []
        out.reserveCapacity(o.keys * o.perKey)
        for j in 0..<o.perKey { for k in 0..<o.keys { out.append(perKey[k][j]) } }
        return out
    }

    private func fetch(_ session: GatewaySession, purpose: ChallengePurpose, keyID: [UInt8]?) throws(AttestSimError) -> String {
        let response: HTTPResponse
        let challenge: IssuedChallenge?
        do {
            (response, challenge) = try session.fetchChallenge(purpose: purpose, keyID: keyID)
        } catch {
            throw .transport(error)
        }
        guard let challenge else {
            throw .gateway("challenge refused: \(response.status) \(response.bodyText.prefix(200))")
        }
        return challenge.value
    }

    private func register(_ device: SimDevice, _ session: GatewaySession) throws(AttestSimError) {
        let challenge = try fetch(session, purpose: .register, keyID: nil)
        let request = try device.registration(paths: session.paths, challenge: challenge)
        let response: HTTPResponse
        do {
            response = try session.client.send(request)
        } catch {
            throw .transport(error)
        }
        guard (200..<300).contains(response.status) else {
            throw .gateway("registration refused: \(response.status) \(response.bodyText.prefix(200))")
        }
    }

    /// `{"k":K,"n":N,"pad":"xxx…"}` of `bytes` bytes (at least the JSON without padding).
    static func body(key: Int, request: Int, bytes: Int) -> [UInt8] {
        let head = "{\"k\":\(key),\"n\":\(request),\"pad\":\""
        let pad = max(0, bytes - head.utf8.count - 2)
        return Array((head + String(repeating: "x", count: pad) + "\"}").utf8)
    }
}
