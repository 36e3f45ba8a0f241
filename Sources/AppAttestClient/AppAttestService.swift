import Foundation

/// The device's App Attest service, as `DCAppAttestService` offers it: one protocol so that the
/// client runs on a real device (`DeviceCheckAppAttestService`, Apple platforms) and on Linux with
/// the simulator's software device (`SimulatedAppAttestService` in `AppAttestClientSimulator`).
///
/// Key ids are the base64 strings `generateKey` returns. Implementations report the errors the
/// client acts on as `AppAttestServiceError`; anything else is passed through to the app.
public protocol AppAttestService: Sendable {
    /// Whether this device can attest keys (`DCAppAttestService.isSupported`).
    var isSupported: Bool { get }

    /// Creates a key in the device's Secure Enclave; returns its key id (base64).
    func generateKey() async throws -> String

    /// Asks Apple to attest the key over `clientDataHash` (32 bytes); returns the attestation object.
    func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data

    /// Signs `clientDataHash` (32 bytes) with the key, incrementing its counter; returns the
    /// assertion object.
    func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data
}

/// The errors of an App Attest service that the client handles itself (`DCError` codes).
public enum AppAttestServiceError: Error, Sendable, Equatable {
    /// App Attest is not available on this device (`DCError.featureUnsupported`).
    case unsupported
    /// The key is gone or unusable (`DCError.invalidKey`: e.g. the app was reinstalled or restored
    /// onto another device while its key id survived): the client generates and registers a new key.
    case invalidKey
    /// Apple's attestation service cannot be reached (`DCError.serverUnavailable`): try again later
    /// with the same key.
    case serverUnavailable
    /// The service refused its input (`DCError.invalidInput`).
    case invalidInput
}
