/// A patch level as KeyMint attests it: an INTEGER YYYYMM (OS) or YYYYMMDD (vendor, boot; some
/// devices write YYYYMM there too), and the same form for the policy's minimum.
///
/// Two levels compare by month, and by day only when both have one: a vendor level 20240305 meets
/// a minimum 202403, and 202403 meets 20240305 (the month is all it says).
public struct PatchLevel: Sendable, Equatable, CustomStringConvertible {
    /// The value as attested or configured.
    public let rawValue: Int64
    public let year: Int
    public let month: Int
    public let day: Int?

    /// nil unless `rawValue` is YYYYMM or YYYYMMDD with a month 1–12 and a day 1–31 (0 is taken
    /// for "not given" in YYYYMMDD: some devices write the first of the month as day 00).
    public init?(rawValue: Int64) {
        self.rawValue = rawValue
        switch rawValue {
        case 100_000...999_999:
            (year, month, day) = (Int(rawValue / 100), Int(rawValue % 100), nil)
        case 10_000_000...99_999_999:
            let d = Int(rawValue % 100)
            (year, month, day) = (Int(rawValue / 10_000), Int(rawValue / 100 % 100), d == 0 ? nil : d)
            guard d <= 31 else { return nil }
        default:
            return nil
        }
        guard (1...12).contains(month) else { return nil }
    }

    /// `YYYYMM` or `YYYYMMDD`, as configured (`min_patch_level`).
    public init?(_ text: String) {
        guard text.utf8.count == 6 || text.utf8.count == 8, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let v = Int64(text) else {
            return nil
        }
        self.init(rawValue: v)
    }

    /// Whether this level is at least `minimum` (by month, then by day when both have one).
    public func meets(_ minimum: PatchLevel) -> Bool {
        let a = year * 12 + month, b = minimum.year * 12 + minimum.month
        if a != b { return a > b }
        guard let d = day, let m = minimum.day else { return true }
        return d >= m
    }

    public var description: String { String(rawValue) }
}
