/// The fixed-size, allocation-free representations kept in memory (and dumped as-is into snapshots).

/// A key id (32 bytes) as four words, in the byte order of the id (loaded little-endian).
struct KeyBits: Hashable {
    var w0: UInt64
    var w1: UInt64
    var w2: UInt64
    var w3: UInt64

    init(w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64) {
        self.w0 = w0
        self.w1 = w1
        self.w2 = w2
        self.w3 = w3
    }

    init(_ id: KeyID) {
        self = id.bytes.withUnsafeBytes { raw in
            KeyBits(
                w0: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                w1: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                w2: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self)),
                w3: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)))
        }
    }

    var keyID: KeyID {
        var out = [UInt8](repeating: 0, count: 32)
        out.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: w0.littleEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: w1.littleEndian, toByteOffset: 8, as: UInt64.self)
            raw.storeBytes(of: w2.littleEndian, toByteOffset: 16, as: UInt64.self)
            raw.storeBytes(of: w3.littleEndian, toByteOffset: 24, as: UInt64.self)
        }
        return KeyID(out)!
    }
}

/// The 64 bytes x ‖ y of an uncompressed P-256 point (the leading 0x04 is implied).
struct PointBits {
    var x0: UInt64, x1: UInt64, x2: UInt64, x3: UInt64
    var y0: UInt64, y1: UInt64, y2: UInt64, y3: UInt64

    init?(_ publicKey: [UInt8]) {
        guard publicKey.count == 65, publicKey[0] == 0x04 else { return nil }
        var words = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        publicKey.withUnsafeBytes { raw in
            withUnsafeMutableBytes(of: &words) { dst in
                dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[1..<65]))
            }
        }
        (x0, x1, x2, x3, y0, y1, y2, y3) = words
    }

    var publicKey: [UInt8] {
        var words = (x0, x1, x2, x3, y0, y1, y2, y3)
        return [UInt8](unsafeUninitializedCapacity: 65) { buffer, count in
            buffer[0] = 0x04
            withUnsafeBytes(of: &words) { src in
                UnsafeMutableRawBufferPointer(start: buffer.baseAddress! + 1, count: 64).copyMemory(from: src)
            }
            count = 65
        }
    }
}

/// One registered key: 144 bytes, no references. Strings are indices into the shard's intern table.
struct KeyRecord {
    var key: KeyBits
    var point: PointBits
    /// Byte offset of the receipt in the receipts file; with no data directory, unused.
    var receiptOffset: UInt64
    var counter: UInt32
    var receiptLength: UInt32
    var appIndex: UInt32
    /// `KeyRecord.noString` when the attestation carried none.
    var bundleIndex: UInt32
    var category: UInt32
    var firstSeen: UInt32
    var lastSeen: UInt32
    /// bit 0: production, bit 1: has validation category.
    var flags: UInt8
    /// Re-registrations counted in the window that started at `reregistrationWindow`.
    var reregistrations: UInt8 = 0
    /// Start of the current re-registration window, Unix seconds; 0: no re-registration yet.
    var reregistrationWindow: UInt32 = 0

    static let noString = UInt32.max
    static let flagProduction: UInt8 = 1
    static let flagCategory: UInt8 = 2
}

/// Seconds since the Unix epoch as stored (UInt32, good until 2106); negative times clamp to 0.
@inline(__always) func storedSeconds(_ millis: Int64) -> UInt32 {
    millis <= 0 ? 0 : UInt32(clamping: millis / 1000)
}

/// A challenge token as issued: 16 random bytes.
struct ChallengeBits: Hashable {
    var a: UInt64
    var b: UInt64

    static let byteCount = 16

    init(a: UInt64, b: UInt64) {
        self.a = a
        self.b = b
    }

    /// nil for tokens of another length: this store never issued them.
    init?(_ token: ChallengeToken) {
        guard token.bytes.count == Self.byteCount else { return nil }
        (a, b) = token.bytes.withUnsafeBytes { raw in
            (UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
             UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        }
    }

    var token: ChallengeToken {
        var out = [UInt8](repeating: 0, count: 16)
        out.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: a.littleEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: b.littleEndian, toByteOffset: 8, as: UInt64.self)
        }
        return ChallengeToken(out)!
    }
}

