import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// The in-process `demo` upstream: answers what it would have been sent (the head an upstream gets,
/// `BufferedRequest.upstreamFields`), as JSON, so that a newcomer can see routing and forwarding at
/// work without installing anything.
///
/// Keys per account: like a backend that knows its users, it names the account of a verified
/// request whose client sent `X-Demo-Account: <id>`, as if it answered `X-App-Attest-Account: <id>`
/// (which the gateway reads and never passes on: `accountTap`), so that `attest-sim run --account`
/// shows `max_keys_per_account` at work.
enum DemoUpstream {
    /// The request field the demo takes the account id from.
    static let accountField = "X-Demo-Account"

    static func answer(
        _ request: BufferedRequest, route: String, upstream: String, editHeaders: HeaderEdit,
        responseHeaders: HTTPFields, accountTap: AccountFieldTap? = nil
    ) -> LocalResponse {
        if let accountTap, let account = request.head.headers[accountField] { accountTap.observe(account) }
        var headers = JSONObject()
        for f in request.upstreamFields(edit: editHeaders, upstream: upstream) { headers.set(f.name, f.value) }
        var out = JSONObject()
        out.set("upstream", upstream)
        out.set("route", route)
        out.set("method", request.head.method)
        out.set("target", request.head.target)
        out.set("bodyBytes", request.body.count)
        out.set("headers", .object(headers))
        return LocalResponse.json(200, out.description, headers: responseHeaders)
    }
}
