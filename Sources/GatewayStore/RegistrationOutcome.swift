import GatewayWire

public enum RegistrationOutcome: Sendable, Equatable {
    /// Stored and durable. `existing`: the key had been registered before (its counter kept).
    case registered(existing: Bool)
    case challengeRejected(ChallengeRejection)
    /// The key id is registered to another app id (`registeredAppID`); nothing changed.
    case appConflict(registeredAppID: String)
    /// The key was re-registered `KeyLimits.maxReregistrations` times in its current window;
    /// nothing changed. The window ends in `retryAfterMillis`.
    case reregistrationLimited(retryAfterMillis: Int64)
    /// A new key, and the store holds `KeyLimits.maxKeys` keys already; nothing changed. Keys
    /// registered before keep working and may re-register.
    case keyCapacity(maxKeys: Int)
}
