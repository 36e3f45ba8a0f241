import GatewayWire

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

    static func == (l: KeyBits, r: KeyBits) -> Bool {
        (l.w0 ^ r.w0) | (l.w1 ^ r.w1) | (l.w2 ^ r.w2) | (l.w3 ^ r.w3) == 0
    }

    /// Hashed by `w1` alone (SipHash, keyed by the table's secret seed, as every Swift hash): the
    /// words of a key id (or an account digest) are SHA-256 output, so many ids sharing one `w1` (what
    /// filling one bucket would take) are a 64-bit multi-collision, out of reach; one word instead
    /// of four takes a fraction of the rounds. (Not `w0`: it names the shard, so its low bits are
    /// the same for all keys of one.)
    func hash(into hasher: inout Hasher) { hasher.combine(w1) }

    /// What a `Dictionary` or `Set` uses: the same hash in one call, without a `Hasher` in memory.
    func _rawHashValue(seed: Int) -> Int { w1._rawHashValue(seed: seed) }
}

/// The 64 bytes x ‖ y of an uncompressed P-256 point (the leading 0x04 is implied).
struct PointBits: Equatable {
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
        // (ByteArrays.make: not the standard library's unspecialised uninitialized-capacity path.)
        return ByteArrays.make(capacity: 65) { buffer in
            buffer[0] = 0x04
            withUnsafeBytes(of: &words) { src in
                UnsafeMutableRawBufferPointer(start: buffer.baseAddress! + 1, count: 64).copyMemory(from: src)
            }
            return 65
        }
    }
}

/// One registered key: 168 bytes, no references. Strings are indices into the shard's intern table.
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
    /// Apple's risk metric of the latest `RECEIPT` (`KeyRisk`); `noMetric` before the first refresh.
    var riskMetric: UInt32 = KeyRecord.noMetric
    /// The stored receipt's creation time (field 12), Unix seconds; 0: no dated receipt (then no refresh).
    var receiptCreated: UInt32 = 0
    /// Its not-before (field 19) and expiration (field 21), Unix seconds; 0: absent.
    var receiptNotBefore: UInt32 = 0
    var receiptExpires: UInt32 = 0
    /// When the risk refresher takes the key next, Unix seconds; 0: never.
    var nextRefresh: UInt32 = 0
    /// The counter window's open counters below `counter` (`CounterWindow.gaps`; 0: none).
    var gaps: UInt64 = 0

    static let noString = UInt32.max
    static let noMetric = UInt32.max
    static let flagProduction: UInt8 = 1
    static let flagCategory: UInt8 = 2
    /// Apple's data service answered 404 for the latest receipt: the metric is the last one known.
    static let flagStale: UInt8 = 4

    /// The counter window (`counter` and `gaps`).
    var window: CounterWindow {
        get { CounterWindow(highest: counter, gaps: gaps) }
        set {
            counter = newValue.highest
            gaps = newValue.gaps
        }
    }

    /// The same registration (every field but those requests and refreshes move: the counter
    /// window, the last-seen time, the receipt's risk and schedule). Field by field: the record's
    /// padding bytes are not defined, so its raw bytes cannot be compared.
    func sameRegistration(as other: KeyRecord) -> Bool {
        key == other.key && point == other.point && receiptOffset == other.receiptOffset
            && receiptLength == other.receiptLength && appIndex == other.appIndex && bundleIndex == other.bundleIndex
            && category == other.category && firstSeen == other.firstSeen
            && flags & ~Self.flagStale == other.flags & ~Self.flagStale && reregistrations == other.reregistrations
            && reregistrationWindow == other.reregistrationWindow && receiptCreated == other.receiptCreated
            && receiptNotBefore == other.receiptNotBefore && receiptExpires == other.receiptExpires
    }

    /// The risk fields as the store contract gives them; nil without a dated receipt.
    var risk: KeyRisk? {
        guard receiptCreated != 0 else { return nil }
        return KeyRisk(
            metric: riskMetric == Self.noMetric ? nil : riskMetric, stale: flags & Self.flagStale != 0,
            receiptCreatedMillis: Int64(receiptCreated) * 1000,
            notBeforeMillis: receiptNotBefore == 0 ? nil : Int64(receiptNotBefore) * 1000,
            expiresMillis: receiptExpires == 0 ? nil : Int64(receiptExpires) * 1000,
            nextRefreshMillis: nextRefresh == 0 ? nil : Int64(nextRefresh) * 1000)
    }
}

