/// A rate: a whole number of events per second, minute or hour (`10/s`, `600/m`, `100/h`).
public struct Rate: Sendable, Hashable, CustomStringConvertible {
    public enum Unit: String, Sendable, CaseIterable {
        case second = "s"
        case minute = "m"
        case hour = "h"

        public var seconds: Int {
            switch self {
            case .second: 1
            case .minute: 60
            case .hour: 3600
            }
        }
    }

    /// 1...1_000_000.
    public let count: Int
    public let unit: Unit

    public static let maximumCount = 1_000_000

    public init(_ count: Int, per unit: Unit) {
        precondition((1...Self.maximumCount).contains(count), "Rate: \(count) is outside 1...\(Self.maximumCount)")
        self.count = count
        self.unit = unit
    }

    public var perSecond: Double { Double(count) / Double(unit.seconds) }

    /// `10/s`, `600/m`, `100/h`: as written.
    public var description: String { "\(count)/\(unit.rawValue)" }
}

/// `attest.challenge_rate`: a token bucket per client address on the attest endpoints.
public struct ClientRateConfig: Sendable, Equatable {
    /// Sustained challenge and registration requests per client; nil (`off`): not limited.
    public var perClient: Rate?
    /// Requests a client may send at once after being idle (the bucket's size).
    public var burst: Int
    /// Client addresses tracked at once; the least recently seen are forgotten first.
    public var clients: Int

    public init(perClient: Rate? = Rate(10, per: .second), burst: Int? = nil, clients: Int = 65_536) {
        self.perClient = perClient
        self.burst = burst ?? Self.defaultBurst(perClient)
        self.clients = clients
    }

    /// Two seconds' worth of the rate, at least 1 (20 for 10/s).
    public static func defaultBurst(_ rate: Rate?) -> Int {
        guard let rate else { return 20 }
        return max(1, Int((2 * rate.perSecond).rounded(.up)))
    }

    public static let maximumBurst = 1_000_000
    public static let clientRange = 1_024...4_194_304
}
