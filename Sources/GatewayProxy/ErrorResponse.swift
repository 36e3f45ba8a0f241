import GatewayHTTP
import GatewayWire

/// The gateway's one error answer, whatever the layer: `Content-Type: application/json` and
///
///     {"error":"<code>","action":"<action>","requestId":"<id>", …}
///
/// in that order. `error` is the layer's code (`ProxyError`, `GateError`, the admin's). `action` is
/// what the client should do next where the layer's table defines one (App Attest refusals:
/// `rechallenge`, `reattest`, `none`, `retry_later`; docs/client-contract.md); protocol, proxy and
/// admin errors carry none, so that a client returns them as the request's answer. `requestId`
/// names the exchange where it has an id (refusals recorded for `explain`), and goes in
/// `X-Request-Id` too. `extra` members follow (`detail`, `limit`, `retryAfter`, `reasons`…).
/// docs/errors.md lists every code.
public enum ErrorResponse {
    public static let requestIDField = "X-Request-Id"

    public static func make(
        status: Int, code: String, action: String? = nil, requestId: String? = nil,
        extra: [(String, JSONObject.Value)] = [], headers: HTTPFields = HTTPFields()
    ) -> LocalResponse {
        var o = JSONObject()
        o.set("error", code)
        if let action { o.set("action", action) }
        if let requestId { o.set("requestId", requestId) }
        for (key, value) in extra { o.set(key, value) }
        var fields = HTTPFields()
        if let requestId { fields.append(requestIDField, requestId) }
        for f in headers { fields.append(f.name, f.value) }
        return LocalResponse.json(status, o.description, headers: fields)
    }
}
