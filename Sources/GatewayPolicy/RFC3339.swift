import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

public enum RFC3339 {
    /// `2026-11-23T14:05:09.123Z` (UTC, milliseconds).
    public static func format(millis: Int64) -> String {
        if millis >= 0 {
            var written = false
            let text = String(unsafeUninitializedCapacity: 24) { out in
                guard writePrefix(seconds: Int(millis / 1000), into: UnsafeMutableRawBufferPointer(out)) else { return 0 }
                writeMillis(millis, into: out)
                written = true
                return 24
            }
            if written { return text }
        }
        // Before 1970 or after 9999 (never a challenge's or a receipt's): the padded decimal form.
        var t = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&t, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis % 1000), 3))Z"
    }

    /// `format(millis:)` for one thread's times, which mostly fall in the same second as the one
    /// before: the date and time up to the milliseconds (`gmtime_r` and twelve digits) are made
    /// once per second, a call then copies them and writes the milliseconds. Not shared between
    /// threads (each event loop keeps its own).
    public struct Cached {
        private var second = Int.min
        private var prefix: (UInt64, UInt64, UInt32) = (0, 0, 0)

        public init() {}

        public mutating func format(millis: Int64) -> String {
            guard millis >= 0 else { return RFC3339.format(millis: millis) }
            let s = Int(millis / 1000)
            if s != second {
                var made: (UInt64, UInt64, UInt32) = (0, 0, 0)
                guard withUnsafeMutableBytes(of: &made, { RFC3339.writePrefix(seconds: s, into: $0) }) else {
                    return RFC3339.format(millis: millis)
                }
                prefix = made
                second = s
            }
            return withUnsafeBytes(of: prefix) { p in
                String(unsafeUninitializedCapacity: 24) { out in
                    for i in 0..<20 { out[i] = p[i] }
                    RFC3339.writeMillis(millis, into: out)
                    return 24
                }
            }
        }
    }

    /// Writes `123Z` (the milliseconds of `millis`, which is not negative) after the 20-byte prefix.
    @inline(__always)
    static func writeMillis(_ millis: Int64, into out: UnsafeMutableBufferPointer<UInt8>) {
        let ms = Int(millis % 1000)
        out[20] = UInt8(truncatingIfNeeded: 0x30 + ms / 100)
        out[21] = UInt8(truncatingIfNeeded: 0x30 + ms / 10 % 10)
        out[22] = UInt8(truncatingIfNeeded: 0x30 + ms % 10)
        out[23] = UInt8(ascii: "Z")
    }

    /// Writes `2026-11-23T14:05:09.` (20 bytes: UTC, up to the milliseconds' dot) for `seconds`
    /// since 1970 into the start of `out`; false, with nothing written, for a year after 9999. The
    /// one RFC 3339 writer: `format` and the access log's clock (once a second) use it.
    public static func writePrefix(seconds: Int, into out: UnsafeMutableRawBufferPointer) -> Bool {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        let year = Int(parts.tm_year) + 1900
        guard seconds >= 0, year <= 9999, out.count >= 20 else { return false }
        func put(_ value: Int, _ width: Int, at offset: Int, then separator: UInt8) {
            var v = value
            for k in stride(from: offset + width - 1, through: offset, by: -1) {
                out[k] = UInt8(truncatingIfNeeded: 0x30 + v % 10)
                v /= 10
            }
            out[offset + width] = separator
        }
        put(year, 4, at: 0, then: UInt8(ascii: "-"))
        put(Int(parts.tm_mon) + 1, 2, at: 5, then: UInt8(ascii: "-"))
        put(Int(parts.tm_mday), 2, at: 8, then: UInt8(ascii: "T"))
        put(Int(parts.tm_hour), 2, at: 11, then: UInt8(ascii: ":"))
        put(Int(parts.tm_min), 2, at: 14, then: UInt8(ascii: ":"))
        put(Int(parts.tm_sec), 2, at: 17, then: UInt8(ascii: "."))
        return true
    }
}
