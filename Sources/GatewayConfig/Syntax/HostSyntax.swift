/// Host names and IP address literals, checked without any lookup.
enum HostSyntax {
    /// Dotted-quad IPv4 without leading zeros (`010.0.0.1` is ambiguous, so refused).
    static func isIPv4(_ text: some StringProtocol) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return false }
        return parts.allSatisfy { part in
            guard (1...3).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }),
                let value = Int(part), value <= 255
            else { return false }
            return part.count == 1 || part.first != "0"
        }
    }

    /// RFC 4291 §2.2 text forms: eight hex groups, one `::` for a run of zeros, an IPv4 tail. No zone.
    static func isIPv6(_ text: some StringProtocol) -> Bool {
        let halves = text.split(separator: "::", omittingEmptySubsequences: false)
        guard halves.count <= 2 else { return false }
        var groups: [Substring] = []
        for half in halves where !half.isEmpty {
            groups += half.split(separator: ":", omittingEmptySubsequences: false).map { Substring($0) }
        }
        var count = groups.count
        if let last = groups.last, last.contains(".") {
            guard isIPv4(last) else { return false }
            groups.removeLast()
            count += 1
        }
        let hex = groups.allSatisfy { group in
            (1...4).contains(group.count) && group.allSatisfy { $0.isHexDigit && $0.isASCII }
        }
        guard hex else { return false }
        return halves.count == 2 ? count <= 7 : count == 8
    }

    /// RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, at most 253
    /// characters. `*.example.com` only when `allowWildcard` (TLS server names).
    static func isHostname(_ text: some StringProtocol, allowWildcard: Bool = false) -> Bool {
        var name = Substring(text)
        if allowWildcard && name.hasPrefix("*.") { name = name.dropFirst(2) }
        guard !name.isEmpty, name.count <= 253 else { return false }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        let valid = labels.allSatisfy { label in
            guard (1...63).contains(label.count), label.first != "-", label.last != "-" else { return false }
            return label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
        // All-numeric labels would be a (bad) IPv4 address, not a name.
        let numeric = labels.allSatisfy { $0.allSatisfy { $0.isASCII && $0.isNumber } }
        return valid && !numeric
    }

    /// A host for a URL or an address: a name, an IPv4 address, or an IPv6 address (without brackets).
    static func isHost(_ text: some StringProtocol) -> Bool {
        isIPv4(text) || isIPv6(text) || isHostname(text)
    }

    /// Splits `host:port`, `[v6]:port` or `:port` (port digits not yet checked). The host comes back
    /// without brackets; nil when the text has none of these shapes.
    static func splitHostPort(_ text: Substring) -> (host: Substring, port: Substring?)? {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            if rest.isEmpty { return (host, nil) }
            guard rest.hasPrefix(":") else { return nil }
            return (host, rest.dropFirst())
        }
        let colons = text.filter { $0 == ":" }.count
        if colons == 0 { return (text, nil) }
        guard colons == 1, let colon = text.firstIndex(of: ":") else { return nil }
        return (text[..<colon], text[text.index(after: colon)...])
    }

    /// A port number: 1...65535, or 0 too when `allowZero` (listen on a port the system picks).
    static func port(_ text: Substring, allowZero: Bool) -> UInt16? {
        guard !text.isEmpty, text.count <= 5, text.allSatisfy({ $0.isASCII && $0.isNumber }),
            let value = UInt16(text), allowZero || value > 0
        else { return nil }
        return value
    }
}
