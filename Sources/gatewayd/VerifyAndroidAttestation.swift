import AndroidAttest
import AppAttest
import ArgumentParser
import Foundation
import GatewayCrypto
import GatewayWire

struct VerifyAndroidAttestation: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-android-attestation",
        abstract: "Verify an Android hardware key attestation chain offline (Google's roots, the KeyDescription).",
        discussion: """
            --chain is the Keystore's chain, leaf first, root last: comma-separated B64 values, each \
            the standard or URL alphabet, padding optional, or @FILE (DER or base64 text); a single \
            @FILE of PEM certificates is the whole chain. Without --package and --signing-cert-sha256 \
            only the chain and its KeyDescription are checked; with them, the allow-lists too.
            Prints one JSON object: {"valid":true,…} and exits 0, or {"valid":false,"reason":"<code>","detail":"…"} \
            and exits 1. Usage errors exit 2.
            """
    )

    @Option(help: ArgumentHelp("The certificate chain, leaf first: B64,B64,… (or @PEM-FILE).", valueName: "B64,B64,…"))
    var chain: String

    @Option(help: ArgumentHelp("The challenge the server issued (the KeyDescription's attestationChallenge).", valueName: "B64"))
    var challenge: B64Argument

    @Option(name: .customLong("package"), help: ArgumentHelp("Allowed package name (repeatable).", valueName: "NAME"))
    var packages: [String] = []

    @Option(
        name: .customLong("signing-cert-sha256"),
        help: ArgumentHelp("Allowed SHA-256 of the app's signing certificate, hex (repeatable).", valueName: "HEX"))
    var signingCertificates: [String] = []

    @Option(
        name: .customLong("status-list"),
        help: ArgumentHelp("Google's attestation status list (JSON) to refuse revoked certificates.", valueName: "FILE"))
    var statusList: String?

    @Option(help: ArgumentHelp("Verification instant, ISO 8601 (default: now).", valueName: "ISO8601"))
    var at: String?

    @Option(
        name: .customLong("root"),
        help: ArgumentHelp("Extra trusted root, PEM file (repeatable); Google's roots stay trusted.", valueName: "PEM-FILE"))
    var roots: [String] = []

    private var instant = Date()
    private var extraRoots: [X509Certificate] = []
    private var digests: [[UInt8]] = []
    private var list: AttestationStatusList?

    enum CodingKeys: String, CodingKey {
        case chain, challenge, packages, signingCertificates, statusList, at, roots
    }

    mutating func validate() throws {
        if let at { instant = try parseInstant(at) }
        extraRoots = try loadRoots(roots)
        digests = try signingCertificates.map { (hex: String) throws -> [UInt8] in
            guard let d = Hex.decode(hex), d.count == 32 else {
                throw ValidationError("--signing-cert-sha256 \"\(hex)\" is not 64 hex digits")
            }
            return d
        }
        if let statusList {
            guard let data = FileManager.default.contents(atPath: statusList) else {
                throw ValidationError("--status-list \(statusList): cannot read the file")
            }
            do {
                list = try AttestationStatusList.parse(json: Array(data))
            } catch {
                throw ValidationError("--status-list \(statusList): \(error)")
            }
        }
        guard !chain.isEmpty else { throw ValidationError("--chain is empty") }
    }

    func run() throws {
        let result = Result { () throws(AndroidAttestError) -> JSONObject in
            let certificates = try Self.chainBytes(chain)
            let expected: [UInt8]
            do throws(AppAttestError) {
                expected = try challenge.decode("--challenge")
            } catch {
                throw AndroidAttestError(.malformed, error.detail)
            }
            let verified = try AndroidAttestationVerifier(extraRoots: extraRoots).verify(
                chain: certificates, challenge: expected, at: instant, statusList: list)
            if !packages.isEmpty || !digests.isEmpty {
                try AndroidAttestationPolicy.allowList(packageNames: packages, signingCertificateSHA256: digests).check(verified)
            }
            return Self.describe(verified)
        }
        try Verdict.emit(result.mapError { Verdict.Refusal(reason: $0.code.rawValue, detail: $0.detail) })
    }

    /// The chain's DER certificates: each comma-separated value a `B64Argument`, or one @FILE of PEM.
    static func chainBytes(_ text: String) throws(AndroidAttestError) -> [[UInt8]] {
        if text.hasPrefix("@"), !text.contains(","), let data = FileManager.default.contents(atPath: String(text.dropFirst())),
            String(decoding: data, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----")
        {
            do {
                return try X509Certificate.parsePEM(String(decoding: data, as: UTF8.self)).map(\.der)
            } catch {
                throw AndroidAttestError(.malformed, "--chain \(text): \(error)")
            }
        }
        var out: [[UInt8]] = []
        for (i, part) in text.split(separator: ",", omittingEmptySubsequences: false).enumerated() {
            do throws(AppAttestError) {
                out.append(try B64Argument(argument: String(part))!.decode("--chain certificate \(i)"))
            } catch {
                throw AndroidAttestError(.malformed, error.detail)
            }
        }
        return out
    }

    /// Every parsed field the verdict establishes, named as Android names them.
    static func describe(_ a: AndroidAttestation) -> JSONObject {
        var out = JSONObject()
        out.set("attestationVersion", a.attestationVersion)
        out.set("attestationSecurityLevel", a.attestationSecurityLevel.name)
        out.set("keymintVersion", a.keyMintVersion)
        out.set("keymintSecurityLevel", a.keyMintSecurityLevel.name)
        out.set("securityLevel", a.securityLevel.name)
        out.set("challenge", Base64.encode(a.challenge))
        out.set("keyId", Base64.encode(a.keyID))
        out.set("publicKey", a.publicKey.map { Base64.encode($0.x962) })
        out.set("leafKey", a.subjectPublicKeyInfo.algorithm)
        out.set("keyAlgorithm", a.key.algorithmName)
        out.set("ecCurve", a.key.ecCurveName)
        out.set("keySize", a.key.keySize.map { JSONObject.Value.int($0) } ?? .null)
        out.set("purposes", .array(a.key.purposeNames.map { .string($0) }))
        out.set("packageNames", .array(a.packageNames.map { .string($0) }))
        out.set("signingCertSha256", .array(a.signingCertificateDigests.map { .string(Hex.encode($0)) }))
        if let rot = a.rootOfTrust {
            var r = JSONObject()
            r.set("verifiedBootState", rot.verifiedBootState.name)
            r.set("deviceLocked", rot.deviceLocked)
            r.set("verifiedBootKey", Hex.encode(rot.verifiedBootKey))
            r.set("verifiedBootHash", rot.verifiedBootHash.map { Hex.encode($0) })
            out.set("rootOfTrust", .object(r))
        } else {
            out.set("rootOfTrust", .null)
        }
        for (key, value) in [
            ("osVersion", a.osVersion), ("osPatchLevel", a.osPatchLevel), ("vendorPatchLevel", a.vendorPatchLevel),
            ("bootPatchLevel", a.bootPatchLevel),
        ] {
            out.set(key, value.map { JSONObject.Value.int($0) } ?? .null)
        }
        out.set("root", a.anchor.name)
        out.set("attestKeyCertificates", a.attestKeyCertificateCount)
        out.set("chain", .array(a.chain.map { .string($0.subject) }))
        return out
    }
}
