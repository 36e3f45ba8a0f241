import GatewayHTTP

/// `X-App-Attest-Account` (keys per account, issue 27): an upstream's response field naming the
/// account a verified key belongs to. Only the gateway reads it: it never reaches a client, on any
/// route and with any status (the byte writers and the string path both leave it out), and on a
/// verified request the route's `AccountFieldTap` reads it from the upstream's bytes, without
/// turning the head into strings.
public enum AccountResponseField {
    public static let name = "X-App-Attest-Account"
    static let nameBytes: StaticString = "X-App-Attest-Account"
    static let length = 20

    /// Whether the field named `name` is it (any ASCII case).
    @inline(__always)
    static func matches(_ name: UnsafeRawBufferPointer) -> Bool {
        name.count == length && equalsIgnoringCase(name, nameBytes)
    }

    /// The first such field's value in the upstream's head, or nil.
    static func value(in r: HTTPResponseHeadLines, _ buf: UnsafeRawBufferPointer) -> String? {
        for f in r.fields where matches(UnsafeRawBufferPointer(rebasing: buf[f.name])) {
            return String(decoding: UnsafeRawBufferPointer(rebasing: buf[f.value]), as: UTF8.self)
        }
        return nil
    }
}

/// A verified request's reading of the upstream's `X-App-Attest-Account` (`Forward.accountTap`):
/// `observe` gets the value (on the loop) when the response head has one.
public struct AccountFieldTap {
    public let observe: (String) -> Void

    public init(observe: @escaping (String) -> Void) { self.observe = observe }

    /// Runs `observe` if the head names an account.
    func read(_ r: HTTPResponseHeadLines, _ buf: UnsafeRawBufferPointer) {
        if let value = AccountResponseField.value(in: r, buf) { observe(value) }
    }
}
