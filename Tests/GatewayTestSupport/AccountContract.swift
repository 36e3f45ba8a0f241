import GatewayStore
import Testing

/// Blocking forms of the `AccountStore` calls and the keys-per-account contract every store keeps
/// (memory, with and without a data directory; Redis).
extension AccountStore {
    public func associateNow(_ id: KeyID, _ account: [UInt8], now: Int64, window: Int64) throws -> AccountAssociationOutcome {
        try wait { associate(id, account: account, nowMillis: now, windowMillis: window, completion: $0) }.get()
    }

    public func accountKeys(_ account: [UInt8], now: Int64, window: Int64) throws -> Int {
        try wait { accountKeyCount(account: account, nowMillis: now, windowMillis: window, completion: $0) }.get()
    }
}

/// The contract, on a store holding no key and no association. `t0` must be a whole second (the
/// memory store keeps seconds). Returns the keys it registered and the two accounts (`a`: keys 0
/// and 3 after the window moved on; `b`: key 1), for the caller's own checks (restart).
@discardableResult
/// `register`: how the store takes a key (default `registerFresh`; Redis Cluster binds the challenge).
public func checkAccounts(
    _ store: any AttestStore & AccountStore, rng: inout SeededRandom, t0: Int64,
    register: ((DeviceKeyRecord) throws -> Void)? = nil
) throws -> (keys: [DeviceKeyRecord], a: [UInt8], b: [UInt8]) {
    let window: Int64 = 3_600_000
    let keys = (0..<4).map { _ in makeRecord(&rng, seen: t0) }
    for k in keys {
        if let register { try register(k) } else { try store.registerFresh(k, now: t0) }
    }
    let a = tokenDigest(&rng)
    let b = tokenDigest(&rng)

    // Distinct keys: three keys of account a count 1, 2, 3; the first again stays at 3.
    #expect(try store.associateNow(keys[0].keyID, a, now: t0, window: window) == .recorded(keyCount: 1, moved: false))
    #expect(try store.associateNow(keys[1].keyID, a, now: t0 + 1_000, window: window) == .recorded(keyCount: 2, moved: false))
    #expect(try store.associateNow(keys[2].keyID, a, now: t0 + 2_000, window: window) == .recorded(keyCount: 3, moved: false))
    #expect(try store.associateNow(keys[0].keyID, a, now: t0 + 3_000, window: window) == .recorded(keyCount: 3, moved: false))
    #expect(try store.accountKeys(a, now: t0 + 3_000, window: window) == 3)
    // The key record carries the account's SHA-256 and the count its latest association left.
    #expect(try store.key(keys[2].keyID)?.account == KeyAccount(digest: a, keyCount: 3, associatedMillis: t0 + 2_000))
    #expect(try store.key(keys[0].keyID)?.account == KeyAccount(digest: a, keyCount: 3, associatedMillis: t0 + 3_000))
    #expect(try store.key(keys[3].keyID)?.account == nil)

    // Re-association: key 1 moves to account b; a no longer counts it.
    #expect(try store.associateNow(keys[1].keyID, b, now: t0 + 4_000, window: window) == .recorded(keyCount: 1, moved: true))
    #expect(try store.accountKeys(a, now: t0 + 4_000, window: window) == 2)
    #expect(try store.accountKeys(b, now: t0 + 4_000, window: window) == 1)
    #expect(try store.key(keys[1].keyID)?.account == KeyAccount(digest: b, keyCount: 1, associatedMillis: t0 + 4_000))

    // A key that is not registered: nothing stored.
    let stranger = makeRecord(&rng, seen: t0)
    #expect(try store.associateNow(stranger.keyID, a, now: t0 + 5_000, window: window) == .keyGone)
    #expect(try store.accountKeys(a, now: t0 + 5_000, window: window) == 2)

    // The window: an hour after key 0's last association (t0 + 3 s), a's older keys no longer count.
    let later = t0 + 3_000 + window + 1_000
    #expect(try store.accountKeys(a, now: later, window: window) == 0)
    #expect(try store.associateNow(keys[3].keyID, a, now: later, window: window) == .recorded(keyCount: 1, moved: false))
    #expect(try store.associateNow(keys[0].keyID, a, now: later + 1_000, window: window) == .recorded(keyCount: 2, moved: false))
    #expect(try store.accountKeys(a, now: later + 1_000, window: window) == 2)
    // Within a longer window they all count again (the sets keep what the last trim left).
    #expect(try store.accountKeys(b, now: later, window: 2 * window) == 1)

    // Not a SHA-256: refused, nothing stored.
    let bad = wait { store.associate(keys[3].keyID, account: [1, 2, 3], nowMillis: later, windowMillis: window, completion: $0) }
    #expect(throws: StoreError.self) { try bad.get() }
    return (keys, a, b)
}
