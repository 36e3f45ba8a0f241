import CGatewaySystem
import Glibc

/// The PROXY protocol header (HAProxy's specification, versions 1 and 2) that a load balancer sends
/// first on a connection it relays, naming the client it relayed: parsed from bytes, no I/O.
///
/// - v1 (text): `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n`, or `PROXY UNKNOWN…\r\n`; at most
///   107 bytes. Addresses must be of the named family, ports decimal 0…65535, single spaces.
/// - v2 (binary): the 12-byte signature, version 2 with command `LOCAL` or `PROXY`, one of the
///   specified family/transport bytes, a length, the addresses, then TLVs (checked to be well framed,
///   otherwise ignored). `LOCAL` (the balancer's own health check), `UNSPEC` and `UNIX` name no client.
public struct ProxyHeader: Sendable, Equatable {
    /// 1 or 2.
    public let version: Int
    /// Bytes the header takes on the connection (what follows is the relayed stream).
    public let length: Int
    /// The relayed client's address and port; nil when the header names none (v1 `UNKNOWN`, v2
    /// `LOCAL`, `UNSPEC` or `UNIX`): the connection's own peer stands.
    public let source: SocketAddress?
    /// The address the client connected to, when named.
    public let destination: SocketAddress?

    /// The largest header read: v1's 107 bytes, and v2's 16 plus address and TLVs (AWS, GCP and
    /// HAProxy's SSL TLVs take a few hundred bytes). A longer one closes the connection.
    public static let maximumBytes = 4096
    static let v1Maximum = 107
    static let v2Signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    static let v1Prefix: [UInt8] = Array("PROXY ".utf8)

    public enum Parse: Sendable, Equatable {
        /// What arrived is the start of a header: wait for more.
        case needMore
        case header(ProxyHeader)
        /// Not a PROXY header, or a malformed one; `reason` is from a fixed list (for a metric):
        /// `not_proxy_protocol`, `malformed`, `too_large`.
        case invalid(reason: String)
    }

    /// Reads the header at the start of `bytes` (which may hold what follows it too).
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Parse {
        if let first = bytes.first, first == v1Prefix[0] { return parseV1(bytes) }
        let n = min(bytes.count, v2Signature.count)
        for i in 0..<n where bytes[i] != v2Signature[i] { return .invalid(reason: "not_proxy_protocol") }
        return bytes.count < 16 ? .needMore : parseV2(bytes)
    }

    // MARK: - Version 1

    private static func parseV1(_ bytes: UnsafeRawBufferPointer) -> Parse {
        let n = min(bytes.count, v1Prefix.count)
        for i in 0..<n where bytes[i] != v1Prefix[i] { return .invalid(reason: "not_proxy_protocol") }
        // The line ends at the first CRLF, within 107 bytes.
        var end = -1
        var i = 0
        while i < min(bytes.count, v1Maximum) {
            if bytes[i] == 0x0A {
                guard i > 0, bytes[i - 1] == 0x0D else { return .invalid(reason: "malformed") }
                end = i - 1
                break
            }
            i += 1
        }
        if end < 0 { return bytes.count >= v1Maximum ? .invalid(reason: "too_large") : .needMore }
        let line = UnsafeRawBufferPointer(rebasing: bytes[v1Prefix.count..<end])
        let length = end + 2
        // `UNKNOWN`, then anything up to the CRLF: the receiver ignores it.
        if line.starts(with: "UNKNOWN".utf8) && (line.count == 7 || line[7] == 0x20) {
            return .header(ProxyHeader(version: 1, length: length, source: nil, destination: nil))
        }
        var parts: [Range<Int>] = []
        var start = 0
        for (k, b) in line.enumerated() where b == 0x20 {
            parts.append(start..<k)
            start = k + 1
        }
        parts.append(start..<line.count)
        guard parts.count == 5, parts.allSatisfy({ !$0.isEmpty }) else { return .invalid(reason: "malformed") }
        func field(_ k: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: line[parts[k]]) }
        let family: Int32
        if field(0).elementsEqual("TCP4".utf8) {
            family = AF_INET
        } else if field(0).elementsEqual("TCP6".utf8) {
            family = AF_INET6
        } else {
            return .invalid(reason: "malformed")
        }
        guard let sourcePort = port(field(3)), let destinationPort = port(field(4)),
            let source = SocketAddress(numericHost: field(1), port: sourcePort, family: family),
            let destination = SocketAddress(numericHost: field(2), port: destinationPort, family: family)
        else { return .invalid(reason: "malformed") }
        return .header(ProxyHeader(version: 1, length: length, source: source, destination: destination))
    }

    /// 0…65535 in decimal, without a sign or leading zeros.
    private static func port(_ text: UnsafeRawBufferPointer) -> UInt16? {
        guard (1...5).contains(text.count), text.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), text.count == 1 || text[0] != 0x30 else {
            return nil
        }
        var value = 0
        for b in text { value = value * 10 + Int(b - 0x30) }
        return value <= 65535 ? UInt16(value) : nil
    }

    // MARK: - Version 2

    private static func parseV2(_ bytes: UnsafeRawBufferPointer) -> Parse {
        let versionCommand = bytes[12]
        guard versionCommand >> 4 == 2 else { return .invalid(reason: "malformed") }
        let command = versionCommand & 0x0F
        guard command <= 1 else { return .invalid(reason: "malformed") }
        let familyTransport = bytes[13]
        // UNSPEC, or INET/INET6/UNIX over STREAM or DGRAM; anything else must be refused.
        guard [0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32].contains(familyTransport) else { return .invalid(reason: "malformed") }
        let declared = Int(bytes[14]) << 8 | Int(bytes[15])
        let length = 16 + declared
        guard length <= maximumBytes else { return .invalid(reason: "too_large") }
        guard bytes.count >= length else { return .needMore }
        let body = UnsafeRawBufferPointer(rebasing: bytes[16..<length])
        // LOCAL: the balancer speaks for itself (health checks); whatever follows is ignored.
        guard command == 1 else { return .header(ProxyHeader(version: 2, length: length, source: nil, destination: nil)) }
        let addressBytes: Int
        switch familyTransport >> 4 {
        case 1: addressBytes = 12
        case 2: addressBytes = 36
        case 3: addressBytes = 216
        default: addressBytes = 0
        }
        guard body.count >= addressBytes else { return .invalid(reason: "malformed") }
        // TLVs: type, 2-byte length, value, exactly filling the rest.
        var k = addressBytes
        while k < body.count {
            guard body.count - k >= 3 else { return .invalid(reason: "malformed") }
            let valueLength = Int(body[k + 1]) << 8 | Int(body[k + 2])
            guard body.count - k - 3 >= valueLength else { return .invalid(reason: "malformed") }
            k += 3 + valueLength
        }
        func port(_ at: Int) -> UInt16 { UInt16(body[at]) << 8 | UInt16(body[at + 1]) }
        switch familyTransport >> 4 {
        case 1:
            let source = SocketAddress(addressBytes: UnsafeRawBufferPointer(rebasing: body[0..<4]), port: port(8))
            let destination = SocketAddress(addressBytes: UnsafeRawBufferPointer(rebasing: body[4..<8]), port: port(10))
            return .header(ProxyHeader(version: 2, length: length, source: source, destination: destination))
        case 2:
            let source = SocketAddress(addressBytes: UnsafeRawBufferPointer(rebasing: body[0..<16]), port: port(32))
            let destination = SocketAddress(addressBytes: UnsafeRawBufferPointer(rebasing: body[16..<32]), port: port(34))
            return .header(ProxyHeader(version: 2, length: length, source: source, destination: destination))
        default:
            // UNSPEC or a UNIX socket: no IP client to name.
            return .header(ProxyHeader(version: 2, length: length, source: nil, destination: nil))
        }
    }
}

