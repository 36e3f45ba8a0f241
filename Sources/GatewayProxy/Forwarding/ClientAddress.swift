import GatewayHTTP
import GatewayIO
import Glibc

/// The networks whose connections may speak for their clients (`trusted_proxies`: load balancers,
/// CDNs, an nginx in front): their `X-Forwarded-For` chain, `X-Forwarded-Proto` and
/// `X-Forwarded-Host` are kept, the client address is read from the chain, and (on a
/// `proxy_protocol` listener) only they may send a PROXY protocol header. Compiled once (from the
/// configuration's `IPNetwork`s) into masks over the 16-byte form of an address, where an IPv4
/// address is its IPv4-mapped IPv6 form: an IPv4 network then contains the IPv4-mapped peers of a
/// dual-stack listener, as `admin.allow` does. Matching allocates nothing.
public struct TrustedProxies: Sendable {
    private struct Network: Sendable {
        let high: UInt64
        let low: UInt64
        let maskHigh: UInt64
        let maskLow: UInt64
    }

    private let networks: [Network]

    /// No network: no peer is trusted (the default).
    public static let none = TrustedProxies(networks: [])

    /// `networks`: each a network's address (4 or 16 bytes, network order, host bits zero) and its
    /// prefix length; others are skipped (the configuration has validated them).
    public init(networks: [(address: [UInt8], prefixLength: Int)]) {
        var compiled: [Network] = []
        for (address, prefix) in networks {
            guard address.count == 4 || address.count == 16, prefix >= 0, prefix <= address.count * 8 else { continue }
            let (high, low) = address.withUnsafeBytes { Self.words($0) }
            let bits = address.count == 4 ? 96 + prefix : prefix
            let maskHigh: UInt64 = bits >= 64 ? .max : (bits == 0 ? 0 : ~(UInt64.max >> UInt64(bits)))
            let maskLow: UInt64 = bits <= 64 ? 0 : (bits >= 128 ? .max : ~(UInt64.max >> UInt64(bits - 64)))
            compiled.append(Network(high: high & maskHigh, low: low & maskLow, maskHigh: maskHigh, maskLow: maskLow))
        }
        self.networks = compiled
    }

    public var isEmpty: Bool { networks.isEmpty }

    /// Whether `address` is in one of the networks.
    public func contains(_ address: SocketAddress) -> Bool {
        guard !networks.isEmpty else { return false }
        let (high, low) = address.withAddressBytes { Self.words($0) }
        for n in networks where high & n.maskHigh == n.high && low & n.maskLow == n.low { return true }
        return false
    }

    /// The 16-byte form as two big-endian words: IPv6 as is, IPv4 as `::ffff:a.b.c.d`.
    private static func words(_ bytes: UnsafeRawBufferPointer) -> (UInt64, UInt64) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        if bytes.count == 4 {
            for b in bytes { low = low << 8 | UInt64(b) }
            return (0, 0x0000_ffff_0000_0000 | low)
        }
        guard bytes.count == 16 else { return (0, 0) }
        for i in 0..<8 { high = high << 8 | UInt64(bytes[i]) }
        for i in 8..<16 { low = low << 8 | UInt64(bytes[i]) }
        return (high, low)
    }
}

