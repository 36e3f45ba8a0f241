import GatewayCrypto

/// Random 64-bit words from OpenSSL's CSPRNG (`SecureRandom`, seeded by the OS), drawn 256 bytes
/// at a time: a challenge needs two words, and `SystemRandomNumberGenerator` makes one
/// `getrandom(2)` call per word. One per shard of the memory store, used under the shard's lock;
/// one per Redis store, under its own lock. Each word is handed out once and cleared; the buffer
/// is never written anywhere (snapshots and journals hold issued tokens, not this buffer).
public struct RandomWords: Sendable {
    static let capacity = 32
    private var words: [UInt64]
    private var next = RandomWords.capacity

    public init() {
        words = [UInt64](repeating: 0, count: Self.capacity)
    }

    public mutating func draw() -> UInt64 {
        if next == Self.capacity {
            words.withUnsafeMutableBytes { SecureRandom.fill($0) }
            next = 0
        }
        defer {
            words[next] = 0
            next += 1
        }
        return words[next]
    }

}
