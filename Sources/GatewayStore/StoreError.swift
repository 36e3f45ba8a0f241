import GatewayWire

public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The store cannot be reached or cannot write (disk full, Redis down).
        case unavailable = "store_unavailable"
        /// Too many live challenges; try later. (The memory store no longer answers it: when a
        /// challenge budget is full it replaces the oldest challenge instead, docs/store.md.)
        case challengeCapacity = "challenge_capacity"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }
}
