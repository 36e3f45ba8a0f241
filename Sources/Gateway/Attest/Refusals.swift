import AppAttest
import Dispatch
import Foundation
import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// Every refusal the gateway answers with a JSON error: one status, sent and recorded for `explain`
/// alike (`GateError.status(on:)`).
enum Refusals {
    static func respond(
        _ e: Explanation, surface: RefusalSurface, route: String, mode: String, about request: RequestSummary, detail: Bool,
        log: ExplainLog
    ) -> LocalResponse {
        let status = e.error.status(on: surface)
        let id = log.record(
            e, id: request.requestID, status: status, route: route, mode: mode, method: request.method, target: request.target,
            peer: request.peer)
        var extra: [(String, JSONObject.Value)] = []
        if detail, let d = e.fields.first(where: { $0.0 == "detail" || $0.0 == "field" }) { extra.append(("detail", .string(d.1))) }
        var headers = HTTPFields([("Cache-Control", "no-store")])
        if let seconds = e.retryAfterSeconds { headers.append("Retry-After", String(max(1, seconds))) }
        // A key over its route's key_rate (issue 27) is told when its retry passes, in the body too,
        // as the attest endpoints' rate_limited is.
        if e.error == .keyRateLimited, let seconds = e.retryAfterSeconds { extra.append(("retryAfter", .int(Int64(max(1, seconds))))) }
        return ErrorResponse.make(
            status: status, code: e.error.code, action: e.error.action.rawValue, requestId: id, extra: extra,
            headers: headers)
    }
}
