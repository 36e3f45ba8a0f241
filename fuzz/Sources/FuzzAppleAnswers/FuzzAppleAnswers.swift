// libFuzzer target: what Apple's services answer the gateway, read as the gateway reads it.
//   - App Attest's data service (the risk metric's receipt refresh): RiskRefresher.interpret's steps,
//     on public functions: a non-200 status with its Retry-After (RiskSchedule.retryAfterSeconds:
//     delta-seconds or an HTTP-date), or a 200 body trimmed, base64-decoded and verified as a RECEIPT
//     of the key (ReceiptVerifier); then RiskSchedule.decide over the key's stored risk.
//   - DeviceCheck (validate, query, update): DeviceCheck.decide(status, body, Retry-After) and the
//     query's bits (DeviceCheck.parseBits); an upstream's X-Device-Check-Update (parseUpdate) and a
//     device's X-Apple-Device-Token (tokenBytes) on the header text.
//
// Input: [service] [status index] [header text] 0x00 [body]. Service: even the data service, odd
// DeviceCheck (service / 2 % 3: validate, query, update). The status comes from a table of the ones
// that mean something and some that do not. Fixed context: FuzzSupport's ReceiptContext. FUZZ_PRINT=1
// prints each refresh decision on stderr.
//
// Properties checked (a violation traps):
//   1. Nothing crashes.
//   2. Retry-After: nil or ≥ 0 seconds; a pause is between 1 s and 1 h.
//   3. Refresh: only a 200 whose body verifies refreshes (storing the receipt, with its metric at most
//      KeyRisk.maxMetric); every decision that writes the key's risk schedules the next refresh after
//      now (never in the past: no refresh loop); a refresh with a pause writes nothing.
//   4. DeviceCheck: bits only for a 200 query, equal to parseBits' (or never set); a 200 to validate or
//      update is ok without refusal; any other result refuses; only 429 and 5xx pause with Retry-After.
//   5. parseUpdate names at least one bit when it names any; tokenBytes gives 16 bytes or more.
import AppAttest
import Foundation
import FuzzSupport
import GatewayPolicy
import GatewayStore
import GatewayWire

let statuses = [200, 304, 400, 401, 403, 404, 429, 500, 502, 503, 599, 204, 301, 0, 99, 199, 600, 999, -1]
let keyID: KeyID = {
    guard let k = KeyID((0..<32).map { UInt8($0) }) else { fuzzFail("key id") }
    return k
}()
let schedule = RiskSchedule.Settings(refreshMillis: 86_400_000, staleProbeMillis: 3_600_000)
let stored = KeyRisk(
    metric: 1, receiptCreatedMillis: ReceiptContext.nowMillis - 86_400_000, notBeforeMillis: ReceiptContext.nowMillis - 1000,
    expiresMillis: ReceiptContext.nowMillis + 90 * 86_400_000, nextRefreshMillis: ReceiptContext.nowMillis)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput.bytes(data, size)
    guard input.count >= 2 else { return 0 }
    let service = input[0]
    let status = statuses[Int(input[1]) % statuses.count]
    let rest = input[2...]
    let split = rest.firstIndex(of: 0) ?? rest.endIndex
    let header = String(decoding: rest[..<split], as: UTF8.self)
    let body = Array(rest[split...].dropFirst())
    let retryAfter = RiskSchedule.retryAfterSeconds(header, nowMillis: ReceiptContext.nowMillis)
    if let r = retryAfter, r < 0 { fuzzFail("Retry-After \(header.debugDescription) read as \(r) s") }
    if service & 1 == 0 {
        refresh(status: status, retryAfter: retryAfter, body: body)
    } else {
        deviceCheck(DeviceCheck.Call.allCases[Int(service >> 1) % 3], status: status, retryAfter: retryAfter, body: body)
        headers(header)
    }
    return 0
}

