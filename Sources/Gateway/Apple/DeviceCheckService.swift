import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayPolicy
import GatewayProxy

/// The gateway's calls to Apple's DeviceCheck (docs/verification.md, "Devices without App Attest"):
/// `validate_device_token` for the fallback, `query_two_bits` and `update_two_bits` for the two
/// bits, through the one `AppleClient` (the team's ES256 token as `Bearer`, JSON bodies). What an
/// answer means is `DeviceCheck.decide`; a `429`, a `5xx`, a refused token or no answer pauses every
/// call (`Retry-After`, else the risk refresher's growing back-off: `RiskSchedule.backOffMillis`),
/// and a call during a pause is answered `devicecheck_unavailable` without asking Apple.
///
/// Its state is confined to one serial queue (host resolution happens there, never on a loop);
/// the HTTP calls run on the client's event loop; completions run on that queue.
final class DeviceCheckService: @unchecked Sendable {
    private let queue = DispatchQueue(label: "gateway.devicecheck", qos: .userInitiated)
    private let client: AppleClient
    private let metrics: AttestMetrics
    private var pausedUntil: Int64 = 0
    private var failures = 0
    private let addresses = AppleHostAddresses()
    private let problems = RateLimitedLog(interval: 60)

    init(client: AppleClient, metrics: AttestMetrics) {
        self.client = client
        self.metrics = metrics
    }

    /// How long every DeviceCheck call stays paused (back-off); 0: not paused. For the operator's
    /// page: read on the service's queue, never on the request path.
    var pausedForMillis: Int64 { queue.sync { max(0, pausedUntil - EventLoop.monotonicMillis()) } }

    /// Calls `call` for the device token `token` (base64, as the device sent it); `update` for
    /// `update_two_bits`. `completion` runs on the service's queue.
    func call(
        _ call: DeviceCheck.Call, token: String, update: DeviceCheck.Bits? = nil, services: AppleServices,
        completion: @escaping @Sendable (DeviceCheck.Decision) -> Void
    ) {
        queue.async { [self] in
            let now = EventLoop.monotonicMillis()
            if now < pausedUntil {
                return completion(
                    DeviceCheck.Decision(
                        result: .unavailable, refusal: .deviceCheckUnavailable, bits: nil, pause: nil,
                        detail:
                            "DeviceCheck calls are paused for \(pausedUntil - now) ms (after a 429, a 5xx, a refused token or no answer)"))
            }
            let endpoint = services.deviceCheck(call)
            guard let address = resolve(endpoint) else {
                return finish(call, .unavailable(detail: "cannot resolve \(endpoint.host)"), completion)
            }
            let body = DeviceCheck.body(
                deviceToken: token, transactionID: UUID().uuidString, timestampMillis: AttestContext.nowMillis(), update: update)
            client.post(
                endpoint, at: address, services: services, token: .bearer, fields: [("Content-Type", "application/json")], body: body,
                queue: queue
            ) { [self] result in
                switch result {
                case .failure(let e):
                    if case .failed(.exchange(let p)) = e, [.upstreamUnavailable, .upstreamConnectTimeout].contains(p) {
                        addresses.forget(endpoint)
                    }
                    finish(call, .unavailable(detail: e.description), completion)
                case .success(let r):
                    let retryAfter = RiskSchedule.retryAfterSeconds(r.headers["Retry-After"], nowMillis: AttestContext.nowMillis())
                    finish(call, DeviceCheck.decide(call, status: r.status, body: r.body, retryAfterSeconds: retryAfter), completion)
                }
            }
        }
    }

    /// Counts the answer, pauses when it says so, logs what the operator must fix (rate-limited).
    private func finish(_ call: DeviceCheck.Call, _ d: DeviceCheck.Decision, _ completion: @Sendable (DeviceCheck.Decision) -> Void) {
        metrics.deviceCheck(call, d.result)
        if let pause = d.pause {
            failures += 1
            let millis = pause ?? RiskSchedule.backOffMillis(failures: failures)
            pausedUntil = max(pausedUntil, EventLoop.monotonicMillis() + millis)
            log(call, d, pauseMillis: millis)
        } else {
            if d.refusal == nil { failures = 0 }
            if d.result == .badTimestamp || d.result == .badRequest || d.result == .error { log(call, d, pauseMillis: nil) }
        }
        completion(d)
    }

    private func log(_ call: DeviceCheck.Call, _ d: DeviceCheck.Decision, pauseMillis: Int64?) {
        problems.log("\(call.rawValue)|\(d.result.rawValue)") { suppressed in
            var fields: [(String, String)] = [
                ("endpoint", call.rawValue), ("result", d.result.rawValue), ("detail", d.detail), ("suppressed", String(suppressed)),
            ]
            if let pauseMillis { fields.append(("paused_ms", String(pauseMillis))) }
            switch d.result {
            case .unauthorized:
                GatewayEvents.log(
                    "error",
                    "DeviceCheck refused the gateway's token (apple.team_id, apple.key_id, apple.private_key: a key with the "
                        + "DeviceCheck capability); DeviceCheck calls paused", fields)
            case .badTimestamp:
                GatewayEvents.log("error", "DeviceCheck refused the request's timestamp: check this host's clock", fields)
            default:
                GatewayEvents.log("warning", "DeviceCheck did not answer as expected", fields)
            }
        }
    }

    private func resolve(_ endpoint: AppleServices.Endpoint) -> SocketAddress? {
        addresses.address(endpoint, nowMillis: EventLoop.monotonicMillis())
    }
}

extension DeviceCheck.Decision {
    static func unavailable(detail: String) -> Self {
        Self(result: .unavailable, refusal: .deviceCheckUnavailable, bits: nil, pause: .some(nil), detail: detail)
    }
}
