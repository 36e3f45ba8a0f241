import Foundation
import Synchronization

/// The options of `attest-sim flood`, validated.
public struct FloodOptions: Sendable {
    /// What the flood's challenge requests name.
    public enum KeyIDs: String, Sendable, CaseIterable {
        /// No body: anonymous challenges.
        case none
        /// `{"keyId":…}` with a fresh random key id each time (keys nobody registered).
        case random
    }

    public var endpoint: HTTPEndpoint
    public var paths: GatewayPaths
    public var seconds: Double
    public var connections: Int
    public var keyIDs: KeyIDs
    public var source: String?
    public var timeout: Double

    public init(
        endpoint: HTTPEndpoint, paths: GatewayPaths = GatewayPaths(), seconds: Double, connections: Int, keyIDs: KeyIDs = .none,
        source: String? = nil, timeout: Double = 10
    ) throws(AttestSimError) {
        guard seconds > 0, seconds <= 3600 else { throw .usage("--seconds must be more than 0 and at most 3600 (got \(seconds))") }
        guard (1...256).contains(connections) else { throw .usage("--connections must be 1…256 (got \(connections))") }
        guard timeout > 0 else { throw .usage("--timeout must be more than 0 seconds") }
        try HTTPEndpoint.checkSource(source)
        guard paths.challenge.hasPrefix("/") else { throw .usage("the challenge path must start with / (got \"\(paths.challenge)\")") }
        self.endpoint = endpoint
        self.paths = paths
        self.seconds = seconds
        self.connections = connections
        self.keyIDs = keyIDs
        self.source = source
        self.timeout = timeout
    }
}

/// What `attest-sim flood` saw.
public struct FloodReport: Sendable {
    public var gateway: String
    public var seconds: Double
    public var connections: Int
    public var keyIDs: FloodOptions.KeyIDs
    public var source: String?
    /// `"201"`, `"429 rate_limited"`, `"transport connect_failed"` …
    public var answers = VerdictCounts()
    public var elapsed: Double = 0

    public var sent: Int { answers.total }
    public var issued: Int { answers.counts["201", default: 0] }
    public var perSecond: Double { elapsed > 0 ? Double(sent) / elapsed : 0 }

    public var text: String {
        var out = "attest-sim flood → \(gateway): \(connections) connections from \(source ?? "the default address"), "
        out += "key ids \(keyIDs.rawValue), \(String(format: "%.1f", elapsed)) s\n"
        out += "sent:          \(sent) = \(String(format: "%.0f", perSecond)) req/s; challenges issued \(issued)\n"
        out += "answers:       " + answers.sorted.map { "\($0.0) ×\($0.1)" }.joined(separator: ", ") + "\n"
        return out
    }

    public var json: String {
        let object: [String: Any] = [
            "gateway": gateway, "seconds": elapsed, "connections": connections, "key_ids": keyIDs.rawValue,
            "source": source ?? NSNull(), "sent": sent, "issued": issued, "requests_per_second": perSecond,
            "answers": answers.counts,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// `attest-sim flood`: challenge requests back to back on `connections` keep-alive connections
/// for `seconds`, counting the answers: the attack of issue 18, to measure what other clients see
/// meanwhile (`bench/challenge-flood`). It never registers or asserts anything.
public final class FloodRunner: Sendable {
    public let options: FloodOptions

    public init(options: FloodOptions) {
        self.options = options
    }

    public func run() -> FloodReport {
        let o = options
        var report = FloodReport(
            gateway: o.endpoint.description, seconds: o.seconds, connections: o.connections, keyIDs: o.keyIDs, source: o.source)
        let results = Mutex<VerdictCounts>(VerdictCounts())
        let group = DispatchGroup()
        let start = HTTPClient.now()
        let deadline = start + o.seconds
        for _ in 0..<o.connections {
            group.enter()
            let thread = Thread {
                var local = VerdictCounts()
                let client = HTTPClient(endpoint: o.endpoint, timeout: o.timeout, source: o.source)
                defer { client.close() }
                var anonymous = HTTPRequest(method: "POST", target: o.paths.challenge)
                while HTTPClient.now() < deadline {
                    if o.keyIDs == .random {
                        var rng = SystemRandomNumberGenerator()
                        let key = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
                        anonymous = GatewayRequests.challenge(paths: o.paths, purpose: nil, keyID: key)
                    }
                    do throws(HTTPClientError) {
                        let r = try client.send(anonymous)
                        local.add(VerdictCounts.key(Verdict(r)))
                    } catch {
                        local.add(VerdictCounts.key(error))
                        if case .connect = error { usleep(10_000) }
                    }
                }
                results.withLock { $0.merge(local) }
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        report.elapsed = HTTPClient.now() - start
        report.answers = results.withLock { $0 }
        return report
    }
}