/// RiskRefresher.interpret: the answer, as the refresher reads the response.
func answer(status: Int, retryAfter: Int64?, body: [UInt8]) -> RiskSchedule.Answer {
    guard status == 200 else { return .status(status, retryAfterSeconds: retryAfter) }
    let text = String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard let bytes = try? Base64.decode(text), !bytes.isEmpty else { return .invalidReceipt("the 200 body is not a base64 receipt") }
    do {
        let verified = try ReceiptContext.verifier.verify(bytes, expecting: ReceiptContext.expectation, at: ReceiptContext.instant)
        return .receipt(verified.receipt)
    } catch {
        guard !error.detail.isEmpty else { fuzzFail("a receipt refusal without detail") }
        return .invalidReceipt(error.description)
    }
}

func refresh(status: Int, retryAfter: Int64?, body: [UInt8]) {
    let a = answer(status: status, retryAfter: retryAfter, body: body)
    let now = ReceiptContext.nowMillis
    let d = RiskSchedule.decide(a, keyID: keyID, current: stored, nowMillis: now, settings: schedule)
    if FuzzSupport.printOutcome { FileHandle.standardError.write(Data("\(status): \(d.result) \(a)\n".utf8)) }
    if case .receipt(let r) = a {
        guard d.result == .refreshed, d.storeReceipt, let risk = d.risk else { fuzzFail("a verified receipt did not refresh: \(d)") }
        guard risk.metric ?? 0 <= KeyRisk.maxMetric, risk.receiptCreatedMillis == r.creationTime.millis else {
            fuzzFail("refreshed risk \(risk)")
        }
    } else if d.storeReceipt || d.result == .refreshed {
        fuzzFail("\(a) stored a receipt")
    }
    if let risk = d.risk {
        guard let next = risk.nextRefreshMillis, next > now else {
            fuzzFail("\(d.result) schedules the next refresh at \(String(describing: risk.nextRefreshMillis)), now \(now)")
        }
        guard d.pause == nil else { fuzzFail("\(d.result) writes the risk and pauses") }
    }
    if case .retryAfter(let ms)? = d.pause, !(1000...3_600_000).contains(ms) { fuzzFail("a pause of \(ms) ms") }
}

func deviceCheck(_ call: DeviceCheck.Call, status: Int, retryAfter: Int64?, body: [UInt8]) {
    let d = DeviceCheck.decide(call, status: status, body: body, retryAfterSeconds: retryAfter)
    guard DeviceCheck.decide(call, status: status, body: body, retryAfterSeconds: retryAfter) == d else {
        fuzzFail("decide is not deterministic")
    }
    if let bits = d.bits {
        guard status == 200, call == .query else { fuzzFail("bits from a \(status) to \(call)") }
        if let b = bits, DeviceCheck.parseBits(body) != b {
            fuzzFail("bits \(b), parseBits \(String(describing: DeviceCheck.parseBits(body)))")
        }
    } else if status == 200 && call == .query && d.result != .error {
        fuzzFail("a 200 query without bits: \(d)")
    }
    if status == 200 && call != .query {
        guard d.result == .ok, d.refusal == nil else { fuzzFail("a 200 to \(call) is \(d)") }
    }
    if d.result != .ok && d.result != .bitsNotFound && d.refusal == nil { fuzzFail("\(d.result) without a refusal") }
    if case .some(.some(let ms)) = d.pause {
        guard status == 429 || (500...599).contains(status), (1000...3_600_000).contains(ms) else {
            fuzzFail("a pause of \(ms) ms after \(status)")
        }
    }
}

func headers(_ text: String) {
    if let update = DeviceCheck.parseUpdate(text) {
        guard update.bit0 != nil || update.bit1 != nil else { fuzzFail("an update naming no bit") }
        let merged = DeviceCheck.merged(update, over: DeviceCheck.Bits(bit0: true, bit1: false))
        guard merged.bit0 == update.bit0 ?? true, merged.bit1 == update.bit1 ?? false else { fuzzFail("merged \(merged)") }
    }
    if let token = DeviceCheck.tokenBytes(text), token.count < 16 { fuzzFail("a device token of \(token.count) bytes") }
}
