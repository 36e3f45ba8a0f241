import CGatewaySystem
import Glibc

/// An IPv4 or IPv6 address and port, as `sockaddr_storage`.
public struct SocketAddress: Sendable, Equatable, CustomStringConvertible {
    var storage: sockaddr_storage
    var length: socklen_t

    public enum ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        case invalid(String)

        /// The message alone (`cannot resolve host "x": Name or service not known`), for people.
        public var description: String {
            switch self {
            case .invalid(let message): message
            }
        }
    }

    /// Parses `HOST:PORT`, `[V6]:PORT` or `:PORT` (all interfaces, IPv4). Hosts are numeric or `localhost`.
    public init(_ text: String) throws(ParseError) {
        var host: Substring
        var portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw .invalid("\"\(text)\": expected [IPv6]:PORT")
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw .invalid("\"\(text)\": expected HOST:PORT") }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = UInt16(portText) else { throw .invalid("\"\(text)\": port must be 0-65535") }
        if host.isEmpty { host = "0.0.0.0" }
        if host == "localhost" { host = "127.0.0.1" }
        try self.init(host: String(host), port: port)
    }

    public init(host: String, port: UInt16) throws(ParseError) {
        var ss = sockaddr_storage()
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            sin.sin_addr = v4
            withUnsafeBytes(of: &sin) { src in withUnsafeMutableBytes(of: &ss) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        } else if inet_pton(AF_INET6, host, &v6) == 1 {
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            sin6.sin6_addr = v6
            withUnsafeBytes(of: &sin6) { src in withUnsafeMutableBytes(of: &ss) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        } else {
            throw .invalid("\"\(host)\" is not a numeric IPv4 or IPv6 address")
        }
        storage = ss
    }

    /// An address from its bytes in network order: 4 (IPv4) or 16 (IPv6); nil for any other count.
    public init?(addressBytes bytes: UnsafeRawBufferPointer, port: UInt16) {
        var ss = sockaddr_storage()
        switch bytes.count {
        case 4:
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin.sin_addr) { $0.copyMemory(from: bytes) }
            withUnsafeBytes(of: &sin) { src in withUnsafeMutableBytes(of: &ss) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        case 16:
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { $0.copyMemory(from: bytes) }
            withUnsafeBytes(of: &sin6) { src in withUnsafeMutableBytes(of: &ss) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        default:
            return nil
        }
        storage = ss
    }

    /// A numeric IPv4 (`203.0.113.7`) or IPv6 (`2001:db8::1`) address written as ASCII bytes, as
    /// `inet_pton` reads them (no brackets, port or zone); nil for anything else. `family` limits it
    /// to `AF_INET` or `AF_INET6` (0: either). No allocation: for per-request parsing.
    public init?(numericHost text: UnsafeRawBufferPointer, port: UInt16 = 0, family: Int32 = 0) {
        // INET6_ADDRSTRLEN (46) with its NUL: anything longer is no address.
        guard !text.isEmpty, text.count < 46 else { return nil }
        var raw = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))  // 48 bytes, zeroed: the NUL follows
        var bytes = (UInt64(0), UInt64(0))
        let parsed: Int32 = withUnsafeMutableBytes(of: &raw) { cstr in
            cstr.copyMemory(from: text)
            return withUnsafeMutableBytes(of: &bytes) { out in
                let p = cstr.baseAddress!.assumingMemoryBound(to: CChar.self)
                if family != AF_INET6 && inet_pton(AF_INET, p, out.baseAddress) == 1 { return AF_INET }
                if family != AF_INET && inet_pton(AF_INET6, p, out.baseAddress) == 1 { return AF_INET6 }
                return 0
            }
        }
        guard parsed != 0 else { return nil }
        let made: SocketAddress? = withUnsafeBytes(of: &bytes) { b in
            SocketAddress(addressBytes: UnsafeRawBufferPointer(rebasing: b[0..<(parsed == AF_INET ? 4 : 16)]), port: port)
        }
        guard let made else { return nil }
        self = made
    }

    init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    public var family: Int32 { Int32(storage.ss_family) }

    public var port: UInt16 {
        var s = storage
        return withUnsafeBytes(of: &s) { raw in
            family == AF_INET6
                ? UInt16(bigEndian: raw.load(fromByteOffset: MemoryLayout<sockaddr_in6>.offset(of: \.sin6_port)!, as: UInt16.self))
                : UInt16(bigEndian: raw.load(fromByteOffset: MemoryLayout<sockaddr_in>.offset(of: \.sin_port)!, as: UInt16.self))
        }
    }

    /// The numeric host (no brackets).
    public var host: String {
        var s = storage
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        return withUnsafeBytes(of: &s) { raw -> String in
            if family == AF_INET6 {
                let off = MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!
                _ = inet_ntop(AF_INET6, raw.baseAddress! + off, &buf, socklen_t(buf.count))
            } else {
                let off = MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!
                _ = inet_ntop(AF_INET, raw.baseAddress! + off, &buf, socklen_t(buf.count))
            }
            return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    public var description: String { family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The address's bytes in network order: 16 for IPv6, 4 for IPv4 (no string is built).
    public func withAddressBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        var s = storage
        return withUnsafeBytes(of: &s) { raw in
            if family == AF_INET6 {
                let off = MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!
                return body(UnsafeRawBufferPointer(rebasing: raw[off..<(off + 16)]))
            }
            let off = MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!
            return body(UnsafeRawBufferPointer(rebasing: raw[off..<(off + 4)]))
        }
    }

    public static func == (a: SocketAddress, b: SocketAddress) -> Bool { a.description == b.description }

    /// Whether both name the same IP address (ports aside; IPv4 and IPv4-mapped IPv6 differ). No string is built.
    public func hasSameAddress(as other: SocketAddress) -> Bool {
        withAddressBytes { a in other.withAddressBytes { b in a.elementsEqual(b) } }
    }
}

extension SocketAddress {
    /// Resolves a host name (or numeric address) to its first TCP address, IPv4 preferred.
    /// Blocking: for configuration time only, never on a loop.
    public static func resolve(host: String, port: UInt16) throws(ParseError) -> SocketAddress {
        if let numeric = try? SocketAddress(host: host == "localhost" ? "127.0.0.1" : host, port: port) { return numeric }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            let reason = rc == 0 ? "no address" : rc == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(rc))
            throw .invalid("cannot resolve host \"\(host)\": \(reason)")
        }
        defer { freeaddrinfo(first) }
        var best: UnsafeMutablePointer<addrinfo>? = nil
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let cur = p {
            if cur.pointee.ai_family == AF_INET { best = cur; break }
            if best == nil { best = cur }
            p = cur.pointee.ai_next
        }
        guard let b = best, let sa = b.pointee.ai_addr else { throw .invalid("cannot resolve host \"\(host)\"") }
        var ss = sockaddr_storage()
        withUnsafeMutableBytes(of: &ss) { dst in dst.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(b.pointee.ai_addrlen))) }
        return SocketAddress(storage: ss, length: b.pointee.ai_addrlen)
    }
}
