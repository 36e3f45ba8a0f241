import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// The in-process `demo` upstream: answers what it would have been sent (the head an upstream gets,
/// `BufferedRequest.upstreamFields`), as JSON, so that a newcomer can see routing and forwarding at
/// work without installing anything.
enum DemoUpstream {
    static func answer(
        _ request: BufferedRequest, route: String, upstream: String, editHeaders: HeaderEdit,
        responseHeaders: HTTPFields
    ) -> LocalResponse {
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
