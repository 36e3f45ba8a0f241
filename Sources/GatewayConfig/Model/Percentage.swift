/// A share from 0% to 100% in hundredths of a percent (basis points): `25%` is 2500, `12.5%` is 1250.
public struct Percentage: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// 0...10_000.
    public let basisPoints: Int

    public init(basisPoints: Int) {
        precondition((0...10_000).contains(basisPoints), "Percentage: \(basisPoints) basis points is outside 0...10000")
        self.basisPoints = basisPoints
    }

    public static let zero = Percentage(basisPoints: 0)
    public static let hundred = Percentage(basisPoints: 10_000)

    /// 0.0...1.0.
    public var fraction: Double { Double(basisPoints) / 10_000 }

    public static func < (a: Self, b: Self) -> Bool { a.basisPoints < b.basisPoints }

    /// `25%`, `12.5%`, `0.01%`.
    public var description: String {
        let whole = basisPoints / 100
        let hundredths = basisPoints % 100
        if hundredths == 0 { return "\(whole)%" }
        if hundredths % 10 == 0 { return "\(whole).\(hundredths / 10)%" }
        return "\(whole).\(hundredths < 10 ? "0" : "")\(hundredths)%"
    }
}