/// Reads the PROXY protocol header of an accepted connection before anything else touches it (TLS,
/// protocol sniffing, HTTP): looks at the queued bytes without taking them (`MSG_PEEK`) until a
/// whole header is there, then takes exactly the header, so the relayed stream stays in the socket
/// for the `Connection` made next on the same descriptor. Bounded in size
/// (`ProxyHeader.maximumBytes`) and time (`timeoutMillis`, the loop's timer wheel). Loop-confined.
///
/// `done` is called once: with the header (the descriptor is then deregistered and open, for the
/// caller to adopt), or with a failure reason (the descriptor is closed): `not_proxy_protocol`,
/// `malformed`, `too_large`, `timeout`, `closed` (the peer left or the socket failed first), or
/// `drained` (`close()`: the server stops).
public final class ProxyHeaderReader: FileEventHandler {
    public enum Outcome: Sendable, Equatable {
        case header(ProxyHeader)
        case failed(reason: String)
    }

    public let fd: Int32
    public let loop: EventLoop
    private var done: ((Outcome) -> Void)?
    private var timer: TimerWheel.Handle?

    public init(fd: Int32, loop: EventLoop, timeoutMillis: Int64, done: @escaping (Outcome) -> Void) throws(Socket.Error) {
        self.fd = fd
        self.loop = loop
        self.done = done
        try loop.register(fd: fd, handler: self)
        timer = loop.timers.schedule(afterMillis: max(1, timeoutMillis)) { [weak self] in
            self?.timer = nil
            self?.finish(.failed(reason: "timeout"))
        }
    }

    public var isFinished: Bool { done == nil }

    public func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        guard done != nil, readable || hangup else { return }
        let scratch = UnsafeMutableRawBufferPointer(rebasing: loop.readScratch[0..<ProxyHeader.maximumBytes])
        switch Socket.peek(fd, into: scratch) {
        case .wouldBlock:
            return
        case .eof, .failed:
            finish(.failed(reason: "closed"))
        case .bytes(let n):
            switch ProxyHeader.parse(UnsafeRawBufferPointer(rebasing: scratch[0..<n])) {
            case .needMore:
                // A peer that hung up will send no more (a peek never sees the end behind queued bytes).
                if hangup || loop.currentEventHangup { finish(.failed(reason: "closed")) }
            case .invalid(let reason):
                finish(.failed(reason: reason))
            case .header(let h):
                // Take exactly the header; the relayed bytes after it stay queued.
                let take = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<h.length])
                guard case .bytes(h.length) = Socket.read(fd, into: take) else {
                    finish(.failed(reason: "closed"))
                    return
                }
                finish(.header(h))
            }
        }
    }

    /// Closes the connection before its header arrived (drain); reported as `drained`, which is no
    /// failure of the peer.
    public func close() { finish(.failed(reason: Self.drained)) }

    public static let drained = "drained"

    private func finish(_ outcome: Outcome) {
        guard let report = done else { return }
        done = nil
        if let t = timer { loop.timers.cancel(t) }
        timer = nil
        loop.deregister(fd: fd)
        if case .failed = outcome { Socket.close(fd) }
        report(outcome)
    }
}
