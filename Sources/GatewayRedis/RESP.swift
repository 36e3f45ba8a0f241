import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// The Redis serialization protocol's request form: an array of bulk strings.
enum RESP {
    static func encode(_ command: RedisCommand, into out: inout [UInt8]) {
        out.append(contentsOf: command.encoded)
    }

    /// The decimal digits of `n` (≥ 0), without building a String (one- and two-digit numbers, most
    /// lengths of a command's arguments, without any division loop).
    static func appendDecimal(_ n: Int, to out: inout [UInt8]) {
        precondition(n >= 0, "RESP.appendDecimal: a negative number")
        if n < 10 {
            out.append(UInt8(truncatingIfNeeded: n) &+ 0x30)
            return
        }
        if n < 100 {
            out.append(UInt8(truncatingIfNeeded: n / 10) &+ 0x30)
            out.append(UInt8(truncatingIfNeeded: n % 10) &+ 0x30)
            return
        }
        withDecimal(Int64(n)) { out.append(contentsOf: $0) }
    }

    /// Lends `body` the decimal text of `n` (sign included, what `String(n)` writes), written
    /// backwards into a buffer on the stack: 20 bytes hold every Int64, `Int64.min` included.
    static func withDecimal<R>(_ n: Int64, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var i = 20
            var rest = n.magnitude
            repeat {
                i -= 1
                digits[i] = UInt8(truncatingIfNeeded: rest % 10) &+ 0x30
                rest /= 10
            } while rest > 0
            if n < 0 {
                i -= 1
                digits[i] = UInt8(ascii: "-")
            }
            return body(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: digits[i...])))
        }
    }
}
