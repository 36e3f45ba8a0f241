import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// One command, kept as it goes on the wire: RESP's array of bulk strings (binary-safe), written
/// once when the command is made (`RESPCommandWriter`), copied whole into a connection's output.
struct RedisCommand: Sendable {
    let encoded: [UInt8]

    /// `RESPCommandWriter.command` only: the bytes are already a RESP array.
    init(encoded: [UInt8]) { self.encoded = encoded }

    init(_ args: [[UInt8]]) {
        var w = RESPCommandWriter(arguments: args.count)
        for arg in args { w.append(arg) }
        self = w.command
    }

    init(_ words: String...) { self.init(words.map { Array($0.utf8) }) }

    /// The arguments, read back from the encoding (an array of bulk strings: RESP, which the
    /// reply reader reads) for messages about a refused set-up command, and tests.
    var args: [[UInt8]] {
        var reader = RESPReader()
        guard case .reply(.array(let items), _) = encoded.withUnsafeBytes({ reader.read($0) }) else { return [] }
        return items.compactMap(\.bytes)
    }
}
