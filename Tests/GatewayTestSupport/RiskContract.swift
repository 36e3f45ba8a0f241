import GatewayStore
import Testing

/// Blocking forms of the `RiskRefreshStore` calls and the contract every store keeps (memory with a
/// data directory, Redis, Redis Cluster).
extension RiskRefreshStore {
    public func claim(now: Int64, lease: Int64 = 60_000, limit: Int = 100, budget: Int = 1 << 20) throws -> DueRefreshes {
        try wait { claimDueRefreshes(nowMillis: now, leaseMillis: lease, limit: limit, scanBudget: budget, completion: $0) }.get()
    }

    public func candidate(_ id: KeyID) throws -> RefreshCandidate? {
        try wait { refreshCandidate(id, completion: $0) }.get()
    }

    public func record(_ update: RiskUpdate) throws -> RiskUpdateOutcome {
        try wait { recordRefresh(update, completion: $0) }.get()
    }
}

/// A record whose registration carries a dated receipt (`record.risk`), first refreshed at `next`.
public func withRisk(_ record: DeviceKeyRecord, created: Int64, notBefore: Int64? = nil, expires: Int64?, next: Int64?)
    -> DeviceKeyRecord
{
    var r = record
    r.risk = KeyRisk(receiptCreatedMillis: created, notBeforeMillis: notBefore, expiresMillis: expires, nextRefreshMillis: next)
    return r
}

/// The risk refresh contract, on a store holding no key. `t0` must be a whole second (the memory
/// store keeps seconds). Returns key `a` (refreshed, receipt `[7, 7, 7, 7]`, metric 3) for the
/// caller's own checks (restart, compaction).
@discardableResult
public func checkRiskRefresh(
    _ store: any AttestStore & RiskRefreshStore, rng: inout SeededRandom, t0: Int64
) throws -> DeviceKeyRecord {
    let day: Int64 = 86_400_000
    let a = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: t0 + 90 * day, next: t0 + 10_000)
    let b = makeRecord(&rng, seen: t0)  // no dated receipt: never refreshed
    let c = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: nil, next: t0 + 100_000)
    func register(_ r: DeviceKeyRecord, _ receipt: [UInt8], at now: Int64) throws -> RegistrationOutcome {
        try store.registerNow(r, receipt: receipt, challenge: try store.issue(.register, key: r.keyID, now: now).token, now: now)
    }
    #expect(try register(a, [1, 1, 1], at: t0) == .registered(existing: false))
    #expect(try register(b, [2, 2], at: t0) == .registered(existing: false))
    #expect(try register(c, [3, 3, 3, 3, 3], at: t0) == .registered(existing: false))

    #expect(try store.key(a.keyID)?.risk == a.risk)
    #expect(try store.key(b.keyID)?.risk == nil)
    #expect(try store.candidate(b.keyID) == nil)

    // Due at t0 + 10 s, not before; claimed for the lease, then due again once it ran out.
    #expect(try store.claim(now: t0 + 9_000).keys.isEmpty)
    let first = try store.claim(now: t0 + 10_000, lease: 60_000)
    #expect(first.keys == [a.keyID])
    #expect(first.oldestDueMillis == t0 + 10_000)
    #expect(try store.claim(now: t0 + 11_000).keys.isEmpty)
    #expect(try store.claim(now: t0 + 70_000, lease: 60_000).keys == [a.keyID])

    let sent = try #require(try store.candidate(a.keyID))
    #expect(sent.receipt == [1, 1, 1])
    #expect(sent.record.publicKey == a.publicKey && sent.record.appID == a.appID && sent.record.environment == a.environment)
    #expect(sent.risk.receiptCreatedMillis == t0)

    // A new receipt with a metric: stored in place of the old one.
    let t1 = t0 + 200_000
    let refreshed = KeyRisk(
        metric: 3, receiptCreatedMillis: t1, notBeforeMillis: t1 + day, expiresMillis: t1 + 90 * day, nextRefreshMillis: t1 + day)
    #expect(try store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0, receipt: [7, 7, 7, 7], risk: refreshed)) == .stored)
    #expect(try store.key(a.keyID)?.risk == refreshed)
    #expect(try store.candidate(a.keyID)?.receipt == [7, 7, 7, 7])
    // The schedule follows: not due before t1 + 1 day.
    #expect(try store.claim(now: t1 + day - 1_000).keys == [c.keyID])
    #expect(try store.claim(now: t1 + day, lease: 60_000).keys == [a.keyID])

    // A refresh that started from the old receipt writes nothing; nor one for a key that is gone.
    var late = refreshed
    late.metric = 9
    #expect(try store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0, receipt: [8], risk: late)) == .superseded)
    #expect(try store.key(a.keyID)?.risk?.metric == 3)
    #expect(try store.candidate(a.keyID)?.receipt == [7, 7, 7, 7])
    let gone = makeRecord(&rng, seen: t0).keyID
    #expect(try store.record(RiskUpdate(keyID: gone, basedOnCreatedMillis: t0, receipt: nil, risk: refreshed)) == .keyGone)

    // Apple no longer answers for the receipt (404): the metric stays, stale, the receipt too.
    var stale = refreshed
    stale.stale = true
    stale.nextRefreshMillis = t1 + 3 * day
    #expect(try store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t1, receipt: nil, risk: stale)) == .stored)
    #expect(try store.key(a.keyID)?.risk == stale)
    #expect(try store.candidate(a.keyID)?.receipt == [7, 7, 7, 7])

    // The key registers again: its new receipt's dates, its metric kept, no longer stale.
    let t2 = t1 + 2 * day
    let again = withRisk(a, created: t2, expires: t2 + 90 * day, next: t2 + 5_000)
    #expect(try register(again, [4, 4], at: t2) == .registered(existing: true))
    let after = try #require(try store.key(a.keyID)?.risk)
    #expect(after.metric == 3 && !after.stale)
    #expect(after.receiptCreatedMillis == t2 && after.expiresMillis == t2 + 90 * day && after.nextRefreshMillis == t2 + 5_000)
    #expect(try store.candidate(a.keyID)?.receipt == [4, 4])

    // At most `limit` keys per claim.
    let both = try store.claim(now: t2 + 10_000, limit: 1)
    #expect(both.keys.count == 1)
    #expect(try store.claim(now: t2 + 10_000, limit: 5).keys.count == 1)
    var out = a
    out.risk = after
    return out
}
