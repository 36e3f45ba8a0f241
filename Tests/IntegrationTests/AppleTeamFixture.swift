import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import Testing

/// A test CA the gateway trusts (attestations and receipts) and the team's key for Apple's
/// services as Apple hands it out (`AuthKey_KEY1234567.p8`, mode 0600), with the stand-in for
/// Apple's services (`attest-sim apple`) that knows that key: what the Apple-side integration tests
/// (risk metric, DeviceCheck) start from.
struct AppleTeamFixture {
    static let teamID = "ABCDE12345"
    static let keyID = "KEY1234567"
    let ca: TestCA
    let dir: URL
    let teamKey = ECPrivateKey(curve: .p256)
    let keyPath: String

    init(_ prefix: String) throws {
        (ca, dir) = try makeTrustedTestCADirectory(prefix)
        keyPath = dir.appendingPathComponent("AuthKey_\(Self.keyID).p8").path
        #expect(
            FileManager.default.createFile(
                atPath: keyPath, contents: Data(teamKey.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600]))
    }

    /// The stand-in, started (stop it); `notBefore`: the seconds from a RECEIPT's creation to its not-before.
    func standIn(notBefore: Int64 = 86_400) throws -> AppleStandIn {
        try AppleStandIn(
            options: .init(teamID: Self.teamID, keyID: Self.keyID, teamKey: teamKey.p256PublicKey!, receiptNotBeforeSeconds: notBefore),
            ca: ca, workDirectory: dir)
    }
}
