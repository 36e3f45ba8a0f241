/// Field names with `_`. CGI, WSGI and PHP turn `X-Key` and `X_Key` into the same variable
/// (`HTTP_X_KEY`), so a client's `X_App_Attest_Verified_Key_Id` would read, on such a backend, as
/// the verified key header the gateway sets. A listener's rule (`listeners[].underscores_in_headers`):
/// `drop` (the default, nginx's `underscores_in_headers off`) leaves every client field whose name
/// has a `_` out of the upstream request; `allow` forwards them, except those that would fold into
/// a field the gateway reads or writes itself (`isInterpretedWhenFolded`) or owns (the proxy's
/// `GatewayOwnedFields`, matched folded by `FieldNames`).
public enum UnderscoreNames {
    /// Whether `name`, with `_` read as `-`, is a field the gateway interprets: Host,
    /// Content-Length, Expect, the hop-by-hop list (`HopByHop.isListed`), Via or Forwarded.
    public static func isInterpretedWhenFolded(_ name: UnsafeRawBufferPointer) -> Bool {
        guard name.count <= 32 else { return false }  // the longest of them has 19 bytes
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { tmp in
            for k in 0..<name.count { tmp[k] = name[k] == 0x5f ? 0x2d : name[k] }
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

    /// Whether a client field named `name` (which has a `_`) stays out of the upstream request.
    @inline(__always)
    public static func drops(_ name: UnsafeRawBufferPointer, dropAll: Bool) -> Bool {
        dropAll || isInterpretedWhenFolded(name)
    }

    /// Whether `name` contains `_`.
    @inline(__always) public static func has(_ name: UnsafeRawBufferPointer) -> Bool {
        HTTPChar.contains(name, 0..<name.count, 0x5f)
    }

    public static func has(_ name: String) -> Bool { name.utf8.contains(0x5f) }
}
