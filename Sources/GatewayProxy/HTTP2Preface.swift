import GatewayHTTP
import GatewayIO

/// The HTTP/2 connection preface a client sends first (RFC 9113 §3.4).
public enum HTTP2Preface {
    public static let bytes: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    public enum Verdict: Equatable { case http2, http1, needMore }

    /// Decides from the first bytes of a connection: the full preface → `.http2`; any byte that
    /// differs from it → `.http1`; a matching prefix shorter than the preface → `.needMore`.
    public static func classify(_ buf: UnsafeRawBufferPointer) -> Verdict {
        let n = min(buf.count, bytes.count)
        for i in 0..<n where buf[i] != bytes[i] { return .http1 }
        return n == bytes.count ? .http2 : .needMore
    }
}
