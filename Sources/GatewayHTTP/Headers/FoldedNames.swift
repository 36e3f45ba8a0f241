/// Field names that a CGI-style backend folds into another name. CGI, WSGI and PHP turn `X-Key`
/// and `X_Key` into the same variable (`HTTP_X_KEY`; old Apache CGI does so for every character
/// besides letters and digits), so a client's `X_App_Attest_Verified_Key_Id` or
/// `X.App.Attest.Verified.Key.Id` would read, on such a backend, as the verified key header the
/// gateway sets. A name is foldable when it has a character other than `A-Z a-z 0-9 -` (`_`, or one
/// of the other token characters `! # $ % & ' * + . ^ \` | ~`).
///
/// A listener's rule (`listeners[].underscores_in_headers`): `drop` (the default: nginx's
/// `underscores_in_headers off` with `ignore_invalid_headers on`) leaves every client field with a
/// foldable name out of the upstream request; `allow` forwards them, except those that fold into a
/// field the gateway interprets (`isInterpretedWhenFolded`) or owns (the proxy's
/// `GatewayOwnedFields`, which `FieldNames` matches folded).
public enum FoldedNames {
    /// A name byte as a CGI-style backend reads it: letters lowercase, digits and `-` as they are,
    /// anything else `-`.
    @inline(__always) public static func fold(_ c: UInt8) -> UInt8 {
        switch c {
        case 0x41...0x5a: c | 0x20
        case 0x61...0x7a, 0x30...0x39, 0x2d: c
        default: 0x2d
        }
    }

    /// Whether `name`, folded, is a field the gateway interprets: Host, Content-Length, Expect, the
    /// hop-by-hop list (`HopByHop.isListed`), Via or Forwarded.
    public static func isInterpretedWhenFolded(_ name: UnsafeRawBufferPointer) -> Bool {
        guard name.count <= 32 else { return false }  // the longest of them has 19 bytes
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { tmp in
            for k in 0..<name.count { tmp[k] = fold(name[k]) }
            let folded = UnsafeRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(tmp)[0..<name.count])
            if HopByHop.isListed(folded) { return true }
            switch folded.count {
            case 3: return equalsIgnoringCase(folded, "Via")
            case 4: return equalsIgnoringCase(folded, "Host")
            case 6: return equalsIgnoringCase(folded, "Expect")
            case 9: return equalsIgnoringCase(folded, "Forwarded")
            case 14: return equalsIgnoringCase(folded, "Content-Length")
            default: return false
            }
        }
    }

    public static func isInterpretedWhenFolded(_ name: String) -> Bool {
        var n = name
        return n.withUTF8 { isInterpretedWhenFolded(UnsafeRawBufferPointer($0)) }
    }

    /// Whether a client field with the foldable name `name` stays out of the upstream request.
    @inline(__always)
    public static func drops(_ name: UnsafeRawBufferPointer, dropAll: Bool) -> Bool {
        dropAll || isInterpretedWhenFolded(name)
    }

    /// Whether `name` has a character other than `A-Z a-z 0-9 -`.
    @inline(__always) public static func isFoldable(_ name: UnsafeRawBufferPointer) -> Bool {
        for c in name where fold(c) == 0x2d && c != 0x2d { return true }
        return false
    }

    public static func isFoldable(_ name: String) -> Bool {
        for c in name.utf8 where fold(c) == 0x2d && c != 0x2d { return true }
        return false
    }
}
