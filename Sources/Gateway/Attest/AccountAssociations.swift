import AppAttest
import GatewayCrypto
import GatewayPolicy
import GatewayProxy
import GatewayStore

/// Keys per account (issue 27; docs/verification.md, "Keys per account"): the upstream's answer to
/// a verified request may name the key's account (`X-App-Attest-Account`); the gateway stores the
/// association (the account's SHA-256, never the id) and the account's distinct key count with the
/// key (`AccountStore`), and a route's `max_keys_per_account` flags or refuses the key's later
/// requests (`RouteVerdict`). The field never reaches the client (`AccountResponseField`).
extension GatewayRouter {
    /// How long an association of the same account is not written again: a backend that names the
    /// account on every response costs one store write per key per minute, not one per request.
    static let accountRewriteMillis: Int64 = 60_000

    /// The verified request's tap: the upstream's account id checked (1 to 128 visible ASCII
    /// characters, else ignored and counted), hashed, and associated with the key after the head,
    /// without holding the response.
    func accountTap(_ a: AcceptedAssertion, route: String, runtime rt: GatewayRuntime) -> AccountFieldTap? {
        guard let store = attest.accountStore else { return nil }
        let metrics = attest.metrics
        let window = rt.accountWindowMillis
        let keyID = a.keyID
        let current = a.account
        return AccountFieldTap { value in
            guard AccountHeader.isValid(value) else { return metrics.accountHeaderInvalid() }
            let digest = SHA256.hash(value)
            let now = AttestContext.nowMillis()
            if let current, current.digest == digest, now - current.associatedMillis < Self.accountRewriteMillis { return }
            store.associate(keyID, account: digest, nowMillis: now, windowMillis: window) { result in
                switch result {
                case .success(.recorded(let n, let moved)):
                    metrics.accountAssociation(result: moved ? "moved" : "recorded", keyCount: n)
                case .success(.keyGone):
                    metrics.accountAssociation(result: "key_gone")
                case .success(.capacity(let max)):
                    metrics.accountAssociation(result: "capacity")
                    GatewayEvents.log(
                        "warning", "a key's account was not recorded: the store holds its maximum of associations",
                        [("route", route), ("max_associations", String(max))])
                case .failure(let e):
                    metrics.accountAssociation(result: "store_error")
                    GatewayEvents.log(
                        "warning", "a key's account could not be recorded", [("route", route), ("detail", e.detail)])
                }
            }
        }
    }

    /// Why a verified request is refused (or flagged) for its account's keys: what `explain` shows.
    static func accountExplanation(_ a: AcceptedAssertion, route: RoutePolicy, windowMillis: Int64) -> Explanation {
        var e = Explanation(step: "account", error: .accountKeyLimit)
        e.add("key_id", a.keyID.description)
        e.add("app_id", a.appID)
        if let account = a.account {
            e.add("account_sha256", account.digestHex)
            e.add("account_keys", String(account.keyCount))
            e.add("associated", RFC3339.format(millis: account.associatedMillis))
        }
        e.add("window", durationText(millis: windowMillis))
        if let max = route.maxKeysPerAccount { e.add("max_keys_per_account", String(max)) }
        e.add("on_keys", route.onKeys.rawValue)
        return e
    }
}