struct ChallengeEntry {
    var token: ChallengeBits
    var boundKey: KeyBits
    var expiresAt: Int64
    /// 0: any purpose, 1: register, 2: assert.
    var purpose: UInt8
    var hasBoundKey: Bool
    var consumed: Bool

    static func purposeCode(_ p: ChallengePurpose?) -> UInt8 {
        switch p {
        case nil: 0
        case .register: 1
        case .assert: 2
        }
    }

    var purposeValue: ChallengePurpose? {
        switch purpose {
        case 1: .register
        case 2: .assert
        default: nil
        }
    }
}

/// An expiry-ordered min-heap entry.
struct ExpiryItem {
    var expiresAt: Int64
    var token: ChallengeBits
}

/// Everything one shard holds; always accessed under the shard's `Mutex`.
///
/// Keys: records in fixed chunks of `chunkSize` (so growth never copies the whole shard and the
/// slack is at most one chunk), found through an open-addressing table of `UInt32` (record index + 1,
/// 0 = empty, linear probing, load ≤ 3/4). A removed key (idle eviction) leaves no tombstone: its
/// slot is closed by backward shifting and the last record moves into its place.
struct ShardState {
    static let chunkShift = 9
    static let chunkSize = 1 << chunkShift

    var chunks: ContiguousArray<ContiguousArray<KeyRecord>> = []
    var count = 0
    var slots: ContiguousArray<UInt32> = ContiguousArray(repeating: 0, count: 16)
    var strings: ContiguousArray<String> = []
    var stringIndex: [String: UInt32] = [:]
    var challenges: [ChallengeBits: ChallengeEntry] = [:]
    var expiries = ExpiryHeap()
    let seed: UInt64

    init(seed: UInt64) {
        self.seed = seed
    }

    @inline(__always) func slotHash(_ key: KeyBits) -> Int {
        // w0 chose the shard; w1 (independent random bits) mixed with a per-process seed places it.
        // (In Swift `>>` binds tighter than `&*`: the product is parenthesized; its high half is used.)
        Int(truncatingIfNeeded: ((key.w1 ^ seed) &* 0x9E37_79B9_7F4A_7C15) >> 32)
    }

    /// The record index of `key`, or nil.
    func find(_ key: KeyBits) -> Int? {
        let mask = slots.count - 1
        var i = slotHash(key) & mask
        while true {
            let s = slots[i]
            if s == 0 { return nil }
            let index = Int(s - 1)
            if chunks[index >> Self.chunkShift][index & (Self.chunkSize - 1)].key == key { return index }
            i = (i + 1) & mask
        }
    }

    @inline(__always) func record(at index: Int) -> KeyRecord {
        chunks[index >> Self.chunkShift][index & (Self.chunkSize - 1)]
    }

    @inline(__always) mutating func update(at index: Int, _ body: (inout KeyRecord) -> Void) {
        body(&chunks[index >> Self.chunkShift][index & (Self.chunkSize - 1)])
    }

    /// Appends `record` unless its key is present (one probe sequence for both); false if present.
    mutating func appendIfAbsent(_ record: KeyRecord) -> Bool {
        if (count + 1) * 4 > slots.count * 3 { grow() }
        let mask = slots.count - 1
        var i = slotHash(record.key) & mask
        while true {
            let s = slots[i]
            if s == 0 { break }
            let index = Int(s - 1)
            if chunks[index >> Self.chunkShift][index & (Self.chunkSize - 1)].key == record.key { return false }
            i = (i + 1) & mask
        }
        if count >> Self.chunkShift == chunks.count {
            var chunk = ContiguousArray<KeyRecord>()
            chunk.reserveCapacity(Self.chunkSize)
            chunks.append(chunk)
        }
        chunks[count >> Self.chunkShift].append(record)
        slots[i] = UInt32(count + 1)
        count += 1
        return true
    }

