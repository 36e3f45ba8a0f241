import GatewayHTTP
import GatewayIO

/// A response the gateway writes itself (errors: `ErrorResponse`; local endpoints, the demo upstream).
public struct LocalResponse: Sendable {
    public var status: Int
    public var headers: HTTPFields
    public var body: [UInt8]
    /// On a protected route: the verdict this answer carries out, for the access line.
    public var verdict: AccessVerdict?

    public init(status: Int, headers: HTTPFields = HTTPFields(), body: [UInt8] = [], verdict: AccessVerdict? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.verdict = verdict
    }

    public static func json(_ status: Int, _ text: String, headers: HTTPFields = HTTPFields()) -> LocalResponse {
        var h = headers
        h.set("Content-Type", "application/json")
        return LocalResponse(status: status, headers: h, body: Array((text + "\n").utf8))
    }
}
