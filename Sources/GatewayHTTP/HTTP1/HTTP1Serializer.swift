/// HTTP/1.1 message heads and chunk framing as bytes. Field values were validated by the parser (or
/// are the gateway's own); they are written back as Latin-1 so obs-text passes through unchanged.
/// The `append…` forms write into a caller's buffer (a connection's output), the others return arrays.
public enum HTTP1Serializer {
    @_spi(Testing) public static func appendRequestHead(method: String, target: String, headers: HTTPFields, to out: inout [UInt8]) {
        appendRequestLine(method: method, target: target, to: &out)
        appendFields(headers, &out)
    }

    /// "METHOD target HTTP/1.1" CRLF (the fields and the empty line follow).
    static func appendRequestLine(method: String, target: String, to out: inout [UInt8]) {
        appendLatin1(method, &out)
        out.append(0x20)
        appendLatin1(target, &out)
        appendASCII(" HTTP/1.1\r\n", &out)
    }

    @_spi(Testing) public static func responseHead(status: Int, reason: String? = nil, headers: HTTPFields, minorVersion: Int = 1)
        -> [UInt8]
    {
        var out = [UInt8]()
        out.reserveCapacity(128 + headers.count * 32)
        appendResponseHead(status: status, reason: reason, headers: headers, minorVersion: minorVersion, to: &out)
        return out
    }

    public static func appendResponseHead(
        status: Int, reason: String? = nil, headers: HTTPFields, minorVersion: Int = 1,
        to out: inout [UInt8]
    ) {
        appendStatusLine(status: status, minorVersion: minorVersion, to: &out)
        appendLatin1(reason ?? HTTPStatus.reason(status), &out)
        out.append(0x0d)
        out.append(0x0a)
        appendFields(headers, &out)
    }

    /// "HTTP/1.x NNN " (the reason phrase and CRLF follow).
    static func appendStatusLine(status: Int, minorVersion: Int = 1, to out: inout [UInt8]) {
        appendASCII(minorVersion == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", &out)
        if (100...999).contains(status) {
            out.append(UInt8(0x30 + status / 100))
            out.append(UInt8(0x30 + status / 10 % 10))
            out.append(UInt8(0x30 + status % 10))
        } else {
            appendASCII(String(status), &out)
        }
        out.append(0x20)
    }

    /// Appends one chunk (nothing for empty data).
    public static func appendChunk(_ data: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        guard !data.isEmpty else { return }
        appendChunkHeader(size: data.count, to: &out)
        out.append(contentsOf: data)
        out.append(0x0d)
        out.append(0x0a)
    }

    /// The chunk-size line (hex size CRLF) of a chunk of `size` bytes that follows.
    public static func appendChunkHeader(size: Int, to out: inout [UInt8]) {
        precondition(size > 0, "a chunk header for an empty chunk would be the last chunk")
        var shift = (Int.bitWidth - size.leadingZeroBitCount + 3) / 4 * 4
        while shift > 0 {
            shift -= 4
            let d = UInt8((size >> shift) & 0xf)
            out.append(d < 10 ? 0x30 + d : 0x61 + d - 10)
        }
        out.append(0x0d)
        out.append(0x0a)
    }

    public static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)

    private static func appendFields(_ headers: HTTPFields, _ out: inout [UInt8]) {
        for f in headers {
            appendLatin1(f.name, &out)
            out.append(0x3a)
            out.append(0x20)
            appendLatin1(f.value, &out)
            out.append(0x0d)
            out.append(0x0a)
        }
        out.append(0x0d)
        out.append(0x0a)
    }

    @inline(__always)
    private static func appendASCII(_ s: StaticString, _ out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    private static func appendASCII(_ s: String, _ out: inout [UInt8]) { out.append(contentsOf: s.utf8) }

    /// Latin-1 bytes of `s`: its UTF-8 bytes as they are when all are ASCII (the common case), else
    /// one byte per scalar (`?` for scalars above U+00FF, which the parser never produces).
    static func appendLatin1(_ s: String, _ out: inout [UInt8]) {
        let ascii: Bool? = s.utf8.withContiguousStorageIfAvailable { u in
            var i = 0
            while i < u.count {
                if u[i] >= 0x80 { return false }
                i += 1
            }
            out.append(contentsOf: u)
            return true
        }
        if ascii == true { return }
        for u in s.unicodeScalars { out.append(u.value < 256 ? UInt8(u.value) : UInt8(ascii: "?")) }
    }
}

public enum HTTPStatus {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 204: "No Content"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 417: "Expectation Failed"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}
