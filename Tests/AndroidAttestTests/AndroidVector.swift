import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

/// The real Android chains of `Vectors/android-*.json` (Vectors/README.md), read from the source tree.
struct AndroidVector: Sendable, CustomTestStringConvertible {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Vectors")

    let file: String
    let index: Int
    let name: String
    let chain: [[UInt8]]
    let challenge: [UInt8]
    let expect: String
    let reason: String?
    let instant: Date
    let fields: [String: any Sendable]

    var testDescription: String { "\(file)#\(index) \(name) → \(expect)\(reason.map { " (\($0))" } ?? "")" }

    /// The code `reason` names: its first word (`chain_untrusted (aosp_software_attestation_root)`).
    var expectedCode: AndroidAttestError.Code? {
        guard expect == "invalid", let reason else { return nil }
        return AndroidAttestError.Code(rawValue: String(reason.prefix { $0 != " " }))
    }

    func string(_ key: String) -> String? { fields[key] as? String }
    func int(_ key: String) -> Int? { fields[key] as? Int }
    func strings(_ key: String) -> [String] { fields[key] as? [String] ?? [] }
    var quirks: [String] { strings("quirks") }
    var rootOfTrust: (state: String?, locked: Bool?) {
        let r = fields["root_of_trust"] as? [String: any Sendable]
        // JSON booleans come back from JSONSerialization as numbers.
        return (r?["verified_boot_state"] as? String, (r?["device_locked"] as? Int).map { $0 != 0 })
    }

    static let all: [AndroidVector] = {
        let files = try! FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
            $0.hasPrefix("android-") && $0.hasSuffix(".json")
        }
        .sorted()
        var out: [AndroidVector] = []
        for f in files {
            let data = try! Data(contentsOf: directory.appendingPathComponent(f))
            let obj = try! JSONSerialization.jsonObject(with: data) as! [String: Any]
            for (i, c) in (obj["cases"] as! [[String: Any]]).enumerated() {
                let time = ISO8601DateFormatter().date(from: c["verification_time"] as! String)!
                out.append(
                    AndroidVector(
                        file: f, index: i, name: c["name"] as! String,
                        chain: (c["chain_b64_der_leaf_first"] as! [String]).map { try! Base64.decode($0) },
                        challenge: try! Base64.decode(c["challenge_b64"] as! String), expect: c["expect"] as! String,
                        reason: c["reason"] as? String, instant: time, fields: c.mapValues(sendable)))
            }
        }
        return out
    }()

    static var valid: [AndroidVector] { all.filter { $0.expect == "valid" } }

    private static func sendable(_ v: Any) -> any Sendable {
        switch v {
        case let s as String: return s
        case let n as NSNumber: return n.intValue
        case let a as [Any]: return a.map(sendable) as [any Sendable]
        case let d as [String: Any]: return d.mapValues(sendable)
        case is NSNull: return Optional<Int>.none as any Sendable
        default: return String(describing: v)
        }
    }

    /// Google's status list snapshot (2024-11-21) and roots, as published.
    static var statusList: AttestationStatusList {
        try! AttestationStatusList.parse(json: Array(try! Data(contentsOf: directory.appendingPathComponent("status-list-snapshot.json"))))
    }
    static var googleRoots: [X509Certificate] {
        try! X509Certificate.parsePEM(
            String(contentsOf: directory.appendingPathComponent("google-hardware-attestation-roots.pem"), encoding: .utf8))
    }
}
