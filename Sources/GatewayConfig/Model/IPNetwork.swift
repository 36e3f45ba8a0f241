/// An IP network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`), or one address (`/32`, `/128`).
/// The address is kept with its host bits zero (the parser refuses any other).
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6), network order.
    public let address: [UInt8]
    /// 0…32 for IPv4, 0…128 for IPv6.
    public let prefixLength: Int

    /// nil when `address` is not 4 or 16 bytes, the prefix is out of range, or host bits are set.
    public init?(address: [UInt8], prefixLength: Int) {
        guard address.count == 4 || address.count == 16, (0...(address.count * 8)).contains(prefixLength) else { return nil }
        guard Self.masked(address, prefixLength) == address else { return nil }
        self.address = address
        self.prefixLength = prefixLength
    }

    public var isIPv4: Bool { address.count == 4 }

    /// Whether `bytes` (4 or 16, network order) is in the network. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`, how a dual-stack `[::]` listener sees IPv4 clients) matches IPv4
    /// networks, and an IPv4 address matches IPv6 networks through its mapped form.
    public func contains(_ bytes: some Collection<UInt8>) -> Bool {
        var candidate = Array(bytes)
        if candidate.count == 16 && isIPv4 {
            guard candidate.prefix(12).elementsEqual(Self.mappedPrefix) else { return false }
            candidate = Array(candidate.suffix(4))
        } else if candidate.count == 4 && !isIPv4 {
            candidate = Self.mappedPrefix + candidate
        }
        guard candidate.count == address.count else { return false }
        return Self.masked(candidate, prefixLength) == address
    }

    /// `::ffff:0:0/96`.
    static let mappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]

    static func masked(_ bytes: [UInt8], _ prefix: Int) -> [UInt8] {
        bytes.enumerated().map { i, b in
            let bits = min(8, max(0, prefix - i * 8))
            return bits == 8 ? b : b & ~(UInt8(0xff) >> bits)
        }
    }

    /// `10.0.0.0/8`, `2001:db8::/32` (IPv6 compressed as RFC 5952 writes it).
    public var description: String {
        "\(Self.text(address))/\(prefixLength)"
    }

    static func text(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        let groups = (0..<8).map { Int(bytes[2 * $0]) << 8 | Int(bytes[2 * $0 + 1]) }
        // The longest run of two or more zero groups becomes "::" (the first such run on a tie).
        var best = (start: -1, length: 0)
        var i = 0
        while i < 8 {
            guard groups[i] == 0 else {
                i += 1
                continue
            }
            var j = i
            while j < 8 && groups[j] == 0 { j += 1 }
            if j - i > best.length && j - i >= 2 { best = (i, j - i) }
            i = j
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.start >= 0 else { return hex.joined(separator: ":") }
        let head = hex[..<best.start].joined(separator: ":")
        let tail = hex[(best.start + best.length)...].joined(separator: ":")
        return head + "::" + tail
    }
}
