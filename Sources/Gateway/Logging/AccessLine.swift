import GatewayConfig
import GatewayHTTP
import GatewayPolicy
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

    /// "00" to "99": two digits per lookup.
    private static let pairs: StaticString = """
        0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
        5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899
        """

    /// `n` (0…99) as two digits.
    @inline(__always) mutating func pair(_ n: Int) {
        let two = UnsafeRawPointer(Self.pairs.utf8Start + 2 * n).loadUnaligned(as: UInt16.self)
        base.storeBytes(of: two, toByteOffset: count, as: UInt16.self)
        count += 2
    }

    /// A non-negative integer in decimal (negative values as 0).
    mutating func decimal(_ value: Int) {
        let n = max(0, value)
        if n < 10 {
            byte(0x30 &+ UInt8(truncatingIfNeeded: n))
        } else if n < 100 {
            pair(n)
        } else if n < 1000 {
            byte(0x30 &+ UInt8(truncatingIfNeeded: n / 100))
            pair(n % 100)
        } else {
            var digits = 4
            var t = n / 10_000
            while t > 0 {
                t /= 10
                digits += 1
            }
            var v = n
            var at = count + digits
            while at - count >= 2 {
                at -= 2
                let two = UnsafeRawPointer(Self.pairs.utf8Start + 2 * (v % 100)).loadUnaligned(as: UInt16.self)
                base.storeBytes(of: two, toByteOffset: at, as: UInt16.self)
                v /= 100
            }
            if at > count { base.storeBytes(of: 0x30 &+ UInt8(truncatingIfNeeded: v), toByteOffset: count, as: UInt8.self) }
            count += digits
        }
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
        let micros = s > 0 && s < 1e12 ? Int(s * 1e6 + 0.5) : 0
        let whole = micros / 1_000_000
        let frac = micros - whole * 1_000_000
        decimal(whole)
        byte(0x2e)
        pair(frac / 10_000)
        pair(frac / 100 % 100)
        pair(frac % 100)
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

    /// The bytes of a JSON string's content: plain bytes copied as they come, the rest escaped
    /// (`jsonByte`).
    @inline(__always) private mutating func jsonContent(_ bytes: UnsafeRawBufferPointer, latin1: Bool) {
        guard let src = bytes.baseAddress else { return }
        let n = bytes.count
        var i = 0
        let out = base.assumingMemoryBound(to: UInt8.self)
        let input = src.assumingMemoryBound(to: UInt8.self)
        var at = count
        while i < n {
            let c = input[i]
            guard Self.plainJSON(c) else { break }
            out[at] = c
            at += 1
            i += 1
        }
        count = at
        while i < n {
            jsonByte(input[i], latin1: latin1)
            i += 1
        }
    }

    /// `"…"` of Latin-1 bytes.
    mutating func jsonString(latin1 bytes: UnsafeRawBufferPointer) {
        byte(0x22)
        jsonContent(bytes, latin1: true)
        byte(0x22)
    }

    /// `"…"` of a string (its UTF-8).
    mutating func jsonString(_ s: String) {
        byte(0x22)
        var copy = s  // a native string's bytes in place, a small one's copied to the stack
        copy.withUTF8 { jsonContent(UnsafeRawBufferPointer($0), latin1: false) }
        byte(0x22)
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
            guard let base = u.baseAddress, isASCII(base, u.count) else { return u.isEmpty }
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
/// three digits of milliseconds. UTC. A plain value (no references): copied in and out of its
/// owner without reference counting.
struct LogClock {
    private var second = Int.min
    /// `2026-11-26T09:36:58.` (JSON, RFC 3339: 20 bytes) and `26/Nov/2026:09:36:58 +0000`
    /// (`combined`, nginx's `$time_local` in UTC: 26 bytes), in words.
    private var rfc3339Words: (UInt64, UInt64, UInt64) = (0, 0, 0)
    private var commonWords: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    private(set) var millis = 0

    private static let months: StaticString = "JanFebMarAprMayJunJulAugSepOctNovDec"

    /// Reads the clock; reformats the prefixes when the second changed.
    mutating func now() {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        set(seconds: Int(ts.tv_sec), nanos: Int(ts.tv_nsec))
    }

    @inline(__always) mutating func set(seconds: Int, nanos: Int) {
        millis = nanos / 1_000_000
        if seconds != second { format(seconds) }
    }

    private mutating func format(_ seconds: Int) {
        second = seconds
        var t = time_t(seconds)
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        let year = Int(tm.tm_year) + 1900, month = Int(tm.tm_mon), day = Int(tm.tm_mday)
        let hour = Int(tm.tm_hour), minute = Int(tm.tm_min), sec = Int(tm.tm_sec)
        withUnsafeMutableBytes(of: &rfc3339Words) { _ = RFC3339.writePrefix(seconds: seconds, into: $0) }
        withUnsafeMutableBytes(of: &commonWords) { b in
            var w = LineBytes(base: b.baseAddress!, count: 0)
            w.digits(day, width: 2)
            w.byte(0x2f)
            w.raw(UnsafeRawBufferPointer(start: Self.months.utf8Start + 3 * month, count: 3))
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

    /// Appends `2026-11-26T09:36:58.123Z`.
    @inline(__always) func writeRFC3339(_ w: inout LineBytes) {
        withUnsafeBytes(of: rfc3339Words) { w.raw(UnsafeRawBufferPointer(rebasing: $0[0..<20])) }
        w.byte(0x30 &+ UInt8(truncatingIfNeeded: millis / 100))
        w.pair(millis % 100)
        w.byte(0x5a)
    }

    /// Appends `26/Nov/2026:09:36:58 +0000`.
    @inline(__always) func writeCommon(_ w: inout LineBytes) {
        withUnsafeBytes(of: commonWords) { w.raw(UnsafeRawBufferPointer(rebasing: $0[0..<26])) }
    }

    /// The RFC 3339 time with milliseconds, as a string (the event log).
    var rfc3339: String {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &words) { b in
            var w = LineBytes(base: b.baseAddress!, count: 0)
            writeRFC3339(&w)
            return String(decoding: UnsafeRawBufferPointer(rebasing: b[0..<w.count]), as: UTF8.self)
        }
    }
}

/// The two formats of an access line (docs/operations.md, "The access log").
enum AccessLine {
    /// Room enough for one line of `r`: every variable part at its worst escaping (6 bytes per
    /// byte), plus the fixed text and numbers.
    static func bound(_ r: ExchangeRecord) -> Int {
        @inline(__always) func size(_ v: LoggedValue) -> Int {
            switch v {
            case .none: 0
            case .bytes(let b): b.count
            case .string(let s): s.utf8.count
            }
        }
        let text =
            r.method.utf8.count + r.target.utf8.count + size(r.fields.host) + size(r.fields.userAgent)
            + size(r.fields.referer) + r.route.utf8.count + r.peer.utf8.count + r.protocolName.utf8.count
            + (r.upstream?.utf8.count ?? 0) + (r.error?.utf8.count ?? 0)
            + (r.verdict.map { $0.verdict.utf8.count + $0.reason.utf8.count } ?? 0)
        return 6 * text + RequestID.maxBytes + 512
    }

    /// `{"ts":"…","request_id":"…",…}` and a newline. Absent values are left out (no `upstream` for
    /// a local answer, no `error` for a complete exchange, no `verdict` off protected routes).
    static func json(_ r: ExchangeRecord, clock: LogClock, to w: inout LineBytes) {
        w.raw("{\"ts\":\"")
        clock.writeRFC3339(&w)
        w.raw("\",\"request_id\":")
        r.requestID.withBytes { w.jsonString(latin1: $0) }  // valid ids need no escaping: a copy, checked
        w.raw(",\"client\":")
        w.jsonString(r.peer)
        w.raw(",\"method\":")
        w.jsonString(r.method)
        w.raw(",\"target\":")
        w.jsonString(r.target)
        if case .none = r.fields.host {
        } else {
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
        if case .none = r.fields.userAgent {
        } else {
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
        clock.writeCommon(&w)
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