/// Which address a request comes from (docs/configuration.md, `trusted_proxies`): the one place that
/// decides it, for HTTP/1.1 and HTTP/2 alike. The result is the one client address the access
/// line, the per-client rate limit (`attest.challenge_rate`) and `/explain` use.
///
/// - The connection's peer is the socket's peer, or the source a PROXY protocol header named.
/// - A peer outside `trusted_proxies`: the client is the peer; whatever `X-Forwarded-For` says is
///   ignored (and replaced upstream: `UpstreamRequestHead`).
/// - A trusted peer: the `X-Forwarded-For` chain (every field, in order, as one list) is walked
///   from its right end, each proxy having appended the address it got the request from; the client
///   is the first address that is not itself trusted (nginx's `real_ip_recursive on`; Envoy counts
///   a fixed `xff_num_trusted_hops` instead, which breaks when a hop is added). When every address
///   is trusted, the left-most one. An element that is not an IP address (`unknown`, an obfuscated
///   name, garbage) ends the walk: the client is then the last trusted address seen (the element to
///   its right, or the peer), since nothing the untrustworthy part says can be vouched for. Empty
///   elements are skipped; an address may carry a port (`203.0.113.7:4711`, `[2001:db8::7]:4711`).
public enum ClientAddress {
    /// The client of a request whose head is `head` (ranges of `buf`), from a trusted peer: nil when
    /// it is the peer itself (no chain, or the chain's right end is no address). Reads the
    /// `X-Forwarded-For` fields the upstream writer carries (not those a `Connection` field names,
    /// which are hop-by-hop).
    public static func resolve(_ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer, trusted: TrustedProxies)
        -> SocketAddress?
    {
        var walk = Walk(trusted: trusted)
        let fields = head.fields
        var hasConnection = false
        for f in fields where f.name.count == 10 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Connection") {
            hasConnection = true
        }
        var i = fields.count
        while i > 0 && !walk.done {
            i -= 1
            let f = fields[i]
            guard f.name.count == 15, equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "X-Forwarded-For") else { continue }
            if hasConnection && namedInConnection(fields, buf) { continue }
            walk.feed(UnsafeRawBufferPointer(rebasing: buf[f.value]))
        }
        return walk.client
    }

    /// Whether a Connection field lists X-Forwarded-For (then no copy of it is carried).
    private static func namedInConnection(_ fields: [HTTPFieldRange], _ buf: UnsafeRawBufferPointer) -> Bool {
        for c in fields where c.name.count == 10 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[c.name]), "Connection") {
            if listContains(UnsafeRawBufferPointer(rebasing: buf[c.value]), "X-Forwarded-For") { return true }
        }
        return false
    }

    /// The walk over the chain, fed one field value at a time from the last field to the first,
    /// starting from a trusted peer.
    struct Walk {
        let trusted: TrustedProxies
        /// The client so far: nil while it is the peer.
        private(set) var client: SocketAddress?
        private(set) var done = false

        init(trusted: TrustedProxies) { self.trusted = trusted }

        mutating func feed(_ value: UnsafeRawBufferPointer) {
            var end = value.count
            while !done && end > 0 {
                var start = end
                while start > 0 && value[start - 1] != 0x2C { start -= 1 }
                let element = ClientAddress.trim(UnsafeRawBufferPointer(rebasing: value[start..<end]))
                end = start - 1  // before the comma (-1 at the start: the loop ends)
                guard !element.isEmpty else { continue }
                guard let address = ClientAddress.address(element) else {
                    done = true  // not an address: the last trusted one stands
                    return
                }
                client = address
                if !trusted.contains(address) { done = true }
            }
        }
    }

    static func trim(_ b: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        var s = 0
        var e = b.count
        while s < e && (b[s] == 0x20 || b[s] == 0x09) { s += 1 }
        while e > s && (b[e - 1] == 0x20 || b[e - 1] == 0x09) { e -= 1 }
        return UnsafeRawBufferPointer(rebasing: b[s..<e])
    }

    /// An element of the chain as an address: `IPv4`, `IPv4:port`, `IPv6`, `[IPv6]` or
    /// `[IPv6]:port` (the port is dropped); nil for anything else.
    static func address(_ e: UnsafeRawBufferPointer) -> SocketAddress? {
        if e.first == 0x5B {  // [
            guard let close = e.firstIndex(of: 0x5D) else { return nil }
            let rest = UnsafeRawBufferPointer(rebasing: e[(close + 1)...])
            guard rest.isEmpty || (rest.first == 0x3A && isPort(UnsafeRawBufferPointer(rebasing: rest[1...]))) else { return nil }
            return SocketAddress(numericHost: UnsafeRawBufferPointer(rebasing: e[1..<close]), family: AF_INET6)
        }
        var colons = 0
        var lastColon = -1
        for (i, b) in e.enumerated() where b == 0x3A {
            colons += 1
            lastColon = i
        }
        if colons == 1 {
            guard isPort(UnsafeRawBufferPointer(rebasing: e[(lastColon + 1)...])) else { return nil }
            return SocketAddress(numericHost: UnsafeRawBufferPointer(rebasing: e[..<lastColon]), family: AF_INET)
        }
        return SocketAddress(numericHost: e)
    }

    private static func isPort(_ p: UnsafeRawBufferPointer) -> Bool {
        (1...5).contains(p.count) && p.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }
}
