/// A dotted version such as `4.2` or `4.2.1`, compared number by number (`4.10` > `4.9`; missing
/// trailing numbers count as 0, so `4.2` == `4.2.0`).
public struct BundleVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let components: [Int]

    /// nil unless `text` is 1 to 8 dot-separated numbers of at most 9 digits each.
    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...8).contains(parts.count) else { return nil }
        var components: [Int] = []
        for part in parts {
            guard (1...9).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(part)
            else {
                return nil
            }
            components.append(value)
        }
        self.components = components
    }

    public static func < (a: Self, b: Self) -> Bool {
        for index in 0..<max(a.components.count, b.components.count) {
            let left = index < a.components.count ? a.components[index] : 0
            let right = index < b.components.count ? b.components[index] : 0
            if left != right { return left < right }
        }
        return false
    }

    public static func == (a: Self, b: Self) -> Bool { !(a < b) && !(b < a) }

    public func hash(into hasher: inout Hasher) {
        var trimmed = components
        while trimmed.count > 1, trimmed.last == 0 { trimmed.removeLast() }
        hasher.combine(trimmed)
    }

    public var description: String { components.map(String.init).joined(separator: ".") }
}
