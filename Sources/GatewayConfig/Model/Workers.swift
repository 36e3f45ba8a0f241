/// How many event-loop workers to run: `auto` (one per core) or an explicit count.
public enum Workers: Sendable, Hashable, CustomStringConvertible {
    case auto
    case count(Int)

    /// The largest explicit count accepted.
    public static let maximum = 1024

    /// The number of workers to start on a machine with `coreCount` cores (at least 1).
    public func resolved(coreCount: Int) -> Int {
        switch self {
        case .auto: max(1, coreCount)
        case .count(let count): count
        }
    }

    public var description: String {
        switch self {
        case .auto: "auto"
        case .count(let count): "\(count)"
        }
    }
}
