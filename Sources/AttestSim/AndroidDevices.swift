import AndroidAttest
import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire

/// The platform of a simulated device: an iPhone (App Attest) or an Android phone (Keystore key
/// attestation, docs/android.md).
public enum Platform: String, Sendable, CaseIterable {
    case ios
    case android
}

/// `--platform ios|android|both` of `run`, `attack` and `presign`.
public enum PlatformChoice: String, Sendable, CaseIterable {
    case ios
    case android
    case both

    public var platforms: [Platform] {
        switch self {
        case .ios: [.ios]
        case .android: [.android]
        case .both: [.ios, .android]
        }
    }

    public static func parse(_ text: String) throws(AttestSimError) -> PlatformChoice {
        guard let p = PlatformChoice(rawValue: text) else { throw .usage("--platform must be ios, android or both (got \"\(text)\")") }
        return p
    }
}

/// The Android app the simulated Android devices run: its package name and the SHA-256 of its
/// signing certificate, written into each key's attestation (the gateway's `apps[].android`
/// `package_names` and `signing_cert_sha256` must list them).
public struct AndroidApp: Sendable, Equatable {
    public var packageName: String
    public var signingCertificateSHA256: [UInt8]

    /// What `--signing-cert-sha256` defaults to: SHA-256 of "attest-sim signing certificate"
    /// (`attest-sim ca` prints it in its gateway.yaml lines).
    public static let defaultSigningCertificateSHA256 = SHA256.hash(Array("attest-sim signing certificate".utf8))

    public init(packageName: String, signingCertificateSHA256: [UInt8] = AndroidApp.defaultSigningCertificateSHA256) {
        self.packageName = packageName
        self.signingCertificateSHA256 = signingCertificateSHA256
    }

    /// `--package` (default: the bundle id of `--app-id`) and `--signing-cert-sha256` (64 hex digits).
    public static func parse(package: String?, appID: AppID, signingCertSHA256: String?) throws(AttestSimError) -> AndroidApp {
        let name = package ?? appID.bundleID
        let segments = name.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count >= 2,
            segments.allSatisfy({ s in
                guard let f = s.first, f.isASCII, f.isLetter else { return false }
                return s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
            })
        else {
            throw .usage("--package must be an Android package name such as com.example.shop (got \"\(name)\")")
        }
        var signer = defaultSigningCertificateSHA256
        if let text = signingCertSHA256 {
            guard text.count == 64, let bytes = Hex.decode(text.lowercased()) else {
                throw .usage("--signing-cert-sha256 must be 64 hex digits (got \"\(text)\")")
            }
            signer = bytes
        }
        return AndroidApp(packageName: name, signingCertificateSHA256: signer)
    }

    /// The `apps[]` entry lines `attest-sim ca` prints and docs/attest-sim.md shows.
    public var yaml: String {
        "android: {package_names: [\(packageName)], signing_cert_sha256: [\"\(Hex.encode(signingCertificateSHA256))\"]}"
    }
}

/// A simulated Android phone running the app: a `SimulatedAndroidDevice` and the KeyDescription it
/// attests with (a test or attack adjusts it before registering).
/// Not thread-safe (its counter); one device per task.
public final class AndroidSimDevice {
    public let device: SimulatedAndroidDevice
    public var keyDescription: SimulatedKeyDescription

    public init(device: SimulatedAndroidDevice, app: AndroidApp) {
        self.device = device
        keyDescription = device.keyDescription(packageName: app.packageName, signingCertificateSHA256: app.signingCertificateSHA256)
    }

    /// A phone with a fresh key attested under `ca` at `securityLevel`.
    public convenience init(ca: TestAndroidCA, app: AndroidApp, securityLevel: SecurityLevel = .trustedEnvironment) throws(AttestSimError) {
        self.init(device: try Self.makeDevice(ca: ca, securityLevel: securityLevel), app: app)
    }

    static func makeDevice(ca: TestAndroidCA, securityLevel: SecurityLevel) throws(AttestSimError) -> SimulatedAndroidDevice {
        do {
            return try SimulatedAndroidDevice(ca: ca, securityLevel: securityLevel)
        } catch {
            throw .file("the Android CA cannot issue an attestation certificate: \(error)")
        }
    }

