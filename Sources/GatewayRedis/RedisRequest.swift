import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// A request: one or more commands sent back to back on one connection (e.g. a registration script
/// and its `WAIT`), answered together.
struct RedisRequest: Sendable {
    var commands: [RedisCommand]
    var completion: @Sendable (Result<[RedisValue], StoreError>) -> Void
}
