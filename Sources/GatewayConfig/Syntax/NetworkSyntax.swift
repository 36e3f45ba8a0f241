/// IP addresses and CIDR networks (`admin.allow`), parsed to bytes without any lookup.
enum NetworkSyntax {
    /// `10.0.0.0/8`, `192.168.1.7` (one address: /32), `2001:db8::/32`, `::1` (/128). Strict: no
    /// host bits beyond the prefix, no leading zeros in the prefix, no zone (`%eth0`), no brackets.
    static func network(_ text: String) throws(ValueProblem) -> IPNetwork {
        let expected = "must be an IP address or a network in CIDR notation (e.g. 10.0.0.0/8 or 2001:db8::/32), got \(quoted(text))"
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = bytes(parts[0]) else { throw ValueProblem(expected) }
        let maximum = address.count * 8
        var prefix = maximum
        if parts.count == 2 {
            let digits = parts[1]
            guard !digits.isEmpty, digits.count <= 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
                digits.count == 1 || digits.first != "0", let value = Int(digits)
            else {
                throw ValueProblem(
                    "has an invalid prefix length \(quoted(String(parts[1]))) (a number, no leading zeros), got \(quoted(text))")
            }
            guard value <= maximum else {
                throw ValueProblem(
                    "has prefix length \(value), more than the \(maximum) bits of an \(maximum == 32 ? "IPv4" : "IPv6") address, got \(quoted(text))"
                )
            }
            prefix = value
        }
        guard let network = IPNetwork(address: address, prefixLength: prefix) else {
            let base = IPNetwork.text(IPNetwork.masked(address, prefix))
            throw ValueProblem("has bits set after the first \(prefix): write the network as \(base)/\(prefix), got \(quoted(text))")
        }
        return network
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 address in text form (as `HostSyntax` accepts them).
    static func bytes(_ text: Substring) -> [UInt8]? {
        if HostSyntax.isIPv4(text) { return text.split(separator: ".").map { UInt8($0)! } }
        guard HostSyntax.isIPv6(text) else { return nil }
        var tail: [UInt8] = []
        var body = text
        // An IPv4 tail (`::ffff:10.0.0.1`) is two groups.
        if let lastColon = text.lastIndex(of: ":"), text[text.index(after: lastColon)...].contains(".") {
            tail = text[text.index(after: lastColon)...].split(separator: ".").map { UInt8($0)! }
            body = text[...lastColon]
            if body.hasSuffix("::") == false { body = body.dropLast() }
        }
        func groups(_ s: Substring) -> [UInt8] {
            s.split(separator: ":").flatMap { g -> [UInt8] in
                let v = UInt16(g, radix: 16)!
                return [UInt8(v >> 8), UInt8(v & 0xff)]
            }
        }
        let halves = body.split(separator: "::", maxSplits: 1, omittingEmptySubsequences: false)
        let head = groups(halves[0])
        let rest = halves.count == 2 ? groups(halves[1]) : []
        let fill = 16 - head.count - rest.count - tail.count
        guard fill >= 0, halves.count == 2 || fill == 0 else { return nil }
        return head + [UInt8](repeating: 0, count: fill) + rest + tail
    }
}
