// Compiled only where DeviceCheck's App Attest exists (iOS 14, macOS 11, visionOS; the package's
// minimums). Not compiled on Linux: kept to one call and one error mapping per method.
#if canImport(DeviceCheck) && (os(iOS) || os(macOS) || os(visionOS))
    import DeviceCheck
    import Foundation

    /// `DCAppAttestService.shared` behind `AppAttestService`, with `DCError` codes mapped to
    /// `AppAttestServiceError`.
    public struct DeviceCheckAppAttestService: AppAttestService {
        public init() {}

        public var isSupported: Bool { DCAppAttestService.shared.isSupported }

        public func generateKey() async throws -> String {
            do {
                return try await DCAppAttestService.shared.generateKey()
            } catch {
                throw Self.mapped(error)
            }
        }

        public func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data {
            do {
                return try await DCAppAttestService.shared.attestKey(keyID, clientDataHash: clientDataHash)
            } catch {
                throw Self.mapped(error)
            }
        }

        public func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data {
            do {
                return try await DCAppAttestService.shared.generateAssertion(keyID, clientDataHash: clientDataHash)
            } catch {
                throw Self.mapped(error)
            }
        }

        /// `DCError` codes the client acts on; any other error unchanged.
        static func mapped(_ error: any Error) -> any Error {
            guard let dc = error as? DCError else { return error }
            switch dc.code {
            case .featureUnsupported: return AppAttestServiceError.unsupported
            case .invalidKey: return AppAttestServiceError.invalidKey
            case .serverUnavailable: return AppAttestServiceError.serverUnavailable
            case .invalidInput: return AppAttestServiceError.invalidInput
            default: return error
            }
        }
    }
#endif