/// A time for a risk field: Unix seconds, rounded up (a not-before or next refresh is never moved
/// earlier), 0 for none.
@inline(__always) func riskSeconds(_ millis: Int64?) -> UInt32 {
    guard let millis, millis > 0 else { return 0 }
    return UInt32(clamping: (millis + 999) / 1000)
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
            (
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
    }

    var token: ChallengeToken {
        let (a, b) = (a, b)
        let out = ByteArrays.make(capacity: Self.byteCount) { buffer in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            raw.storeBytes(of: a.littleEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: b.littleEndian, toByteOffset: 8, as: UInt64.self)
            return Self.byteCount
        }
        return ChallengeToken(out)!
    }

    static func == (l: ChallengeBits, r: ChallengeBits) -> Bool { (l.a ^ r.a) | (l.b ^ r.b) == 0 }

    /// Hashed by `b` alone: every token a table holds was drawn from the CSPRNG by the store
    /// (`ShardState.newToken`; a snapshot gives back tokens drawn so), so tokens sharing `b` are as
    /// rare as a 64-bit collision; `a`'s low bits name the shard and are the same for every token of
    /// one.
    func hash(into hasher: inout Hasher) { hasher.combine(b) }

    /// What a `Dictionary` uses: `b`, already uniformly random and chosen by no client (a client can
    /// only look tokens up, which costs the probe run where the looked-up token falls, as with any
    /// hash), mixed with the table's seed by a multiply (an odd factor: a bijection of `b`'s low bits,
    /// which pick the bucket) instead of SipHash rounds. Lookups, insertions and the re-placing of
    /// neighbours after a removal each hash.
    func _rawHashValue(seed: Int) -> Int {
        Int(truncatingIfNeeded: (b ^ UInt64(truncatingIfNeeded: seed)) &* 0x9E37_79B9_7F4A_7C15)
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
/// 0 = empty, linear probing, load ≤ 3/4). A removed key (idle eviction, a registration taken back)
/// leaves no tombstone: its slot is closed by backward shifting and the last record moves into its
/// place (`remove(at:)`).
struct ShardState {
    static let chunkShift = 9
    static let chunkSize = 1 << chunkShift

    var chunks: ContiguousArray<ContiguousArray<KeyRecord>> = []
    var count = 0
    var slots: ContiguousArray<UInt32> = ContiguousArray(repeating: 0, count: 16)
    var strings: ContiguousArray<String> = []
    var stringIndex: [String: UInt32] = [:]
    var challenges: [ChallengeBits: ChallengeEntry] = [:]
    /// The anonymous challenges (no key, or a key not registered when issued), by expiry: exactly
    /// one item per such entry, so its count is the shard's anonymous count.
    var expiries = ExpiryHeap()
    /// The key-bound challenges (bound to a registered key), by expiry. An item whose challenge was
    /// replaced under the per-key limit stays behind (stale, skipped) until the heap is compacted.
    var boundExpiries = ExpiryHeap()
    var boundCount = 0
    /// Per registered key, its key-bound challenges in this shard, oldest first: the per-key limit.
    /// A ring exists only while it holds a challenge.
    var rings: [KeyBits: KeyRing] = [:]
    /// The random words of the key-bound challenges issued in this shard (drawn under its lock).
    var random = RandomWords()
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

    /// Removes the record at `index`: the one primitive for taking a key out of the table (a
    /// registration taken back, an idle key evicted, a journaled removal replayed). Its slot is
    /// freed by backward shifting (linear probing keeps no tombstones: the entries after it in its
    /// probe run move up so every lookup still finds them) and the last record moves into its place
    /// (its slot repointed), so records stay dense.
    mutating func remove(at index: Int) {
        let mask = slots.count - 1
        func slot(of index: Int) -> Int {
            var i = slotHash(record(at: index).key) & mask
            while Int(slots[i]) != index + 1 { i = (i + 1) & mask }
            return i
        }
        var hole = slot(of: index)
        var j = hole
        while true {
            j = (j + 1) & mask
            if slots[j] == 0 { break }
            let home = slotHash(record(at: Int(slots[j] - 1)).key) & mask
            // The entry at j may fill the hole if its home is not cyclically in (hole, j].
            let inRange = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j)
            if !inRange {
                slots[hole] = slots[j]
                hole = j
            }
        }
        slots[hole] = 0
        let last = count - 1
        if index != last {
            let moved = record(at: last)
            slots[slot(of: last)] = UInt32(index + 1)
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
        if rings.capacity > 1024 && rings.count * 8 < rings.capacity {
            rings = Dictionary(uniqueKeysWithValues: rings.lazy.map { ($0.key, $0.value) })
        }
        expiries.shrinkIfSparse()
        boundExpiries.shrinkIfSparse()
    }

    /// Adds an anonymous challenge that is known not to be present.
    mutating func addChallenge(_ entry: ChallengeEntry) {
        challenges[entry.token] = entry
        expiries.push(ExpiryItem(expiresAt: entry.expiresAt, token: entry.token))
    }

    // MARK: - Challenge budgets (docs/store.md, "Challenge budgets")

    /// Adds a key-bound challenge that is known not to be present, at the end of its key's ring
    /// (which has room). `ring`: the ring's position in `rings` when the caller holds it (found
    /// since the last change to the table of rings), else it is looked up.
    mutating func addBoundChallenge(_ entry: ChallengeEntry, chained: Bool, ring: Dictionary<KeyBits, KeyRing>.Index? = nil) {
        challenges[entry.token] = entry
        boundExpiries.push(ExpiryItem(expiresAt: entry.expiresAt, token: entry.token))
        boundCount += 1
        if let ring {
            rings.values[ring].append(entry.token, chained: chained, consumed: entry.consumed)
        } else {
            rings[entry.boundKey, default: KeyRing()].append(entry.token, chained: chained, consumed: entry.consumed)
        }
    }

    /// Marks a live challenge consumed, in the table and, for a key-bound one, in its key's ring
    /// (which then picks it first to make room without looking the ring's tokens up).
    mutating func markConsumed(_ token: ChallengeBits) {
        guard let i = challenges.index(forKey: token) else { return }
        markConsumed(at: i)
    }

    /// `markConsumed` for the challenge at `i` in `challenges` (a position found since the table's
    /// last insertion or removal): the entry is changed where it lies.
    mutating func markConsumed(at i: Dictionary<ChallengeBits, ChallengeEntry>.Index) {
        challenges.values[i].consumed = true
        let entry = challenges.values[i]
        // Through the ring's position (the subscript by key would move the ring out and back).
        if entry.hasBoundKey, let r = rings.index(forKey: entry.boundKey) { rings.values[r].markConsumed(entry.token) }
    }

    /// A token for a new challenge of shard `index` (of `mask` + 1): 128 random bits from this
    /// shard's words, the low bits of the first word replaced by the index, none in use here.
    mutating func newToken(shard index: Int, mask: UInt64) -> ChallengeBits {
        var token: ChallengeBits
        repeat {
            token = ChallengeBits(a: random.draw() & ~mask | UInt64(index), b: random.draw())
        } while challenges.index(forKey: token) != nil
        return token
    }

    /// Inserts an anonymous challenge, first evicting the oldest anonymous ones while `limit` are
    /// held. Returns how many were evicted.
    mutating func insertAnonymous(_ entry: ChallengeEntry, limit: Int) -> Int {
        var evicted = 0
        while expiries.count >= limit, let oldest = expiries.pop() {
            challenges.removeValue(forKey: oldest.token)
            evicted += 1
        }
        addChallenge(entry)
        return evicted
    }

    /// Inserts a challenge bound to a registered key: first the key's ring makes room (at most
    /// `perKey`: the oldest consumed challenge goes first, then the oldest asked for at the endpoint,
    /// then the oldest), then the shard's key-bound budget (`limit`: the oldest key-bound challenge
    /// goes). Returns the challenges replaced under the per-key limit (and of them the unconsumed
    /// ones: a consumed one is only removed early) and those evicted from the budget.
    mutating func insertBound(_ entry: ChallengeEntry, chained: Bool, perKey: Int, limit: Int)
        -> (replaced: Int, replacedUnused: Int, evicted: Int)
    {
        var replaced = 0
        var unused = 0
        var evicted = 0
        // The key's ring found once and made room in where it lies (no lookup per replacement; an
        // emptied ring stays, the new challenge goes into it below, through the same position
        // unless the budget's eviction changed the table of rings).
        var ring = rings.index(forKey: entry.boundKey)
        if let i = ring {
            (replaced, unused) = Self.makeRoom(in: &rings.values[i], perKey: perKey, challenges: &challenges)
            boundCount -= replaced
        }
        while boundCount >= limit, evictOldestBound() {
            evicted += 1
            ring = nil
        }
        addBoundChallenge(entry, chained: chained, ring: ring)
        if replaced > 0 { compactBoundExpiriesIfStale() }
        return (replaced, unused, evicted)
    }

    /// Replaces challenges of `ring` while it holds `perKey` (in `KeyRing.victim`'s order), each
    /// removed from `challenges` too. Returns (replaced, of which unconsumed).
    @inline(__always)
    static func makeRoom(
        in ring: inout KeyRing, perKey: Int, challenges: inout [ChallengeBits: ChallengeEntry]
    ) -> (Int, Int) {
        var replaced = 0
        var unused = 0
        while Int(ring.count) >= perKey {
            let victim = ring.victim()
            if !ring.isConsumed(victim) { unused += 1 }
            challenges.removeValue(forKey: ring[victim])
            _ = ring.remove(at: victim)
            replaced += 1
        }
        return (replaced, unused)
    }

    /// Removes the oldest key-bound challenge (skipping stale heap items); false when there is none.
    mutating func evictOldestBound() -> Bool {
        while let item = boundExpiries.pop() {
            guard let (key, slot) = boundSlot(item.token) else { continue }
            removeBound(item.token, key: key, slot: slot)
            return true
        }
        return false
    }

    /// The ring slot of a live key-bound challenge, or nil (a stale heap item).
    func boundSlot(_ token: ChallengeBits) -> (KeyBits, Int)? {
        guard let entry = challenges[token], entry.hasBoundKey, let slot = rings[entry.boundKey]?.slot(of: token) else {
            return nil
        }
        return (entry.boundKey, slot)
    }

    /// Removes a key-bound challenge and its ring slot (its heap item goes stale).
    mutating func removeBound(_ token: ChallengeBits, key: KeyBits, slot: Int) {
        challenges.removeValue(forKey: token)
        boundCount -= 1
        if rings[key]!.remove(at: slot) == 0 { rings.removeValue(forKey: key) }
    }

    /// Drops stale items once they outnumber the live key-bound challenges (amortized O(1) per
    /// replacement), so the heap holds at most 2 × the key-bound budget + 64 items.
    mutating func compactBoundExpiriesIfStale() {
        guard boundExpiries.count > 2 * boundCount + 64 else { return }
        let live = self
        boundExpiries.rebuild { live.boundSlot($0.token) != nil }
    }

    /// Removes the challenges whose expiry is at or before `nowMillis` from both budgets. Returns
    /// (removed, of which unconsumed).
    mutating func sweepChallenges(nowMillis: Int64) -> (removed: Int, unused: Int) {
        var r = 0
        var u = 0
        while let top = expiries.top, top.expiresAt <= nowMillis {
            _ = expiries.pop()
            if let entry = challenges.removeValue(forKey: top.token) {
                r += 1
                if !entry.consumed { u += 1 }
            }
        }
        while let top = boundExpiries.top, top.expiresAt <= nowMillis {
            _ = boundExpiries.pop()
            guard let (key, slot) = boundSlot(top.token) else { continue }
            if challenges[top.token]?.consumed == false { u += 1 }
            removeBound(top.token, key: key, slot: slot)
            r += 1
        }
        return (r, u)
    }

    /// Bytes held for challenges: tables and heaps at their current capacities (docs/store.md).
    var challengeBytes: Int {
        ChallengeMemory.tableBytes(capacity: challenges.capacity, entryStride: ChallengeMemory.challengeSlot)
            + ChallengeMemory.tableBytes(capacity: rings.capacity, entryStride: ChallengeMemory.ringSlot)
            + (expiries.capacity + boundExpiries.capacity) * MemoryLayout<ExpiryItem>.stride
    }
}

/// A registered key's key-bound challenges in one shard, oldest first: at most `maxSlots`, inline.
struct KeyRing {
    /// Eight: a device with a counter window keeps one live challenge per request in flight
    /// (docs/store.md, "Challenge budgets"); `store.max_challenges_per_key` picks 1…8 of them.
    static let maxSlots = 8

    private var slots = (
        ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0),
        ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0), ChallengeBits(a: 0, b: 0)
    )
    private(set) var count: UInt8 = 0
    /// Bit i: slot i was issued with a verified response (`ChallengeRequest.chained`).
    private var chainedBits: UInt8 = 0
    /// Bit i: slot i's challenge was consumed (`ShardState.markConsumed`), as its entry says.
    private var consumedBits: UInt8 = 0

    subscript(i: Int) -> ChallengeBits {
        get {
            precondition(i >= 0 && i < Self.maxSlots)
            return withUnsafeBytes(of: slots) { $0.load(fromByteOffset: i &* MemoryLayout<ChallengeBits>.stride, as: ChallengeBits.self) }
        }
        set {
            precondition(i >= 0 && i < Self.maxSlots)
            withUnsafeMutableBytes(of: &slots) {
                $0.storeBytes(of: newValue, toByteOffset: i * MemoryLayout<ChallengeBits>.stride, as: ChallengeBits.self)
            }
        }
    }

    func isChained(_ i: Int) -> Bool { chainedBits & (1 << i) != 0 }
    func isConsumed(_ i: Int) -> Bool { consumedBits & (1 << i) != 0 }

    /// Marks `token`'s slot consumed (nothing when the ring does not hold it).
    mutating func markConsumed(_ token: ChallengeBits) {
        if let i = slot(of: token) { consumedBits |= 1 << i }
    }

    /// `bits` without bit `i`: the bits above it move down one.
    @inline(__always)
    static func removingBit(_ bits: UInt8, at i: Int) -> UInt8 {
        let below: UInt8 = (1 << UInt8(i)) &- 1
        return bits & below | (bits >> 1) & ~below
    }

    mutating func append(_ token: ChallengeBits, chained: Bool, consumed: Bool = false) {
        let i = Int(count)
        precondition(i < Self.maxSlots, "a key ring holds at most \(Self.maxSlots) challenges")
        self[i] = token
        if chained { chainedBits |= 1 << i } else { chainedBits &= ~(1 << i) }
        if consumed { consumedBits |= 1 << i } else { consumedBits &= ~(1 << i) }
        count += 1
    }

    /// Removes slot `i` (later slots move up, in one move); returns the new count.
    mutating func remove(at i: Int) -> Int {
        let n = Int(count)
        precondition(i >= 0 && i < n, "no slot \(i) in a ring of \(n)")
        let stride = MemoryLayout<ChallengeBits>.stride
        if i + 1 < n {
            withUnsafeMutableBytes(of: &slots) { raw in
                let base = raw.baseAddress!
                (base + i * stride).copyMemory(from: base + (i + 1) * stride, byteCount: (n - 1 - i) * stride)
            }
        }
        // The bits above `i` move down one; those at and above n - 1 were clear and stay clear.
        chainedBits = Self.removingBit(chainedBits, at: i)
        consumedBits = Self.removingBit(consumedBits, at: i)
        count -= 1
        return Int(count)
    }

    func slot(of token: ChallengeBits) -> Int? {
        let n = Int(count)
        return withUnsafeBytes(of: slots) { raw in
            for i in 0..<n where raw.load(fromByteOffset: i * MemoryLayout<ChallengeBits>.stride, as: ChallengeBits.self) == token {
                return i
            }
            return nil
        }
    }

    /// Which slot makes room: the oldest consumed one, else the oldest asked for at the endpoint,
    /// else the oldest.
    func victim() -> Int {
        // Bits at and above `count` are clear in `consumedBits` and `chainedBits` (append and
        // remove keep them so).
        if consumedBits != 0 { return consumedBits.trailingZeroBitCount }
        let unchained = ~chainedBits & UInt8(truncatingIfNeeded: (1 << Int(count)) - 1)
        if unchained != 0 { return unchained.trailingZeroBitCount }
        return 0
    }
}