    /// Removes the key at record `index`: its slot is emptied by backward-shift deletion (the
    /// entries after it in its probe run move up so every lookup still finds them), then the last
    /// record moves into `index` (its slot is repointed) so records stay dense.
    mutating func remove(at index: Int) {
        let mask = slots.count - 1
        var hole = slotHash(record(at: index).key) & mask
        while slots[hole] != UInt32(index + 1) { hole = (hole + 1) & mask }
        var next = (hole + 1) & mask
        while slots[next] != 0 {
            let home = slotHash(record(at: Int(slots[next] - 1)).key) & mask
            // The entry at `next` may move into the hole unless its home lies cyclically in (hole, next].
            let stays = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !stays {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
        let last = count - 1
        if index != last {
            let moved = record(at: last)
            var i = slotHash(moved.key) & mask
            while slots[i] != UInt32(last + 1) { i = (i + 1) & mask }
            slots[i] = UInt32(index + 1)
            update(at: index) { $0 = moved }
        }
        chunks[last >> Self.chunkShift].removeLast()
        if chunks[last >> Self.chunkShift].isEmpty { chunks.removeLast() }
        count -= 1
    }

    private mutating func place(_ key: KeyBits, index: Int) {
        let mask = slots.count - 1
        var i = slotHash(key) & mask
        while slots[i] != 0 { i = (i + 1) & mask }
        slots[i] = UInt32(index + 1)
    }

    private mutating func grow() {
        slots = ContiguousArray(repeating: 0, count: slots.count * 2)
        for index in 0..<count { place(record(at: index).key, index: index) }
    }

    /// Sizes the slot table for `expected` keys at once (restore), so it is not rebuilt repeatedly.
    mutating func reserve(_ expected: Int) {
        var size = slots.count
        while expected * 4 > size * 3 { size *= 2 }
        guard size > slots.count else { return }
        slots = ContiguousArray(repeating: 0, count: size)
        for index in 0..<count { place(record(at: index).key, index: index) }
    }

    mutating func intern(_ s: String) -> UInt32 {
        if let i = stringIndex[s] { return i }
        let i = UInt32(strings.count)
        strings.append(s)
        stringIndex[s] = i
        return i
    }

    mutating func internOptional(_ s: String?) -> UInt32 {
        guard let s else { return KeyRecord.noString }
        return intern(s)
    }

    func string(_ index: UInt32) -> String? {
        index == KeyRecord.noString || Int(index) >= strings.count ? nil : strings[Int(index)]
    }

    /// After a burst, hands memory back: a dictionary or heap keeps its capacity when emptied.
    mutating func shrinkChallengesIfSparse() {
        if challenges.capacity > 1024 && challenges.count * 8 < challenges.capacity {
            challenges = Dictionary(uniqueKeysWithValues: challenges.lazy.map { ($0.key, $0.value) })
        }
        expiries.shrinkIfSparse()
    }

    /// Adds a challenge that is known not to be present.
    mutating func addChallenge(_ entry: ChallengeEntry) {
        challenges[entry.token] = entry
        expiries.push(ExpiryItem(expiresAt: entry.expiresAt, token: entry.token))
    }
}

/// A binary min-heap on expiry, so a sweep touches only what expired.
struct ExpiryHeap {
    private(set) var items: ContiguousArray<ExpiryItem> = []

    var top: ExpiryItem? { items.first }

    mutating func shrinkIfSparse() {
        if items.capacity > 1024 && items.count * 8 < items.capacity { items = ContiguousArray(items) }
    }

    mutating func push(_ item: ExpiryItem) {
        items.append(item)
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if items[parent].expiresAt <= items[i].expiresAt { break }
            items.swapAt(parent, i)
            i = parent
        }
    }

    mutating func pop() -> ExpiryItem? {
        guard !items.isEmpty else { return nil }
        let first = items[0]
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            let n = items.count
            while true {
                let l = 2 * i + 1
                let r = l + 1
                var m = i
                if l < n && items[l].expiresAt < items[m].expiresAt { m = l }
                if r < n && items[r].expiresAt < items[m].expiresAt { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return first
    }
}
