import GatewayWire

/// What bounds the keys of a store (config `store.max_keys`, `store.max_reregistrations`,
/// `store.reregistration_window`, `store.key_idle_ttl`). Checked inside the registration's atomic
/// step, after the challenge: a refusal changes nothing (the challenge stays unconsumed).
public struct KeyLimits: Sendable, Equatable {
    /// Registered keys the store accepts; a new key beyond it is refused (`.keyCapacity`).
    public var maxKeys: Int
    /// Registrations of a key already registered, per window (1 to 255).
    public var maxReregistrations: Int
    /// The re-registration window: it starts with a key's first re-registration after the previous
    /// window ended (the memory store keeps it with one-second resolution).
    public var reregistrationWindowMillis: Int64
    /// Keys whose last registration or accepted assertion is this old are removed by
    /// `MemoryAttestStore.sweepIdleKeys` (journaled). nil: never (the default).
    public var keyIdleTTLMillis: Int64?

    public init(
        maxKeys: Int = KeyLimits.defaultMaxKeys, maxReregistrations: Int = 3,
        reregistrationWindowMillis: Int64 = 3_600_000, keyIdleTTLMillis: Int64? = nil
    ) {
        self.maxKeys = max(0, maxKeys)
        self.maxReregistrations = min(255, max(1, maxReregistrations))
        self.reregistrationWindowMillis = max(1_000, reregistrationWindowMillis)
        self.keyIdleTTLMillis = keyIdleTTLMillis.map { max(1_000, $0) }
    }

    /// The memory the default key cap is derived from: 1 GiB.
    public static let defaultMemoryBudget = 1 << 30
    /// What one key costs the memory store, rounded up from the measured 185.6 B per key at
    /// 1,000,000 keys with the 168-byte record (`bench/key-memory`; receipts are on disk or, without
    /// a data directory, not kept).
    public static let memoryBytesPerKey = 192
    /// `defaultMemoryBudget / memoryBytesPerKey` = 5,592,405 keys.
    public static let defaultMaxKeys = defaultMemoryBudget / memoryBytesPerKey

    /// What a key costs Redis besides its receipt: `MEMORY USAGE` of a key record is 928 B with a
    /// 1-byte receipt (a hash in `hashtable` encoding: the 65-byte point is over
    /// `hash-max-listpack-value`), plus its entry in the keyspace; rounded up.
    public static let redisBytesPerKeyWithoutReceipt = 1_280
    /// What a key costs Redis with a receipt of `receipt` bytes: the allocator rounds the
    /// receipt up by less than a quarter (jemalloc size classes); measured 21,400 B at 16 KiB.
    /// Operators size `store.max_keys` with it: what their `maxmemory` holds (docs/redis.md).
    public static func redisBytesPerKey(receipt: Int) -> Int {
        redisBytesPerKeyWithoutReceipt + max(0, receipt) * 5 / 4
    }
    /// The size Apple's attestation receipts have (3.6–4.0 KB), rounded up.
    public static let typicalReceiptBytes = 4_096
    /// The Redis memory the Redis store's default cap is derived from: 64 GiB. Larger than the
    /// memory store's budget on purpose: a fleet that upgrades without setting `store.max_keys`
    /// must not find registrations refused at a cap below what its Redis already holds; the cap
    /// that matters is `maxmemory`, which the operator sizes (and then sets `max_keys` from).
    public static let defaultRedisMemoryBudget = 64 << 30
    /// The Redis store's default cap: `defaultRedisMemoryBudget` over what a key with a real-size
    /// receipt costs Redis (1,280 B + 1.25 × 4,096 B = 6,400 B): 10,737,418 keys. It does not
    /// depend on `limits.max_receipt` (which bounds each receipt, not the fleet).
    public static let defaultRedisMaxKeys = defaultRedisMemoryBudget / redisBytesPerKey(receipt: typicalReceiptBytes)
}
