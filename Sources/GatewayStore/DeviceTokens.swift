import Synchronization

/// What claiming a DeviceCheck device token found (`AttestStore.claimToken`).
public enum TokenClaimOutcome: Sendable, Equatable {
    /// The token was not claimed within its ttl: it is now, until `nowMillis + ttlMillis`.
    case claimed
    /// A live claim of the token exists (claimed earlier, by this gateway or another one of the
    /// fleet): a replay. Nothing changed.
    case alreadyClaimed
    /// The memory store holds `maxTokens` live claims (its shard of them is full): nothing changed,
    /// no live claim is forgotten early to make room.
    case capacity(maxTokens: Int)
}

/// A device token's claim, as the memory store keeps it: the first 16 bytes of the token's
/// SHA-256 (128 bits: collisions are not a concern) and the claim's expiry (Unix ms).
struct DeviceTokenClaim: Equatable {
    var a: UInt64
    var b: UInt64
    var expiresMillis: Int64

    var bits: DeviceTokenBits { DeviceTokenBits(a: a, b: b) }
}

struct DeviceTokenBits: Hashable {
    var a: UInt64
    var b: UInt64

    init(a: UInt64, b: UInt64) {
        self.a = a
        self.b = b
    }

    /// nil unless `digest` is 32 bytes (a SHA-256).
    init?(digest: [UInt8]) {
        guard digest.count == 32 else { return nil }
        (a, b) = digest.withUnsafeBytes { raw in
            (
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
    }
}

/// The memory store's DeviceCheck token claims (docs/store.md, "Device token claims"): sharded like
/// the challenges (a token's first 8 digest bytes pick its shard), each shard a table of live
/// claims behind its own `Mutex`, bounded to its share of `maxTokens` (rounded up). A full shard
/// drops its expired claims; if it is still full the claim is refused (`.capacity`).
final class DeviceTokenTable: Sendable {
    /// The bound of the replay cache DeviceCheck's fallback had per process: 262,144 live tokens.
    static let defaultMaxTokens = 262_144

    struct Shard {
        var claims: [DeviceTokenBits: Int64] = [:]
        /// No claim expires before this (Int64.max: none held).
        var earliest = Int64.max

        /// Drops claims whose expiry is at or before `nowMillis`; returns how many.
        mutating func sweep(nowMillis: Int64) -> Int {
            guard earliest <= nowMillis else { return 0 }
            let before = claims.count
            claims = claims.filter { $0.value > nowMillis }
            earliest = claims.values.min() ?? .max
            return before - claims.count
        }

        /// Sets the claim (replay and restore: the later expiry wins). True when it is new.
        mutating func place(_ bits: DeviceTokenBits, until expires: Int64) -> Bool {
            let old = claims[bits]
            claims[bits] = max(old ?? .min, expires)
            earliest = min(earliest, expires)
            return old == nil
        }
    }

    final class Box: Sendable {
        let state = Mutex(Shard())
    }

    let shards: [Box]
    let mask: UInt64
    let maxTokens: Int
    let perShard: Int
    let live = Atomic<Int>(0)

    init(shards count: Int, maxTokens: Int = DeviceTokenTable.defaultMaxTokens, restoring claims: [DeviceTokenClaim] = []) {
        shards = (0..<count).map { _ in Box() }
        mask = UInt64(count - 1)
        self.maxTokens = maxTokens
        perShard = (maxTokens + count - 1) / count
        var placed = 0
        for c in claims {
            let new = shards[Int(c.a & mask)].state.withLock { $0.place(c.bits, until: c.expiresMillis) }
            if new { placed += 1 }
        }
        live.store(placed, ordering: .relaxed)
    }

    @inline(__always) func shard(_ bits: DeviceTokenBits) -> Box { shards[Int(bits.a & mask)] }

    /// Every claim held (expired ones the sweep has not dropped yet included), for a snapshot. Each
    /// shard is copied under its lock, after the journal rotation (see `writeSnapshot`).
    func copy() -> [DeviceTokenClaim] {
        var out: [DeviceTokenClaim] = []
        for box in shards {
            box.state.withLock { s in
                for (bits, expires) in s.claims { out.append(DeviceTokenClaim(a: bits.a, b: bits.b, expiresMillis: expires)) }
            }
        }
        return out
    }

    /// Drops expired claims (cheap while none expired: one comparison per shard).
    func sweep(nowMillis: Int64) {
        var removed = 0
        for box in shards { removed += box.state.withLock { $0.sweep(nowMillis: nowMillis) } }
        if removed > 0 { live.wrappingSubtract(removed, ordering: .relaxed) }
    }
}

extension MemoryAttestStore {
    /// Claims held now (expired ones not yet swept included): at most `maxDeviceTokens`.
    public var liveDeviceTokens: Int { deviceTokens.live.load(ordering: .relaxed) }

    /// The bound on live claims (262,144).
    public var maxDeviceTokens: Int { deviceTokens.maxTokens }

    /// One step under the token's shard lock: a live claim answers `.alreadyClaimed`; a full shard
    /// drops its expired claims, then answers `.capacity` if still full; otherwise (with a data
    /// directory) the claim's journal record is written (`write(2)`, like a counter advance) and only
    /// then is the claim stored and answered. A failed write stores nothing (`.unavailable`).
    public func claimToken(
        _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void
    ) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        guard let bits = DeviceTokenBits(digest: digest) else {
            return completion(
                .failure(StoreError(.unavailable, "a device token digest is a SHA-256 (32 bytes), not \(digest.count) bytes")))
        }
        let (sum, overflow) = nowMillis.addingReportingOverflow(max(1, ttlMillis))
        let expires = overflow ? Int64.max : sum
        let table = deviceTokens
        let journal = journal
        let result = table.shard(bits).state.withLock { s -> Result<TokenClaimOutcome, StoreError> in
            let held = s.claims[bits]
            if let held, held > nowMillis { return .success(.alreadyClaimed) }
            if held == nil && s.claims.count >= table.perShard {
                let removed = s.sweep(nowMillis: nowMillis)
                if removed > 0 { table.live.wrappingSubtract(removed, ordering: .relaxed) }
                if s.claims.count >= table.perShard { return .success(.capacity(maxTokens: table.maxTokens)) }
            }
            do {
                try journal?.appendClaim(DeviceTokenClaim(a: bits.a, b: bits.b, expiresMillis: expires))
            } catch {
                return .failure(StoreError.from(error))
            }
            // An expired claim of the same token (not swept yet) is replaced: not counted twice.
            if s.claims.updateValue(expires, forKey: bits) == nil { table.live.wrappingAdd(1, ordering: .relaxed) }
            s.earliest = min(s.earliest, expires)
            return .success(.claimed)
        }
        completion(result)
    }

    /// Forgets the claim in memory. Not journaled: after a crash the journal's claim record brings
    /// it back (a released token stays refused until its ttl ends: the safe direction); after a
    /// clean stop the final snapshot holds what memory held.
    public func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        guard let bits = DeviceTokenBits(digest: digest) else { return completion(.success(())) }
        let table = deviceTokens
        table.shard(bits).state.withLock { s in
            if s.claims.removeValue(forKey: bits) != nil { table.live.wrappingSubtract(1, ordering: .relaxed) }
        }
        completion(.success(()))
    }
}