    public var keyID: [UInt8] { device.keyID }
    public var counter: UInt32 { device.counter }
}

/// A simulated device of either platform, as the runners hold them.
public enum SimDevice {
    case ios(SimulatedDevice)
    case android(AndroidSimDevice)

    public var platform: Platform {
        switch self {
        case .ios: .ios
        case .android: .android
        }
    }

    public var keyID: [UInt8] {
        switch self {
        case .ios(let d): d.keyID
        case .android(let d): d.keyID
        }
    }

    /// The registration of the device's key over `challenge`.
    public func registration(paths: GatewayPaths, challenge: String) throws(AttestSimError) -> HTTPRequest {
        switch self {
        case .ios(let d):
            let attestation: [UInt8]
            do {
                attestation = try d.attest(clientDataHash: ClientData.registrationHash(challenge: challenge))
            } catch {
                throw .file("the CA cannot issue a credential certificate: \(error)")
            }
            return GatewayRequests.register(paths: paths, keyID: d.keyID, attestation: attestation, challenge: challenge)
        case .android(let d):
            return try GatewayRequests.registerAndroid(paths: paths, device: d, challenge: challenge)
        }
    }

    /// A protected request of the device (its next counter), as `GatewayRequests.protected` builds one.
    public func protected(
        challenge: String?, method: String, target: String, body: [UInt8], binding: Binding, version: ClientDataVersion,
        host: RequestHost, account: String? = nil
    ) -> HTTPRequest {
        switch self {
        case .ios(let d):
            GatewayRequests.protected(
                device: d, challenge: challenge, method: method, target: target, body: body, binding: binding, version: version,
                host: host, account: account)
        case .android(let d):
            GatewayRequests.protected(
                android: d, challenge: challenge, method: method, target: target, body: body, binding: binding, version: version,
                host: host, account: account)
        }
    }
}

extension GatewayRequests {
    /// `POST <register path>` with `{"platform":"android","keyId","attestation":[DER…, leaf first],"challenge"}`;
    /// the Keystore attests `attested` (default: the challenge's UTF-8 bytes, as the contract says).
    public static func registerAndroid(
        paths: GatewayPaths, device: AndroidSimDevice, challenge: String, attested: [UInt8]? = nil, keyID: [UInt8]? = nil
    ) throws(AttestSimError) -> HTTPRequest {
        let chain: [[UInt8]]
        do {
            chain = try device.device.attest(challenge: attested ?? Array(challenge.utf8), keyDescription: device.keyDescription)
        } catch {
            throw .file("the Android CA cannot issue the key's certificate: \(error)")
        }
        var o = JSONObject()
        o.set("platform", "android")
        o.set("keyId", Base64.encode(keyID ?? device.keyID))
        o.set("attestation", .array(chain.map { .string(Base64.encode($0)) }))
        o.set("challenge", challenge)
        return HTTPRequest(
            method: "POST", target: paths.register, headers: [("Content-Type", "application/json")], body: Array(o.description.utf8))
    }

    /// A protected request of an Android device: the same client data and headers as an iPhone's,
    /// `X-App-Assertion` the base64 of CBOR `{"counter","signature"}` over `counter ‖ SHA256(clientData)`.
    /// `counter` (default: the device's next) and `signer` (default: the device's key) forge one;
    /// then the device's counter does not move.
    public static func protected(
        android device: AndroidSimDevice, challenge: String?, method: String, target: String, body: [UInt8], binding: Binding,
        version: ClientDataVersion = .v2, host: RequestHost, counter: UInt32? = nil, signer: ECPrivateKey? = nil,
        account: String? = nil
    ) -> HTTPRequest {
        let clientData = binding.clientData(
            challenge: challenge, method: method, target: target, body: body, version: version, authority: host.authority)
        let hash = SHA256.hash(clientData)
        let assertion =
            counter != nil || signer != nil
            ? device.device.makeAssertion(clientDataHash: hash, counter: counter ?? device.counter &+ 1, signingKey: signer).encoded
            : device.device.assert(clientDataHash: hash)
        return signed(
            keyID: device.keyID, challenge: challenge, assertion: assertion, method: method, target: target, body: body, host: host,
            account: account)
    }
}
