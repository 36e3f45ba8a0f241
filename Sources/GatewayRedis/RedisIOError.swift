import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// A broken or timed-out connection, or a refusal while connecting.
struct RedisIOError: Error {
    let kind: RedisFailureKind
    let text: String
    init(_ text: String, kind: RedisFailureKind = .unreachable) {
        self.kind = kind
        self.text = text
    }

    init(_ failure: BlockingStream.Failure) {
        self.init(failure.description, kind: failure.kind == .tls ? .tls : .unreachable)
    }
}
