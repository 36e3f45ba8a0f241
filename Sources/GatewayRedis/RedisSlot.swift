/// Redis Cluster's key → slot function: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
/// reflection, no final xor) of the key's hash tag, modulo 16384. The hash tag is the text between
/// the first `{` and the first `}` after it when that text is not empty; otherwise the whole key.
public enum RedisSlot {
    public static let count = 16_384

    private static let table: [UInt16] = (0..<256).map { byte -> UInt16 in
        var crc = UInt16(byte) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }

    /// CRC16/XMODEM of `bytes` (check value: "123456789" → 0x31C3).
    public static func crc16(_ bytes: some Collection<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for b in bytes { crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ b)] }
        return crc
    }

    /// The part of `key` that is hashed: its hash tag, or the whole key.
    public static func hashedPart(_ key: [UInt8]) -> ArraySlice<UInt8> {
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
            let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            return key[(open + 1)..<close]
        }
        return key[...]
    }

    /// The slot of `key` (0 ..< 16384), as `CLUSTER KEYSLOT` computes it.
    public static func of(_ key: [UInt8]) -> Int { Int(crc16(hashedPart(key))) & (count - 1) }

    public static func of(_ key: String) -> Int { of(Array(key.utf8)) }
}
