import AppAttest
import Foundation
import GatewayWire

/// The real-device vectors, read from the source tree (tests always run from a checkout).
public let vectorsDirectory: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("AppAttestTests/Vectors")

/// The repository root, for samples and the built products.
public let repositoryRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// One case of `Tests/AppAttestTests/Vectors/appattest-*.json` (real iPhone output published by nine projects; see Vectors/README.md).
public struct VectorCase: Sendable, CustomStringConvertible {
    public let file: String
    public let json: [String: any Sendable]

    public var name: String { json["name"] as! String }
    public var kind: String { json["kind"] as! String }
    public var expect: String { json["expect"] as! String }
    public var description: String { "\(name) → \(expect)" }

    public func bytes(_ key: String) -> [UInt8] { try! Base64.decode(json[key] as! String) }
    public func string(_ key: String) -> String? { json[key] as? String }

    /// The vectors' README names failures its own way; this maps each to our stable code.
    public var expectedCode: AppAttestError.Code? {
        switch expect {
        case "valid": return nil
        case "invalid_nonce": return .nonceMismatch
        case "rp_id_mismatch": return .appIDMismatch
        case "key_id_mismatch": return .keyIDMismatch
        case "certificate_expired": return .certificateExpired
        case "certificate_not_yet_valid": return .certificateNotYetValid
        case "environment_mismatch": return .environmentMismatch
        case "invalid_format": return .unsupportedFormat
        case "invalid_signature": return .badSignature
        case "counter_not_increasing": return .counterReplay
        default: fatalError("vector \(name): unknown expect code \(expect)")
        }
    }

    public static let all: [VectorCase] = {
        let dir = vectorsDirectory
        let files = try! FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".json") }.sorted()
        var out: [VectorCase] = []
        for f in files {
            let data = try! Data(contentsOf: dir.appendingPathComponent(f))
            let obj = try! JSONSerialization.jsonObject(with: data) as! [String: Any]
            for c in obj["cases"] as! [[String: Any]] {
                out.append(VectorCase(file: f, json: c.mapValues { sendable($0) }))
            }
        }
        return out
    }()

    private static func sendable(_ v: Any) -> any Sendable {
        switch v {
        case let s as String: return s
        case let n as NSNumber: return n.intValue
        case is NSNull: return Optional<Int>.none as any Sendable
        default: return String(describing: v)
        }
    }

    public static var attestations: [VectorCase] { all.filter { $0.kind == "attestation" } }
    public static var assertions: [VectorCase] { all.filter { $0.kind == "assertion" } }
    /// The 20 real receipts of `receipts-veehaitch-devicecheck-appattest.json` (7 `ATTEST`, 13 `RECEIPT`).
    public static var receipts: [VectorCase] { all.filter { $0.kind == "receipt" } }

    /// Each distinct real attestation that carries a receipt (17: the Oliver-Binns one has none),
    /// as the first valid case holding it.
    public static var attestationsWithReceipts: [VectorCase] {
        var seen: Set<String> = []
        return attestations.filter { v in
            guard v.expect == "valid", (v.json["receipt_length"] as? Int ?? 0) > 0 else { return false }
            return seen.insert(v.string("attestation_b64")!).inserted
        }
    }

    public static func attestationCase(named name: String) -> VectorCase? { all.first { $0.name == name } }

    public var instant: Date { ISO8601DateFormatter().date(from: string("verification_time")!)! }
    /// An ISO 8601 time field with or without fraction digits (`creation_time` has 1 to 3).
    public func date(_ key: String) -> Date? {
        guard let text = string(key) else { return nil }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: text) ?? ISO8601DateFormatter().date(from: text)
    }
    public var appID: AppID { try! AppID(string("app_id")!) }
}
