/// What stops an `attest-sim` command before it produces a report.
public enum AttestSimError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A bad option value or combination (the command exits 2).
    case usage(String)
    /// A CA directory or another file that cannot be used.
    case file(String)
    /// The gateway could not be reached, or answered in a way the protocol does not allow.
    case gateway(String)
    /// An exchange with the gateway failed before a response arrived.
    case transport(HTTPClientError)
    /// A server of the simulator (the Apple stand-in) cannot listen.
    case listen(String)

    public var description: String {
        switch self {
        case .usage(let s): s
        case .file(let s): s
        case .gateway(let s): s
        case .transport(let e): e.description
        case .listen(let s): s
        }
    }
}
