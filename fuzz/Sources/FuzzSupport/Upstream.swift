@_spi(Testing) import GatewayHTTP
@_spi(Fuzzing) import GatewayProxy

/// The upstream request head, as the proxy writes it (FuzzHTTP1, FuzzHTTP2).
public enum Upstream {
    /// Reads what the gateway writes upstream: the writer adds fields, so a head may pass the
    /// client-side limits.
    public static let parser = HTTP1Parser(limits: .init(maxRequestLine: 1 << 20, maxHeaderBytes: 1 << 20, maxHeaderCount: 100_000))

    /// Names the gateway writes itself (besides a route edit's additions).
    public static let gatewayNames = [
        "Host", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "X-Request-Id", "TE",
        "Transfer-Encoding", "Content-Length",
    ]

    public static func isGatewayName(_ name: String) -> Bool { gatewayNames.contains { name.equalsIgnoringASCIICase($0) } }

    /// What `UpstreamRequestHead.write` writes for `head` (ranges of `b`, a `HeadBytes` buffer), with a
    /// fixed request id and proto `https`, the default Host `10.0.0.9:8081`.
    public static func write(
        _ head: HTTPRequestHeadLines, _ b: UnsafeRawBufferPointer, client: String, trustedPeer: Bool = false,
        framing: BodyFraming, edit: HeaderEdit = HeaderEdit(), dropFoldableNames: Bool = true
    ) -> [UInt8] {
        var out: [UInt8] = []
        var client = client
        var proto = "https"
        var id = "0123456789abcdef"
        HeadWriter.appendHead(to: &out) { w in
            client.withUTF8 { c in
                proto.withUTF8 { p in
                    id.withUTF8 { i in
                        UpstreamRequestHead.write(
                            head, b, client: UnsafeRawBufferPointer(c), proto: UnsafeRawBufferPointer(p), trustedPeer: trustedPeer,
                            requestID: UnsafeRawBufferPointer(i), framing: framing, edit: edit, dropFoldableNames: dropFoldableNames,
                            defaultHost: { "10.0.0.9:8081" }, to: &w)
                    }
                }
            }
        }
        return out
    }

    /// `out` parsed back as a whole HTTP/1.1 head; traps otherwise.
    public static func parse(_ out: [UInt8], _ ob: UnsafeRawBufferPointer) -> HTTPRequestHeadLines {
        var fields: [HTTPFieldRange] = []
        let parsed: (HTTPRequestHeadLines, Int)?
        do {
            parsed = try parser.parseRequestHeadLines(ob, reusing: &fields)
        } catch {
            fuzzFail("the upstream head does not parse again: \(error)\n\(String(decoding: out, as: UTF8.self).debugDescription)")
        }
        guard let (u, end) = parsed, end == out.count else {
            fuzzFail("the upstream head is not one whole head\n\(String(decoding: out, as: UTF8.self).debugDescription)")
        }
        guard u.minorVersion == 1 else { fuzzFail("the upstream head is not HTTP/1.1") }
        return u
    }
}
