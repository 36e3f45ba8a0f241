import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// Writes a command's RESP straight from its sources (`*count`, then `$length` and the bytes of
/// each argument): no array per argument, one buffer for the whole command. The count is said
/// first; `command` checks that many arguments were written.
struct RESPCommandWriter {
    private var out: [UInt8]
    private var remaining: Int

    init(arguments: Int, capacity: Int = 256) {
        out = []
        out.reserveCapacity(capacity)
        remaining = arguments
        out.append(UInt8(ascii: "*"))
        RESP.appendDecimal(arguments, to: &out)
        out.append(0x0d)
        out.append(0x0a)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        remaining -= 1
        out.append(UInt8(ascii: "$"))
        RESP.appendDecimal(bytes.count, to: &out)
        out.append(0x0d)
        out.append(0x0a)
        out.append(contentsOf: bytes)
        out.append(0x0d)
        out.append(0x0a)
    }

    mutating func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }

    /// The UTF-8 bytes of `text`.
    mutating func append(utf8 text: String) {
        var text = text
        text.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// `n` in decimal (what `String(n)` writes), without a String.
    mutating func append(decimal n: Int64) {
        RESP.withDecimal(n) { append($0) }
    }

    var command: RedisCommand {
        precondition(remaining == 0, "RESPCommandWriter: \(remaining) arguments said and not written")
        return RedisCommand(encoded: out)
    }
}
