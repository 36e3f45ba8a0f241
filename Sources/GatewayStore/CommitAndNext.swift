import GatewayWire

/// The outcome of `commitAssertion(_:checked:issuing:…)`.
public struct CommitAndNext: Sendable, Equatable {
    public var outcome: CommitOutcome
    /// The next challenge, when one was asked for, the commit went through and it could be issued.
    public var next: IssuedChallenge?
    /// The key's record as the commit left it, when the store read it in the same step (its counter,
    /// receipt risk); nil: the record the gate read stands.
    public var current: DeviceKeyRecord?
    /// The key's policy fields were no longer those `checked` named: nothing changed; the gate reads
    /// the key again and decides afresh.
    public var keyChanged: Bool

    public init(outcome: CommitOutcome, next: IssuedChallenge? = nil, current: DeviceKeyRecord? = nil, keyChanged: Bool = false) {
        self.outcome = outcome
        self.next = next
        self.current = current
        self.keyChanged = keyChanged
    }
}
