import Foundation
import GatewayWire
import Testing

/// `JSONObject`'s output: the gateway's own answers (errors, challenges, explain, the demo upstream).
@Suite("JSON writer")
struct JSONWriterTests {
    /// The definition the byte writer must match: RFC 8259 escaping scalar by scalar (`"`, `\`,
    /// `\n`, `\r`, `\t` by name; other C0 controls, DEL, U+2028 and U+2029 as `\u` and 4 lowercase
    /// hex digits), everything else as is.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    @Test("known answers: order kept, replaced keys in place, nesting, numbers, escapes")
    func knownAnswers() {
        var o = JSONObject()
        o.set("error", "bad \"thing\"\n")
        o.set("count", 42)
        o.set("ok", false)
        o.set("none", nil as String?)
        o.set("list", .array([.int(-1), .string("a\\b"), .null]))
        var inner = JSONObject()
        inner.set("x", "\u{0}\u{1f}\u{7f}\u{2028}\u{2029}é😀")
        o.set("inner", .object(inner))
        o.set("count", 43)
        #expect(
            o.description
                == #"{"error":"bad \"thing\"\n","count":43,"ok":false,"none":null,"list":[-1,"a\\b",null],"inner":{"x":"\u0000\u001f\u007f\u2028\u2029é😀"}}"#
        )
        #expect(JSONObject().description == "{}")
    }

    @Test(
        "20,000 random strings (quotes, backslashes, controls, DEL, U+2028/2029, accents, emoji) are written as the definition writes them, and parse back to themselves"
    )
    func differential() throws {
        let pieces: [String] = [
            "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{8}", "\u{1b}", "\u{1f}", "\u{7f}", "\u{80}",
            "\u{2028}", "\u{2029}", "\u{2027}", "\u{202a}", "é", "€", "😀", "\u{e2}", "\u{fffd}", "ab\"cd", "x\u{2028}y",
        ]
        var rng = SystemRandomNumberGenerator()
        for round in 0..<20_000 {
            let n = Int.random(in: 0...24, using: &rng)
            let s = (0..<n).map { _ in pieces.randomElement(using: &rng)! }.joined()
            var o = JSONObject()
            o.set(s, s)
            let written = o.description
            #expect(written == "{" + Self.quoted(s) + ":" + Self.quoted(s) + "}", "\(s.debugDescription)")
            if round % 20 == 0 {
                let parsed = try JSONSerialization.jsonObject(with: Data(written.utf8)) as? [String: String]
                #expect(parsed == [s: s], "\(s.debugDescription)")
            }
        }
    }
}
