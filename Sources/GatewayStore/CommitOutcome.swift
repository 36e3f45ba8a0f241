import GatewayWire

public enum CommitOutcome: Sendable, Equatable {
    /// `previousCounter`: the highest accepted counter before (unchanged when an open counter of the
    /// window was accepted).
    case committed(previousCounter: UInt32)
    case unknownKey
    /// `counter` was not strictly greater than `stored` (the highest accepted counter) and, with a
    /// counter window, not one of the open counters it still accepted: `open` (bit i: counter
    /// `stored − 1 − i`; `CounterWindow.open(width:)` of the commit's window, 0 without one).
    case counterReplay(stored: UInt32, open: UInt64 = 0)
    case challengeRejected(ChallengeRejection)
    /// Every other check passed, but the key's bucket for the commit's `keyRate` holds no token:
    /// nothing changed (challenge unconsumed, counter unmoved); the same request passes once the
    /// bucket refilled, after `retryAfterSeconds` (rounded up, at least 1).
    case keyRateLimited(retryAfterSeconds: Int)
}
