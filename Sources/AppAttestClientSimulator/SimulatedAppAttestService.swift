import AppAttest
import AppAttestClient
import AppAttestSimulator
import Foundation
import GatewayWire

/// The simulator's software device (`SimulatedDevice`, attested under a `TestCA`) as the client's
/// App Attest service: what `DCAppAttestService` is on an iPhone, for Linux and for tests. A gateway
/// accepts its keys only when it trusts the test CA's root (`trust.extra_roots`).
///
/// Keys live as long as this object (the device's Secure Enclave): a client created again with the
/// same service and the same `KeyIDStore` finds its key, as an app does after a relaunch.
/// `invalidateKeys()` plays a reinstall or a restore onto another device: every key is gone and the
/// next use answers `AppAttestServiceError.invalidKey`.
///
/// `environment` defaults to `.production`, as the gateway's `apps[].environments` and `attest-sim`
/// do: a gateway left at its defaults accepts the keys of a simulator left at its own. A key of an
/// environment the gateway does not list is refused at registration with `environment_mismatch`.
public final class SimulatedAppAttestService: AppAttestService, @unchecked Sendable {
    public let appID: AppID
    public let environment: AttestEnvironment
    public let ca: TestCA
    private let lock = NSLock()
    private var devices: [String: SimulatedDevice] = [:]
    private var supported: Bool
    private var attestFailures: [AppAttestServiceError] = []
    private var counters: [(keyID: String, counter: UInt32)] = []
    private var attestations = 0

    public init(appID: String, environment: AttestEnvironment = .production, ca: TestCA, isSupported: Bool = true) throws {
        self.appID = try AppID(appID)
        self.environment = environment
        self.ca = ca
        self.supported = isSupported
    }

    public var isSupported: Bool { locked { supported } }

    public func generateKey() async throws -> String {
        try locked {
            guard supported else { throw AppAttestServiceError.unsupported }
            let device = SimulatedDevice(appID: appID, environment: environment, ca: ca)
            let keyID = Base64.encode(device.keyID)
            devices[keyID] = device
            return keyID
        }
    }

    public func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try locked {
            if !attestFailures.isEmpty { throw attestFailures.removeFirst() }
            guard let d = devices[keyID] else { throw AppAttestServiceError.invalidKey }
            attestations += 1
            return Data(try d.attest(clientDataHash: Array(clientDataHash)))
        }
    }

    public func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try locked {
            guard let d = devices[keyID] else { throw AppAttestServiceError.invalidKey }
            let a = d.makeAssertion(clientDataHash: Array(clientDataHash))
            counters.append((keyID, a.counter))
            return Data(a.bytes)
        }
    }

    // MARK: - What tests play and observe

    /// Every key is gone (a reinstall, a restore onto another device).
    public func invalidateKeys() { locked { devices.removeAll() } }

    /// Whether App Attest is supported from now on.
    public func setSupported(_ value: Bool) { locked { supported = value } }

    /// The next `attestKey` calls fail with these errors, in order (e.g. `.serverUnavailable`).
    public func failNextAttestations(_ errors: [AppAttestServiceError]) { locked { attestFailures += errors } }

    /// The counter of each assertion generated, in the order generated.
    public var assertionCounters: [(keyID: String, counter: UInt32)] { locked { counters } }

    /// `attestKey` calls that reached a key.
    public var attestationCount: Int { locked { attestations } }

    /// The key ids this device holds.
    public var keyIDs: Set<String> { locked { Set(devices.keys) } }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}
