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

/// What a refusal records of its request (Sendable, so it can cross to a registration thread).
struct RequestSummary: Sendable {
    let method: String
    let target: String
    let peer: String?
    /// The exchange's id: the `/explain` entry's.
    let requestID: String

    init(_ request: BufferedRequest) {
        self.init(method: request.head.method, target: request.head.target, peer: request.peer?.host, requestID: request.requestID.text)
    }

    init(method: String, target: String, peer: String?, requestID: String) {
        self.method = method
        self.target = target
        self.peer = peer
        self.requestID = requestID
    }
}
