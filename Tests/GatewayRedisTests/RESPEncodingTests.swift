import GatewayStore
import GatewayWire
import Testing

@testable import GatewayRedis

/// The bytes the store sends (commands in RESP, numbers in decimal; record names are checked in
/// `RedisLoopTests.sameAsTheStringForms`), and the hashing of the ids its caches are keyed by.
@Suite("RESP encoding and key hashing (no server)")
struct RESPEncodingTests {
    @Test("decimal numbers: every power of ten and its neighbours, Int.max and 10,000 random values are String(n)")
    func decimals() {
        var values: [Int] = [0, 1, 9, Int.max, Int.max - 1]
        var p = 1
        while p <= Int.max / 10 {
            p *= 10
            values += [p - 1, p, p + 1]
        }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<10_000 { values.append(Int.random(in: 0...Int.max, using: &rng) >> Int.random(in: 0..<63, using: &rng)) }
        for n in values {
            var out: [UInt8] = [0x2a]
            RESP.appendDecimal(n, to: &out)
            #expect(out == [0x2a] + Array(String(n).utf8), "\(n)")
        }
    }

    @Test("integers read from bulk strings are what Int64(String) reads: signs, bounds, overflow, garbage")
    func integersFromStrings() {
        var cases = [
            "0", "-0", "+0", "7", "-7", "+7", "42", "1700000000000", "9223372036854775807", "-9223372036854775808",
            "9223372036854775808", "-9223372036854775809", "99999999999999999999", "", "-", "+", " 1", "1 ", "1a",
            "0x10", "--1", "+-1", "1.5", "١٢", "00012", "-00012",
        ]
        var rng = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789-+ a".utf8)
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...21, using: &rng)
            cases.append(String(decoding: (0..<n).map { _ in alphabet.randomElement(using: &rng)! }, as: UTF8.self))
        }
        for text in cases {
            #expect(RedisValue.string(Array(text.utf8)).integer == Int64(text), "\(text.debugDescription)")
        }
        #expect(RedisValue.integer(-3).integer == -3)
    }

    @Test("a command is an array of bulk strings, empty and binary arguments included")
    func command() {
        var out: [UInt8] = Array("+".utf8)
        RESP.encode(RedisCommand([Array("EVALSHA".utf8), [], [0x00, 0x0d, 0x0a, 0xff], Array(repeating: 0x61, count: 12)]), into: &out)
        let expected = "+*4\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$4\r\n\u{0}\r\n\u{FF}\r\n$12\r\naaaaaaaaaaaa\r\n"
        #expect(
            out == Array("+*4\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$4\r\n".utf8) + [0x00, 0x0d, 0x0a, 0xff]
                + Array("\r\n$12\r\naaaaaaaaaaaa\r\n".utf8),
            "\(expected.debugDescription)")
    }

    @Test("the command writer: decimals of every sign and size are String(n), text is its UTF-8, the same bytes as the argument list")
    func writer() {
        var rng = SystemRandomNumberGenerator()
        var numbers: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.min + 1]
        for _ in 0..<5_000 {
            numbers.append(Int64.random(in: Int64.min...Int64.max, using: &rng) >> Int64.random(in: 0...63, using: &rng))
        }
        for chunk in stride(from: 0, to: numbers.count, by: 7).map({ Array(numbers[$0..<min(numbers.count, $0 + 7)]) }) {
            let texts = ["", "ABCDE12345.com.example.app", "v1.2 ünïcödé 🙂", String(repeating: "x", count: 300)]
            let text = texts.randomElement(using: &rng)!
            var w = RESPCommandWriter(arguments: chunk.count + 3, capacity: 8)
            w.append(Array("EVALSHA".utf8))
            for n in chunk { w.append(decimal: n) }
            w.append(utf8: text)
            [UInt8]([0x00, 0x0d, 0x0a]).withUnsafeBytes { w.append($0) }
            let expected: [[UInt8]] =
                [Array("EVALSHA".utf8)] + chunk.map { Array(String($0).utf8) } + [Array(text.utf8), [0x00, 0x0d, 0x0a]]
            let command = w.command
            #expect(command.encoded == RedisCommand(expected).encoded, "\(chunk) \(text)")
            #expect(command.args == expected, "read back: \(chunk)")
        }
        #expect(
            RedisCommand("SCRIPT", "LOAD", "return 1").args.map { String(decoding: $0, as: UTF8.self) } == ["SCRIPT", "LOAD", "return 1"])
        #expect(RedisCommand([]).encoded == Array("*0\r\n".utf8))
        #expect(RedisCommand([]).args.isEmpty)
    }

    @Test("key ids and challenge tokens hash by their bytes: equal ones are one dictionary entry, 20,000 distinct ones stay apart")
    func hashing() throws {
        var rng = SystemRandomNumberGenerator()
        var keys: [KeyID: Int] = [:]
        var tokens: [ChallengeToken: Int] = [:]
        var seenKeys = Set<[UInt8]>()
        for i in 0..<20_000 {
            let b = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
            guard seenKeys.insert(b).inserted else { continue }
            keys[try #require(KeyID(b))] = i
            tokens[try #require(ChallengeToken(Array(b.prefix(16 + i % 17))))] = i
        }
        #expect(keys.count == seenKeys.count)
        for (k, i) in keys.prefix(100) { #expect(keys[try #require(KeyID(k.bytes))] == i) }
        // A token and a longer one starting with the same bytes are two entries.
        let short = try #require(ChallengeToken(Array(repeating: 7, count: 16)))
        let long = try #require(ChallengeToken(Array(repeating: 7, count: 17)))
        tokens = [short: 1, long: 2]
        #expect(tokens.count == 2 && tokens[short] == 1 && tokens[long] == 2)
    }
}
