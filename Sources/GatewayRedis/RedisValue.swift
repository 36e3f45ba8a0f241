import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// A Redis reply (RESP2), as `RESPReader` reads it.
public enum RedisValue: Sendable, Equatable {
    case string([UInt8])
    case integer(Int64)
    case array([RedisValue])
    case status(String)
    case error(String)
    case null

    /// The bytes of a bulk string, or nil.
    var bytes: [UInt8]? {
        if case .string(let b) = self { return b }
        return nil
    }

    /// A bulk string or status as text, or nil.
    var text: String? {
        switch self {
        case .string(let b): String(decoding: b, as: UTF8.self)
        case .status(let s): s
        default: nil
        }
    }

    /// An integer reply, or a bulk string holding a decimal integer.
    var integer: Int64? {
        switch self {
        case .integer(let n): n
        case .string(let b): Self.parseDecimal(b)
        default: nil
        }
    }

    /// What `Int64(String(decoding: bytes, as: UTF8.self))` gives (an optional sign, then ASCII
    /// digits, nil on anything else or on overflow), read from the bytes without a String: a key
    /// record's counter and times are read on every request.
    static func parseDecimal(_ bytes: [UInt8]) -> Int64? {
        bytes.withUnsafeBytes { parseDecimal($0) }
    }

    /// `parseDecimal` of the bytes in place (a reply's length or integer line).
    static func parseDecimal(_ b: UnsafeRawBufferPointer) -> Int64? {
        guard !b.isEmpty else { return nil }
        var i = 0
        var negative = false
        if b[0] == UInt8(ascii: "-") || b[0] == UInt8(ascii: "+") {
            negative = b[0] == UInt8(ascii: "-")
            i = 1
            guard b.count > 1 else { return nil }
        }
        // Accumulated with the sign, so that Int64.min is read too.
        var value: Int64 = 0
        while i < b.count {
            let digit = b[i] &- 0x30
            guard digit < 10 else { return nil }
            let (shifted, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) =
                negative ? shifted.subtractingReportingOverflow(Int64(digit)) : shifted.addingReportingOverflow(Int64(digit))
            guard !o1, !o2 else { return nil }
            value = next
            i += 1
        }
        return value
    }
}

extension RedisValue {
    /// A `NOSCRIPT` error: the server's script cache lost a script (flushed, a restart, a
    /// failover); the connection loads the scripts again and runs the request again.
    var isNoScript: Bool {
        if case .error(let message) = self { return message.hasPrefix("NOSCRIPT") }
        return false
    }
}
