import GatewayConfig
import GatewayProxy
import Glibc

/// Appends bytes at `base + count` without bounds checks: the caller reserved room for the whole
/// line first (`AccessLine.bound`). One access line is written this way, straight into the loop's
/// buffer; no string is built for it.
struct LineBytes {
    let base: UnsafeMutableRawPointer
    var count: Int

    @inline(__always) mutating func byte(_ b: UInt8) {
        base.storeBytes(of: b, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    @inline(__always) mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        guard let src = bytes.baseAddress, bytes.count > 0 else { return }
        (base + count).copyMemory(from: src, byteCount: bytes.count)
        count += bytes.count
    }

    @inline(__always) mutating func raw(_ s: StaticString) {
        raw(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    /// A non-negative integer in decimal.
    mutating func decimal(_ value: Int) {
        var n = UInt64(max(0, value))
        var digits = 1
        var t = n
        while t >= 10 {
            t /= 10
            digits += 1
        }
        count += digits
        var at = count - 1
        repeat {
            base.storeBytes(of: UInt8(truncatingIfNeeded: 0x30 + n % 10), toByteOffset: at, as: UInt8.self)
            n /= 10
            at -= 1
        } while n > 0
    }

    /// `n` as exactly `width` digits (zero-padded).
    @inline(__always) mutating func digits(_ n: Int, width: Int) {
        var v = n
        var at = count + width - 1
        for _ in 0..<width {
            base.storeBytes(of: UInt8(truncatingIfNeeded: 0x30 + v % 10), toByteOffset: at, as: UInt8.self)
            v /= 10
            at -= 1
        }
        count += width
    }

    /// Seconds as a JSON number with microseconds: `0.000123`.
    mutating func seconds(_ s: Double) {
        let micros = s.isFinite && s > 0 ? Int((s * 1e6).rounded()) : 0
        decimal(micros / 1_000_000)
        byte(0x2e)
        digits(micros % 1_000_000, width: 6)
    }

    private static let hex: StaticString = "0123456789abcdef"
    /// nginx writes `\xHH` in upper case.
    private static let upperHex: StaticString = "0123456789ABCDEF"

    // MARK: JSON strings (RFC 8259)

    /// One byte of a JSON string: `"` and `\` escaped, control characters as `\u00XX` (`\n`, `\r`,
    /// `\t` short). With `latin1`, a byte above 0x7F is the character U+0080…U+00FF (the request's
    /// Latin-1 reading, as the parsers have it) and goes as its UTF-8; otherwise it is already UTF-8.
    @inline(__always) private mutating func jsonByte(_ c: UInt8, latin1: Bool) {
        switch c {
        case 0x22, 0x5c:
            byte(0x5c)
            byte(c)
        case 0x0a: raw("\\n")
        case 0x0d: raw("\\r")
        case 0x09: raw("\\t")
        case 0..<0x20, 0x7f:
            raw("\\u00")
            byte(Self.hex.utf8Start[Int(c >> 4)])
            byte(Self.hex.utf8Start[Int(c & 15)])
        case 0x80...0xff where latin1:
            byte(0xc0 | c >> 6)
            byte(0x80 | c & 0x3f)
        default:
            byte(c)
        }
    }

    @inline(__always) private static func plainJSON(_ c: UInt8) -> Bool { c >= 0x20 && c < 0x7f && c != 0x22 && c != 0x5c }

    /// `"…"` of Latin-1 bytes.
    mutating func jsonString(latin1 bytes: UnsafeRawBufferPointer) {
        byte(0x22)
        if bytes.allSatisfy(Self.plainJSON) {
            raw(bytes)
        } else {
            for c in bytes { jsonByte(c, latin1: true) }
        }
        byte(0x22)
    }

    /// `"…"` of a string (its UTF-8).
    mutating func jsonString(_ s: String) {
        var s = s
        s.withUTF8 { u in
            byte(0x22)
            let bytes = UnsafeRawBufferPointer(u)
            if bytes.allSatisfy(Self.plainJSON) {
                raw(bytes)
            } else {
                for c in bytes { jsonByte(c, latin1: false) }
            }
            byte(0x22)
        }
    }

    mutating func jsonString(_ v: LoggedValue) {
        switch v {
        case .none: raw("null")
        case .bytes(let b): jsonString(latin1: b)
        case .string(let s): jsonString(s)
        }
    }

    // MARK: nginx's escaping (`combined`)

    /// nginx's rule for variables in a log line: `"`, `\`, and bytes below 0x20 or above 0x7E as
    /// `\xHH`; the rest as is.
    @inline(__always) private mutating func nginxByte(_ c: UInt8) {
        if c < 0x20 || c > 0x7e || c == 0x22 || c == 0x5c {
            raw("\\x")
            byte(Self.upperHex.utf8Start[Int(c >> 4)])
            byte(Self.upperHex.utf8Start[Int(c & 15)])
        } else {
            byte(c)
        }
    }

    mutating func nginxText(latin1 bytes: UnsafeRawBufferPointer) {
        for c in bytes { nginxByte(c) }
    }

    /// A string as the request's bytes (Latin-1: one byte per character up to U+00FF; beyond, which
    /// no request field holds, its UTF-8).
    mutating func nginxText(_ s: String) {
        var s = s
        let ascii = s.withUTF8 { u -> Bool in
            guard u.allSatisfy({ $0 < 0x80 }) else { return false }
            for c in u { nginxByte(c) }
            return true
        }
        guard !ascii else { return }
        for scalar in s.unicodeScalars {
            if scalar.value < 0x100 {
                nginxByte(UInt8(scalar.value))
            } else {
                for c in String(scalar).utf8 { nginxByte(c) }
            }
        }
    }

    /// A field for `combined`: `-` when absent.
    mutating func nginxText(_ v: LoggedValue) {
        switch v {
        case .none: byte(0x2d)
        case .bytes(let b): b.isEmpty ? byte(0x2d) : nginxText(latin1: b)
        case .string(let s): s.isEmpty ? byte(0x2d) : nginxText(s)
        }
    }
}

/// The wall clock as access lines show it, formatted once per second: the rest of a line's time is
/// three digits of milliseconds. UTC.
struct LogClock {
    private var second = Int.min
    /// `2026-11-26T09:36:58.` (JSON, RFC 3339) and `26/Nov/2026:09:36:58 +0000` (`combined`, nginx's
    /// `$time_local` in UTC).
    private(set) var rfc3339 = [UInt8](repeating: 0, count: 20)
    private(set) var common = [UInt8](repeating: 0, count: 26)
    private(set) var millis = 0

    private static let months: [StaticString] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Reads the clock; reformats the prefixes when the second changed.
    mutating func now() {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        set(seconds: Int(ts.tv_sec), nanos: Int(ts.tv_nsec))
    }

    mutating func set(seconds: Int, nanos: Int) {
        millis = nanos / 1_000_000
        guard seconds != second else { return }
        second = seconds
        var t = time_t(seconds)
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        let year = Int(tm.tm_year) + 1900, month = Int(tm.tm_mon), day = Int(tm.tm_mday)
        let hour = Int(tm.tm_hour), minute = Int(tm.tm_min), sec = Int(tm.tm_sec)
        rfc3339.withUnsafeMutableBytes { b in
            var w = LineBytes(base: b.baseAddress!, count: 0)
            w.digits(year, width: 4)
            w.byte(0x2d)
            w.digits(month + 1, width: 2)
            w.byte(0x2d)
            w.digits(day, width: 2)
            w.byte(0x54)
            w.digits(hour, width: 2)
            w.byte(0x3a)
            w.digits(minute, width: 2)
            w.byte(0x3a)
            w.digits(sec, width: 2)
            w.byte(0x2e)
        }
        common.withUnsafeMutableBytes { b in
            var w = LineBytes(base: b.baseAddress!, count: 0)
            w.digits(day, width: 2)
            w.byte(0x2f)
            w.raw(Self.months[month])
            w.byte(0x2f)
            w.digits(year, width: 4)
            w.byte(0x3a)
            w.digits(hour, width: 2)
            w.byte(0x3a)
            w.digits(minute, width: 2)
            w.byte(0x3a)
            w.digits(sec, width: 2)
            w.raw(" +0000")
        }
    }
}

/// The two formats of an access line (docs/operations.md, "The access log").
enum AccessLine {
    /// Room enough for one line of `r`: every variable part at its worst escaping (6 bytes per
    /// byte), plus the fixed text and numbers.
    static func bound(_ r: ExchangeRecord) -> Int {
        func size(_ v: LoggedValue) -> Int {
            switch v {
            case .none: 0
            case .bytes(let b): b.count
            case .string(let s): s.utf8.count
            }
        }
        let variable = r.route.utf8.count + r.method.utf8.count + r.target.utf8.count + r.peer.utf8.count
            + (r.upstream?.utf8.count ?? 0) + (r.error?.utf8.count ?? 0) + r.requestID.utf8.count + r.protocolName.utf8.count
            + size(r.fields.host) + size(r.fields.userAgent) + size(r.fields.referer)
            + (r.verdict.map { $0.verdict.utf8.count + $0.reason.utf8.count } ?? 0)
        return 6 * variable + 512
    }

    /// `{"ts":"…","request_id":"…",…}` and a newline. Absent values are left out (no `upstream` for
    /// a local answer, no `error` for a complete exchange, no `verdict` off protected routes).
    static func json(_ r: ExchangeRecord, clock: LogClock, to w: inout LineBytes) {
        w.raw("{\"ts\":\"")
        clock.rfc3339.withUnsafeBytes { w.raw($0) }
        w.digits(clock.millis, width: 3)
        w.raw("Z\",\"request_id\":")
        w.jsonString(r.requestID)
        w.raw(",\"client\":")
        w.jsonString(r.peer)
        w.raw(",\"method\":")
        w.jsonString(r.method)
        w.raw(",\"target\":")
        w.jsonString(r.target)
        if case .none = r.fields.host {} else {
            w.raw(",\"host\":")
            w.jsonString(r.fields.host)
        }
        w.raw(",\"protocol\":")
        w.jsonString(r.protocolName)
        w.raw(",\"status\":")
        w.decimal(r.status)
        w.raw(",\"request_bytes\":")
        w.decimal(r.requestBytes)
        w.raw(",\"response_bytes\":")
        w.decimal(r.responseBytes)
        w.raw(",\"duration_s\":")
        w.seconds(r.durationSeconds)
        w.raw(",\"route\":")
        w.jsonString(r.route)
        if let upstream = r.upstream {
            w.raw(",\"upstream\":")
            w.jsonString(upstream)
        }
        if let u = r.upstreamSeconds {
            w.raw(",\"upstream_duration_s\":")
            w.seconds(u)
        }
        if case .none = r.fields.userAgent {} else {
            w.raw(",\"user_agent\":")
            w.jsonString(r.fields.userAgent)
        }
        if let e = r.error {
            w.raw(",\"error\":")
            w.jsonString(e)
        }
        if let v = r.verdict {
            w.raw(",\"verdict\":")
            w.jsonString(v.verdict)
            w.raw(",\"reason\":")
            w.jsonString(v.reason)
        }
        w.raw("}\n")
    }

    /// nginx's and Apache's `combined`:
    /// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`,
    /// with nginx's escaping; `"-"` for a request whose line could not be read.
    static func combined(_ r: ExchangeRecord, clock: LogClock, to w: inout LineBytes) {
        w.nginxText(r.peer)
        w.raw(" - - [")
        clock.common.withUnsafeBytes { w.raw($0) }
        w.raw("] \"")
        if r.method == "-" {
            w.byte(0x2d)
        } else {
            w.nginxText(r.method)
            w.byte(0x20)
            w.nginxText(r.target)
            w.byte(0x20)
            w.raw(r.httpVersion)
        }
        w.raw("\" ")
        w.decimal(r.status)
        w.byte(0x20)
        w.decimal(r.responseBytes)
        w.raw(" \"")
        w.nginxText(r.fields.referer)
        w.raw("\" \"")
        w.nginxText(r.fields.userAgent)
        w.raw("\"\n")
    }

    static func write(_ r: ExchangeRecord, format: AccessLogConfig.Format, clock: LogClock, to w: inout LineBytes) {
        switch format {
        case .json: json(r, clock: clock, to: &w)
        case .combined: combined(r, clock: clock, to: &w)
        }
    }
}
