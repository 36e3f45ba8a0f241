import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

public enum RegistrationResult: Sendable {
    case registered(RegisteredKey)
    case refused(Explanation)
}
