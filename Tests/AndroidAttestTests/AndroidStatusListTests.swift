import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

@Suite("Google's attestation status list")
struct AndroidStatusListTests {
    static func hexSerial(_ c: X509Certificate) -> String {
        let s = Hex.encode(c.serialNumber.magnitude)
        let t = s.drop { $0 == "0" }
        return t.isEmpty ? "0" : String(t)
    }

    @Test("the real snapshot parses: 467 entries, REVOKED, hex and decimal keys")
    func snapshot() throws {
        let list = AndroidVector.statusList
        #expect(list.entries.count == 467)
        #expect(list.entries.values.allSatisfy { $0.status == "REVOKED" })
        #expect(list.entries["c35747a084470c3135aeefe2b8d40cd6"] == .init(status: "REVOKED", reason: "KEY_COMPROMISE"))
        #expect(list.entries["6681152659205225093"] != nil)
    }

    @Test("a serial is listed by its lowercase hex or its decimal, never by a leading zero")
    func lookup() {
        let list = AttestationStatusList(entries: [
            "C35747A084470C3135AEEFE2B8D40CD6": .init(status: "SUSPENDED", reason: nil),
            "6681152659205225093": .init(status: "REVOKED", reason: "KEY_COMPROMISE"),
        ])
        let hex = Hex.decode("c35747a084470c3135aeefe2b8d40cd6")!
        #expect(list.entry(serial: (false, hex))?.entry.status == "SUSPENDED")
        // 6681152659205225093 = 0x5cb838f1fe157a85
        #expect(list.entry(serial: (false, Hex.decode("5cb838f1fe157a85")!))?.key == "6681152659205225093")
        #expect(list.entry(serial: (false, Hex.decode("00c35747a084470c3135aeefe2b8d40cd6")!)) != nil)
        #expect(list.entry(serial: (false, [0x01])) == nil)
        #expect(list.entry(serial: (true, hex)) == nil)
    }

    @Test("no real valid chain is listed in the snapshot; each of its certificates, listed, is revoked")
    func revokedRealChain() throws {
        let v = try #require(AndroidVector.valid.first { $0.name == "keyattestation:TEE_EC_RKP.pem" })
        let chain = try v.chain.map { try X509Certificate(der: $0) }
        for (i, cert) in chain.enumerated() {
            let list = AttestationStatusList(entries: [Self.hexSerial(cert): .init(status: "REVOKED", reason: "KEY_COMPROMISE")])
            #expect(throws: AndroidAttestError(.revoked, "")) {
                try AndroidAttestationVerifier().verify(chain: v.chain, challenge: v.challenge, at: v.instant, statusList: list)
            }
            _ = i
        }
    }

    @Test(
        "what is not the list's JSON is a parse error with a reason",
        arguments: [
            "", "[]", "{}", #"{"entries": []}"#, #"{"entries": {"zz": {"status": "REVOKED"}}}"#, #"{"entries": {"01": {"reason": "X"}}}"#,
            #"{"entries": {"01": "REVOKED"}}"#,
        ])
    func badJSON(_ text: String) {
        #expect(throws: AttestationStatusList.ParseError.self) { try AttestationStatusList.parse(json: Array(text.utf8)) }
    }
}