/// How the challenge side's memory is counted and bounded (docs/store.md, "Challenge memory").
public enum ChallengeMemory {
    /// One slot of the challenge table: token (key) and entry (value).
    static var challengeSlot: Int { MemoryLayout<ChallengeBits>.stride + MemoryLayout<ChallengeEntry>.stride }
    /// One slot of a shard's ring table: key id (key) and ring (value).
    static var ringSlot: Int { MemoryLayout<KeyBits>.stride + MemoryLayout<KeyRing>.stride }

    /// A Swift dictionary keeps its slots in a power-of-two table at most ¾ full, plus one bit of
    /// occupancy per slot: the slot count for a table whose `capacity` is given.
    static func buckets(capacity: Int) -> Int {
        guard capacity > 0 else { return 0 }
        var b = 2
        while b * 3 / 4 < capacity { b *= 2 }
        return b
    }

    static func tableBytes(capacity: Int, entryStride: Int) -> Int {
        let b = buckets(capacity: capacity)
        return b * entryStride + (b + 7) / 8
    }

    /// The most the challenge side can hold, in bytes, for `limits` over `shards` shards: per shard
    /// a challenge table for its anonymous and key-bound budgets, a ring table for as many keys as
    /// key-bound challenges, an anonymous heap of at most its budget and a key-bound heap of at most
    /// 2 × its budget + 65 items, each heap at up to twice its items' size (array growth).
    public static func bound(_ limits: ChallengeLimits, shards: Int) -> Int {
        let a = limits.anonymousPerShard(shards)
        let k = limits.keyBoundPerShard(shards)
        let heapItem = MemoryLayout<ExpiryItem>.stride
        let perShard =
            tableBytes(capacity: a + k, entryStride: challengeSlot)
            + tableBytes(capacity: k, entryStride: ringSlot)
            + 2 * a * heapItem + 2 * (2 * k + 65) * heapItem
        return perShard * shards
    }
}

/// A binary min-heap on expiry, so a sweep touches only what expired.
struct ExpiryHeap {
    private(set) var items: ContiguousArray<ExpiryItem> = []

    var top: ExpiryItem? { items.first }

    var count: Int { items.count }
    var capacity: Int { items.capacity }

    mutating func shrinkIfSparse() {
        if items.capacity > 1024 && items.count * 8 < items.capacity { items = ContiguousArray(items) }
    }

    /// Keeps the items `keep` accepts, in heap order again (bottom-up, O(n)).
    mutating func rebuild(keeping keep: (ExpiryItem) -> Bool) {
        var kept = ContiguousArray<ExpiryItem>()
        kept.reserveCapacity(items.count / 2)
        for item in items where keep(item) { kept.append(item) }
        items = kept
        var i = items.count / 2 - 1
        while i >= 0 {
            siftDown(i)
            i -= 1
        }
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        let n = items.count
        while true {
            let l = 2 * i + 1
            let r = l + 1
            var m = i
            if l < n && items[l].expiresAt < items[m].expiresAt { m = l }
            if r < n && items[r].expiresAt < items[m].expiresAt { m = r }
            if m == i { return }
            items.swapAt(i, m)
            i = m
        }
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
