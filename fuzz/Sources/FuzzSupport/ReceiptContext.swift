import AppAttest
import Foundation
import GatewayWire

/// The fixed context of the receipt targets (FuzzReceipt, FuzzAppleAnswers), from
/// Tests/AppAttestTests/Vectors/receipts-veehaitch-devicecheck-appattest.json, case
/// veehaitch-ios-14.4-receipt-db4be8c9 (a RECEIPT from Apple's data service, which verifies):
/// what RiskRefresher expects of a refreshed receipt (app id, the key, RECEIPT, at most 5 minutes
/// old), at the case's instant.
public enum ReceiptContext {
    public static let appID: AppID = {
        do { return try AppID("6MURL8TA57.de.vincent-haupert.apple-appattest-poc") } catch { fuzzFail("app id: \(error)") }
    }()
    /// The attested key, an uncompressed P-256 point.
    public static let attestedKey: [UInt8] = {
        do { return try Base64.decode("BIjANKGQqn28WgYVAcZUKAOUJYIZiz8cxUZzyjua0gtBUoJnpU9f26BGn6+0a7aZCjlr8E+UpJ1DIMgcerJAo5g=") } catch {
            fuzzFail("key: \(error)")
        }
    }()
    public static let maxAgeMillis: Int64 = 5 * 60_000
    public static let expectation = ReceiptVerifier.Expectation(
        appID: appID, attestedKey: .publicKey(attestedKey), kind: .receipt, maxAgeMillis: maxAgeMillis)
    /// 2021-01-23T12:26:42Z.
    public static let instant = Date(timeIntervalSince1970: 1_611_404_802)
    public static var nowMillis: Int64 { Int64(instant.timeIntervalSince1970 * 1000) }
    public static let verifier = ReceiptVerifier()
}
